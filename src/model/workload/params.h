// Typed reading of a workload spec's key=value parameters with defaults and ranges. The first
// problem (bad number, out of range, unknown key) is kept as a message naming the key.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>

namespace sluice::workload {

class Params {
 public:
  Params(std::string owner, const std::map<std::string, std::string>& values)
      : owner_(std::move(owner)), values_(values) {}

  int64_t integer(const std::string& key, int64_t def, int64_t lo, int64_t hi);
  double real(const std::string& key, double def, double lo, double hi);
  std::string text(const std::string& key, const std::string& def);
  bool flag(const std::string& key, bool def);

  // Call after reading every key: reports keys that no reader asked for.
  const std::string& finish();
  const std::string& error() const { return error_; }
  bool ok() const { return error_.empty(); }
  // Records a problem (only the first is kept).
  void fail(const std::string& msg);

 private:
  std::string owner_;
  std::map<std::string, std::string> values_;
  std::set<std::string> used_;
  std::string error_;
};

}  // namespace sluice::workload
