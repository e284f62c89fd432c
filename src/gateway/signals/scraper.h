// The metrics scraper: one coroutine per endpoint of every pool. Each GETs the endpoint's
// metrics path (EndpointConfig::metrics_path, default /metrics) every ScrapeConfig::interval over a
// kept-alive Beast connection with a ScrapeConfig::timeout deadline per scrape (connect included),
// parses the Prometheus text (core/prom_text.h), maps it for the endpoint's engine kind
// (core/picker/engine_metrics.h) and calls PoolRouter::update_signals with scraped_at = now().
// When EndpointConfig::duty_cycle_url ("http://host:port[/path]", a DCGM exporter, path default
// /metrics; parsed by core/url.h) is set, it is fetched in the same cycle and its duty cycle merged in.
// A failure (connect, timeout, non-200, no recognisable engine metrics) calls
// PoolRouter::record_scrape_error and drops the connection; the next cycle reconnects. A failing
// scrape never marks the endpoint unhealthy: its signals just go stale and the picker falls back to
// the gateway's own accounting (load_estimate.h). Scrape age = now - signals.scraped_at
// (PoolRouter::snapshot); errors = EndpointLoad::scrape_errors_total / scrape_failures_in_row.
//
// Usage (gateway):
//   auto scrapers = sluice::start_scrapers(io, routers, [&gw] { return gw.now(); });
//   ...
//   scrapers->stop();   // on shutdown; coroutines end at their next suspension point
// The routers must outlive the io_context's run (or at least every scraper coroutine). The
// coroutines run on a strand of `io`, so `io` may be run by several threads.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "core/picker/pool_router.h"
#include "core/time.h"

namespace sluice {

struct ScrapeStatus {
  std::string pool, endpoint;
  int64_t ok_total = 0, errors_total = 0;
  double last_duration_ms = 0;
  std::string last_error;  // empty after a success
};

class Scrapers {
 public:
  // Stops every scraper coroutine (thread-safe, idempotent).
  void stop();
  bool stopped() const;
  // Per endpoint: scrapes done, errors, last duration and error (for /debug pages and logs).
  std::vector<ScrapeStatus> status() const;

  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Starts one scraper per endpoint of each router. `now` is the gateway's clock (Gateway::now).
// `keep` (optional) is held by every scraper coroutine until it ends: the owner of the routers, so
// they outlive the coroutines even when dropped right after stop().
std::shared_ptr<Scrapers> start_scrapers(boost::asio::io_context& io, const std::vector<PoolRouter*>& routers,
                                         std::function<Time()> now, std::shared_ptr<const void> keep = {});

}  // namespace sluice
