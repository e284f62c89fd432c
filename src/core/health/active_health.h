// Active health checking state per endpoint: the driver probes GET /health every interval and
// reports the result here. An endpoint goes down after `unhealthy_threshold` consecutive failed
// probes (default 3) and comes back after `healthy_threshold` consecutive successes (default 2).
// Endpoints start healthy so a fresh gateway serves at once; the first failures take it down.
#pragma once
#include <cstddef>
#include <vector>

namespace sluice {

struct ActiveHealthConfig {
  int unhealthy_threshold = 3;
  int healthy_threshold = 2;
};

class ActiveHealth {
 public:
  ActiveHealth(size_t endpoints, ActiveHealthConfig cfg = {}) : cfg_(cfg), state_(endpoints) {}

  // Returns true when the endpoint's health changed with this probe.
  bool record(size_t endpoint, bool probe_ok) {
    auto& s = state_.at(endpoint);
    if (probe_ok) {
      s.failures = 0;
      if (!s.healthy && ++s.successes >= cfg_.healthy_threshold) {
        s.healthy = true;
        s.successes = 0;
        return true;
      }
    } else {
      s.successes = 0;
      if (s.healthy && ++s.failures >= cfg_.unhealthy_threshold) {
        s.healthy = false;
        s.failures = 0;
        return true;
      }
    }
    return false;
  }
  bool healthy(size_t endpoint) const { return state_.at(endpoint).healthy; }

 private:
  struct State {
    bool healthy = true;
    int failures = 0;
    int successes = 0;
  };
  ActiveHealthConfig cfg_;
  std::vector<State> state_;
};

}  // namespace sluice
