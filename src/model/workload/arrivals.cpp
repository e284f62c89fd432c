#include "model/workload/arrivals.h"

#include <cmath>
#include <fmt/format.h>

#include "model/workload/text.h"

namespace sluice::workload {

std::string ArrivalSpec::validate() const {
  switch (kind) {
    case ArrivalKind::poisson:
      if (!(rate > 0) || !std::isfinite(rate)) return "rate must be a positive number of requests/s";
      return "";
    case ArrivalKind::gamma:
      if (!(rate > 0) || !std::isfinite(rate)) return "rate must be a positive number of requests/s";
      if (!(burstiness > 0) || !std::isfinite(burstiness)) return "burstiness (gamma shape) must be positive";
      return "";
    case ArrivalKind::concurrency:
      if (concurrency < 1) return "concurrency must be at least 1";
      return "";
  }
  return "unknown arrival kind";
}

std::string ArrivalSpec::describe() const {
  switch (kind) {
    case ArrivalKind::poisson: return fmt::format("poisson {:g} req/s", rate);
    case ArrivalKind::gamma: return fmt::format("gamma {:g} req/s burstiness {:g}", rate, burstiness);
    case ArrivalKind::concurrency: return fmt::format("concurrency {}", concurrency);
  }
  return "?";
}

bool parse_arrival_kind(const std::string& s, ArrivalKind& out) {
  if (s == "poisson") out = ArrivalKind::poisson;
  else if (s == "gamma") out = ArrivalKind::gamma;
  else if (s == "concurrency") out = ArrivalKind::concurrency;
  else return false;
  return true;
}

double sample_exponential(std::mt19937_64& rng, double mean) {
  return -std::log1p(-uniform01(rng)) * mean;
}

double sample_normal(std::mt19937_64& rng) {
  // Box-Muller; u1 in (0, 1].
  const double u1 = 1.0 - uniform01(rng);
  const double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

double sample_gamma(std::mt19937_64& rng, double shape, double scale) {
  // Marsaglia and Tsang (2000); shape < 1 via the boost Gamma(a) = Gamma(a + 1) * U^(1/a).
  if (shape < 1.0) {
    const double u = 1.0 - uniform01(rng);
    return sample_gamma(rng, shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = sample_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = 1.0 - uniform01(rng);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v * scale;
  }
}

ArrivalProcess::ArrivalProcess(const ArrivalSpec& spec, uint64_t seed) : spec_(spec) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), 0xa771u};
  rng_.seed(seq);
}

double ArrivalProcess::gap_seconds() {
  switch (spec_.kind) {
    case ArrivalKind::poisson: return sample_exponential(rng_, 1.0 / spec_.rate);
    case ArrivalKind::gamma:
      return sample_gamma(rng_, spec_.burstiness, 1.0 / (spec_.rate * spec_.burstiness));
    case ArrivalKind::concurrency: return 0;
  }
  return 0;
}

Duration ArrivalProcess::next() {
  t_ += gap_seconds();
  return from_seconds(t_);
}

}  // namespace sluice::workload
