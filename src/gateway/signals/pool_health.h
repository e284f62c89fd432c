// PoolHealth: one pool's endpoint eligibility and retry budget in the live gateway. It joins the
// pure pieces in core/health/ and feeds PoolRouter::set_healthy:
//   eligible(endpoint) = active-healthy (ActiveHealth: GET /health, 3 failures down, 2 successes up)
//                        and not ejected (OutlierDetector: consecutive 5xx / connect errors / resets /
//                        timeouts from real requests; 4xx never count; exponential ejection time;
//                        at most max_ejected_fraction of the pool ejected).
// Ejection ends lazily: refresh() (called before each pick when something is ejected, and by every
// probe) re-admits endpoints whose ejection time has passed. The pool's RetryBudget (20% of
// requests + a floor per second) bounds retries. One mutex guards the three pure objects; the
// router keeps its own lock. Thread-safe.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>

#include "core/health/active_health.h"
#include "core/health/outlier_detector.h"
#include "core/health/retry_budget.h"
#include "core/picker/pool_router.h"

namespace sluice {

class PoolHealth {
 public:
  explicit PoolHealth(PoolRouter& router);

  PoolRouter& router() { return router_; }
  // An active probe's result.
  void on_probe(size_t endpoint, bool ok, Time now);
  // A finished upstream attempt of a real request (passive outlier detection).
  void on_attempt(size_t endpoint, AttemptResult result, Time now);
  // Re-admits endpoints whose ejection has expired (cheap when nothing is ejected).
  void refresh(Time now);
  // Retry budget: count one request; ask for one retry (true = allowed and counted).
  void on_request(Time now);
  bool try_retry(Time now);

  bool active_healthy(size_t endpoint) const;
  bool ejected(size_t endpoint, Time now);

  // Counters for /metrics (health_checker.h: add_health_metrics).
  struct EndpointCounters {
    std::atomic<int64_t> ejections{0};
    std::atomic<int64_t> probe_failures{0};
  };
  const EndpointCounters& counters(size_t endpoint) const { return counters_[endpoint]; }
  int64_t retries_total() const { return retries_.load(std::memory_order_relaxed); }
  int64_t retries_refused_total() const { return retries_refused_.load(std::memory_order_relaxed); }

 private:
  void apply_locked(size_t endpoint, Time now);

  PoolRouter& router_;
  mutable std::mutex mu_;
  ActiveHealth active_;
  OutlierDetector outlier_;
  RetryBudget budget_;
  std::atomic<int> ejected_{0};  // a hint: endpoints believed ejected (refresh skips when 0)
  std::unique_ptr<EndpointCounters[]> counters_;
  std::atomic<int64_t> retries_{0}, retries_refused_{0};
};

// The AttemptResult of an upstream response status.
inline AttemptResult attempt_result_of_status(int status) {
  if (status >= 500) return AttemptResult::server_error;
  if (status >= 400) return AttemptResult::client_error;
  return AttemptResult::success;
}

}  // namespace sluice
