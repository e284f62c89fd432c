// Arrival processes for open-loop load (../shared/reference/workloads.md):
//   poisson      exponential gaps with mean 1/rate (the honest way to show queueing);
//   gamma        gamma-distributed gaps with mean 1/rate and shape `burstiness` (1 = Poisson,
//                < 1 burstier, > 1 smoother), as vLLM's bench_serving;
//   concurrency  closed loop: the driver keeps `concurrency` requests in flight, offsets are 0.
// All samplers are written out here (no std:: distributions) so a seed gives the same arrivals on
// every standard library.
#pragma once
#include <random>
#include <string>

#include "core/time.h"

namespace sluice::workload {

enum class ArrivalKind { poisson, gamma, concurrency };

struct ArrivalSpec {
  ArrivalKind kind = ArrivalKind::poisson;
  double rate = 1.0;        // requests per second (poisson, gamma)
  double burstiness = 1.0;  // gamma shape
  int concurrency = 1;      // closed loop

  // Empty when valid, else what is wrong.
  std::string validate() const;
  std::string describe() const;
};

// Parses "poisson", "gamma" or "concurrency" (the numbers come from separate options).
bool parse_arrival_kind(const std::string& s, ArrivalKind& out);

class ArrivalProcess {
 public:
  ArrivalProcess(const ArrivalSpec& spec, uint64_t seed);
  // The next arrival offset (non-decreasing); always 0 in concurrency mode.
  Duration next();

 private:
  double gap_seconds();
  ArrivalSpec spec_;
  std::mt19937_64 rng_;
  double t_ = 0;
};

// Samplers (exposed for tests).
double sample_exponential(std::mt19937_64& rng, double mean);
double sample_normal(std::mt19937_64& rng);
double sample_gamma(std::mt19937_64& rng, double shape, double scale);

}  // namespace sluice::workload
