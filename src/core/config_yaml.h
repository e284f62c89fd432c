// The YAML field readers every config parser uses (core/config.cpp,
// core/admission/admission_config.cpp), with the one error type (core/config_error.h). Strict: a
// value of the wrong type or out of range, or an unknown key, throws ConfigError with the field's
// path first ("pools[0].endpoints[1].address: expected host:port"). Parsing is not on the data
// path: the exception unwinds to the loader's entry point.
#pragma once
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>

#include "core/config_error.h"
#include "core/time.h"

namespace sluice {

namespace config_yaml {

// Throws ConfigError("<path>: <msg>").
[[noreturn]] void fail(const std::string& path, const std::string& msg);

// `node` must be a mapping whose keys are plain strings among `allowed`.
void check_keys(const YAML::Node& node, const std::string& path, std::initializer_list<const char*> allowed);

// The node as T, or "expected <what>".
template <typename T>
T get(const YAML::Node& node, const std::string& path, const char* what) {
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    fail(path, std::string("expected ") + what);
  }
}

int64_t get_int(const YAML::Node& n, const std::string& path, int64_t lo,
                int64_t hi = std::numeric_limits<int64_t>::max());
// A number in (0, 1e9].
double get_positive(const YAML::Node& n, const std::string& path);
// Milliseconds in [lo, hi] (default 1 ms .. 1 day).
Duration get_ms(const YAML::Node& n, const std::string& path, int64_t lo = 1, int64_t hi = 86'400'000);

}  // namespace config_yaml
}  // namespace sluice
