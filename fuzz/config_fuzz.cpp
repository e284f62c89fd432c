// libFuzzer target: the config loader either returns a valid config or throws ConfigError with a
// message; any other exception or a crash is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    auto cfg = sluice::parse_config(text);
    if (cfg->pools.empty() || cfg->models.empty()) __builtin_trap();
  } catch (const sluice::ConfigError&) {
  }
  return 0;
}
