// Passive outlier ejection (after Envoy's outlier detection, adapted to LLM fleets).
//
// Algorithm: every finished upstream attempt reports success or failure. Only server-side failures
// count: a 5xx status, a connect error, a reset or a timeout. Client errors (4xx, including
// "context too long") never count against a replica (the SGLang gateway's published failure: 400s
// opened every breaker). After `consecutive_failures` failures in a row (default 5) the endpoint is
// ejected for base_ejection x times_ejected (default 30 s x n, capped at max_ejection, 300 s), unless
// that would eject more than max_ejected_fraction of the pool (default 0.5; at least one endpoint may
// always be ejected in a pool of two or more). When the ejection time passes, the endpoint returns
// with its failure streak reset; times_ejected decays by one for every healthy base_ejection period.
#pragma once
#include <cstddef>
#include <vector>

#include "core/time.h"

namespace sluice {

struct OutlierConfig {
  int consecutive_failures = 5;
  Duration base_ejection = std::chrono::seconds(30);
  Duration max_ejection = std::chrono::seconds(300);
  double max_ejected_fraction = 0.5;
};

enum class AttemptResult { success, client_error, server_error, connect_error, timeout };

class OutlierDetector {
 public:
  OutlierDetector(size_t endpoints, OutlierConfig cfg = {});

  // Records an attempt; returns true when this report ejected the endpoint.
  bool record(size_t endpoint, AttemptResult result, Time now);
  // True while the endpoint is ejected at `now` (un-ejects lazily when the time has passed).
  bool ejected(size_t endpoint, Time now);
  size_t ejected_count(Time now);
  int times_ejected(size_t endpoint) const { return state_.at(endpoint).times_ejected; }

 private:
  struct State {
    int streak = 0;
    int times_ejected = 0;
    bool ejected = false;
    Time until{};
    Time healthy_since{};
  };
  void refresh(State& s, Time now);

  OutlierConfig cfg_;
  std::vector<State> state_;
};

}  // namespace sluice
