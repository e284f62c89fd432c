#include "gateway/signals/pool_health.h"

#include <spdlog/spdlog.h>

namespace sluice {

PoolHealth::PoolHealth(PoolRouter& router)
    : router_(router),
      active_(router.size(), ActiveHealthConfig{router.config().health.unhealthy_threshold,
                                                router.config().health.healthy_threshold}),
      outlier_(router.size(), router.config().outlier),
      budget_(RetryBudgetConfig{router.config().retry.budget_ratio, router.config().retry.budget_min_per_second}),
      counters_(new EndpointCounters[router.size()]) {}

void PoolHealth::apply_locked(size_t endpoint, Time now) {
  const bool eligible = active_.healthy(endpoint) && !outlier_.ejected(endpoint, now);
  if (router_.healthy(endpoint) != eligible) {
    router_.set_healthy(endpoint, eligible);
    spdlog::info("endpoint {}/{} is now {} (active check {}, {})", router_.config().name,
                 router_.config().endpoints[endpoint].name, eligible ? "eligible" : "ineligible",
                 active_.healthy(endpoint) ? "healthy" : "unhealthy",
                 outlier_.ejected(endpoint, now) ? "ejected" : "not ejected");
  }
}

void PoolHealth::on_probe(size_t endpoint, bool ok, Time now) {
  if (!ok) counters_[endpoint].probe_failures.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  active_.record(endpoint, ok);
  apply_locked(endpoint, now);
}

void PoolHealth::on_attempt(size_t endpoint, AttemptResult result, Time now) {
  std::lock_guard lock(mu_);
  if (outlier_.record(endpoint, result, now)) {
    ejected_.fetch_add(1, std::memory_order_relaxed);
    counters_[endpoint].ejections.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("endpoint {}/{} ejected after consecutive failures (ejection #{})", router_.config().name,
                 router_.config().endpoints[endpoint].name, outlier_.times_ejected(endpoint));
    apply_locked(endpoint, now);
  }
}

void PoolHealth::refresh(Time now) {
  if (ejected_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard lock(mu_);
  int still = 0;
  for (size_t i = 0; i < router_.size(); ++i) {
    apply_locked(i, now);
    still += outlier_.ejected(i, now) ? 1 : 0;
  }
  ejected_.store(still, std::memory_order_relaxed);
}

void PoolHealth::on_request(Time now) {
  std::lock_guard lock(mu_);
  budget_.on_request(now);
}

bool PoolHealth::try_retry(Time now) {
  bool allowed;
  {
    std::lock_guard lock(mu_);
    allowed = budget_.try_retry(now);
  }
  (allowed ? retries_ : retries_refused_).fetch_add(1, std::memory_order_relaxed);
  return allowed;
}

bool PoolHealth::active_healthy(size_t endpoint) const {
  std::lock_guard lock(mu_);
  return active_.healthy(endpoint);
}

bool PoolHealth::ejected(size_t endpoint, Time now) {
  std::lock_guard lock(mu_);
  return outlier_.ejected(endpoint, now);
}

}  // namespace sluice
