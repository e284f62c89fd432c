#include "core/config_yaml.h"

#include <fmt/format.h>

#include <set>

namespace sluice::config_yaml {

void fail(const std::string& path, const std::string& msg) { throw ConfigError(path + ": " + msg); }

void check_keys(const YAML::Node& node, const std::string& path, std::initializer_list<const char*> allowed) {
  if (!node.IsMap()) fail(path, "expected a mapping");
  std::set<std::string> ok(allowed.begin(), allowed.end());
  std::set<std::string> seen;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) fail(path, "keys must be plain strings");
    auto key = kv.first.as<std::string>();
    // yaml-cpp keeps the first of two equal keys: the second would be ignored without a word.
    if (!seen.insert(key).second) fail(path.empty() ? key : path + "." + key, "duplicate key");
    if (!ok.count(key)) {
      std::string list;
      for (const auto& a : ok) list += (list.empty() ? "" : ", ") + a;
      fail(path.empty() ? key : path + "." + key, "unknown key (allowed: " + list + ")");
    }
  }
}

int64_t get_int(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi) {
  const auto v = get<int64_t>(n, path, "an integer");
  if (v < lo || v > hi) fail(path, fmt::format("must be between {} and {}, got {}", lo, hi, v));
  return v;
}

double get_positive(const YAML::Node& n, const std::string& path) {
  const auto v = get<double>(n, path, "a number");
  if (!(v > 0) || v > 1e9) fail(path, "must be a number > 0");
  return v;
}

Duration get_ms(const YAML::Node& n, const std::string& path, int64_t lo, int64_t hi) {
  return std::chrono::milliseconds(get_int(n, path, lo, hi));
}

}  // namespace sluice::config_yaml
