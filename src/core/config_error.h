// The one error type of config parsing (core/config.cpp, core/admission/admission_config.cpp,
// policy parameters): its message names the field first ("pools[1].endpoints[0]: expected host:port").
#pragma once
#include <stdexcept>

namespace sluice {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace sluice
