#include "model/workload/params.h"

#include <charconv>
#include <cmath>
#include <fmt/format.h>

namespace sluice::workload {

void Params::fail(const std::string& msg) {
  if (error_.empty()) error_ = owner_ + ": " + msg;
}

int64_t Params::integer(const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  int64_t v = 0;
  const auto& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) {
    fail(fmt::format("{}={} is not an integer", key, s));
    return def;
  }
  if (v < lo || v > hi) {
    fail(fmt::format("{}={} is outside [{}, {}]", key, s, lo, hi));
    return def;
  }
  return v;
}

double Params::real(const std::string& key, double def, double lo, double hi) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  const auto& s = it->second;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    fail(fmt::format("{}={} is not a number", key, s));
    return def;
  }
  if (v < lo || v > hi) {
    fail(fmt::format("{}={} is outside [{:g}, {:g}]", key, s, lo, hi));
    return def;
  }
  return v;
}

std::string Params::text(const std::string& key, const std::string& def) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  if (it->second.empty()) fail(key + " is empty");
  return it->second;
}

bool Params::flag(const std::string& key, bool def) {
  used_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return def;
  const auto& s = it->second;
  if (s == "1" || s == "true" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "no") return false;
  fail(fmt::format("{}={} is not a boolean", key, s));
  return def;
}

const std::string& Params::finish() {
  for (const auto& [k, v] : values_)
    if (!used_.count(k)) fail(fmt::format("unknown parameter '{}'", k));
  return error_;
}

}  // namespace sluice::workload
