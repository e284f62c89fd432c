// How many tokens a simulated request generates when the client gives no max_tokens.
// Spec strings: "N" (fixed), "uniform:LO:HI" (inclusive), "lognormal:MEDIAN:SIGMA".
// Samples are at least 1; the caller caps them to the room left under max_model_len.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace sluice::engine {

struct OutputLengthDist {
  enum class Kind { fixed, uniform, lognormal } kind = Kind::fixed;
  double a = 128, b = 0;

  // nullopt (and `error` set) when the spec is malformed.
  static std::optional<OutputLengthDist> parse(std::string_view spec, std::string* error = nullptr);
  int64_t sample(std::mt19937_64& rng) const;
};

}  // namespace sluice::engine
