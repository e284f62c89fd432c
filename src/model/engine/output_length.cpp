#include "model/engine/output_length.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <vector>

namespace sluice::engine {

namespace {
bool parse_num(std::string_view s, double& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && std::isfinite(out);
}
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      parts.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return parts;
}
}  // namespace

std::optional<OutputLengthDist> OutputLengthDist::parse(std::string_view spec, std::string* error) {
  auto fail = [&](std::string msg) -> std::optional<OutputLengthDist> {
    if (error) *error = "output length '" + std::string(spec) + "': " + msg;
    return std::nullopt;
  };
  const auto parts = split(spec, ':');
  OutputLengthDist d;
  if (parts.size() == 1) {
    if (!parse_num(parts[0], d.a) || d.a < 1) return fail("expected a positive number");
    d.kind = Kind::fixed;
    return d;
  }
  if (parts.size() != 3) return fail("expected N, uniform:LO:HI or lognormal:MEDIAN:SIGMA");
  if (!parse_num(parts[1], d.a) || !parse_num(parts[2], d.b)) return fail("parameters must be numbers");
  if (parts[0] == "uniform") {
    if (d.a < 1 || d.b < d.a) return fail("need 1 <= LO <= HI");
    d.kind = Kind::uniform;
  } else if (parts[0] == "lognormal") {
    if (d.a < 1 || d.b < 0 || d.b > 5) return fail("need MEDIAN >= 1 and 0 <= SIGMA <= 5");
    d.kind = Kind::lognormal;
  } else {
    return fail("unknown distribution '" + std::string(parts[0]) + "'");
  }
  return d;
}

int64_t OutputLengthDist::sample(std::mt19937_64& rng) const {
  double v = a;
  switch (kind) {
    case Kind::fixed: break;
    case Kind::uniform:
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(int64_t(a), int64_t(b))(rng));
      break;
    case Kind::lognormal: v = a * std::exp(std::normal_distribution<double>(0.0, b)(rng)); break;
  }
  return std::max<int64_t>(1, static_cast<int64_t>(std::llround(std::min(v, 1e9))));
}

}  // namespace sluice::engine
