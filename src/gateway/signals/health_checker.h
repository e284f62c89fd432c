// Active health checks: one coroutine per endpoint of every pool with `health.enabled`. Each GETs
// HealthCheckConfig::path (default /health) every interval (default 1 s) on a fresh connection with
// a timeout (connect included) and reports ok (a 2xx) or not to PoolHealth::on_probe, which takes
// the endpoint out after `unhealthy_threshold` failures in a row and back after `healthy_threshold`
// successes. Every probe also re-admits endpoints whose outlier ejection has expired.
//
// Usage (gateway):
//   auto checkers = sluice::start_health_checkers(io, pools, [&gw] { return gw.now(); });
//   ...
//   checkers->stop();   // on shutdown; coroutines end at their next suspension point
// The PoolHealth objects must outlive the coroutines. They run on a strand of `io`.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "core/time.h"
#include "gateway/signals/pool_health.h"

namespace sluice {

class HealthCheckers {
 public:
  void stop();  // thread-safe, idempotent
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

class MetricsRegistry;

// Registers the resilience series: sluice_retries_total{pool}, sluice_retries_refused_total{pool}
// (retries the pool budget refused), sluice_outlier_ejections_total{pool,endpoint},
// sluice_health_check_failures_total{pool,endpoint}. (sluice_endpoint_healthy is the gateway's.)
// `pools` is called at every scrape (the current generation's pools).
void add_health_metrics(MetricsRegistry& registry, std::function<std::vector<std::shared_ptr<PoolHealth>>()> pools);

// `keep` (optional) is held by every check coroutine until it ends (the owner of the pools).
std::shared_ptr<HealthCheckers> start_health_checkers(boost::asio::io_context& io, const std::vector<PoolHealth*>& pools,
                                                      std::function<Time()> now, std::shared_ptr<const void> keep = {});

}  // namespace sluice
