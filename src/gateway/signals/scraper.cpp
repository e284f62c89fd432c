#include "gateway/signals/scraper.h"

#include <xxhash.h>

#include <atomic>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "core/picker/engine_metrics.h"
#include "core/prom_text.h"
#include "core/url.h"
#include "gateway/signals/http_get.h"

namespace sluice {

namespace asio = boost::asio;
namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxMetricsBytes = 16u << 20;
}  // namespace

struct Scrapers::Impl {
  asio::strand<asio::io_context::executor_type> strand;
  std::atomic<bool> stopping{false};
  std::vector<std::shared_ptr<asio::cancellation_signal>> signals;  // touched on the strand only
  mutable std::mutex mu;
  std::vector<ScrapeStatus> status;
  explicit Impl(asio::io_context& io) : strand(asio::make_strand(io)) {}
};

namespace {

struct ScrapeFetch {
  bool ok = false;
  std::string body;
  std::string error;
};

// GET `target` on `c` within `timeout` (the connection reconnects when needed); ok on a 200.
asio::awaitable<ScrapeFetch> fetch(HttpGetConnection& c, const std::string& target, Duration timeout) {
  HttpGetResult r = co_await c.get(target, timeout, kMaxMetricsBytes, "text/plain;version=0.0.4");
  ScrapeFetch out;
  if (!r.error.empty()) out.error = std::move(r.error);
  else if (r.status != 200) out.error = "status " + std::to_string(r.status);
  else {
    out.ok = true;
    out.body = std::move(r.body);
  }
  co_return out;
}

asio::awaitable<void> scrape_loop(std::shared_ptr<Scrapers::Impl> impl, PoolRouter* router, size_t index,
                                  size_t status_slot, std::function<Time()> now, std::shared_ptr<const void> keep) {
  const EndpointConfig ep = router->config().endpoints.at(index);
  const ScrapeConfig sc = router->config().scrape;
  HttpGetConnection conn(ep.address.host, ep.address.port, "sluice-scraper", true);
  std::unique_ptr<HttpGetConnection> dcgm;
  std::string dcgm_target;
  if (!ep.duty_cycle_url.empty()) {
    std::string error;  // the config validated the URL already
    if (auto u = parse_http_url(ep.duty_cycle_url, error)) {
      dcgm = std::make_unique<HttpGetConnection>(u->host, u->port, "sluice-scraper", true);
      dcgm_target = u->target.empty() ? "/metrics" : u->target;
    } else {
      spdlog::warn("scraper {}/{}: ignoring duty_cycle_url: {}", router->config().name, ep.name, error);
    }
  }
  // Frozen metrics: an engine whose exposition does not change by a byte while this gateway keeps
  // sending it requests is not reporting live values (a wedged exporter, a cache in front of it).
  // Its scrape then counts as failed, so its signals age into staleness and the picker falls back
  // to the gateway's own accounting. An idle engine's unchanged body is fine: no picks, no suspicion.
  constexpr int64_t kFrozenAfterPicks = 5;
  uint64_t last_body_hash = 0;
  int64_t picks_at_change = router->picks_total(index);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  while (!impl->stopping.load()) {
    const auto started = std::chrono::steady_clock::now();
    router->on_scrape_start(index);
    ScrapeFetch f = co_await fetch(conn, ep.metrics_path, sc.timeout);
    if (impl->stopping.load()) break;  // cancelled by stop(): not the endpoint's fault
    std::string error = f.error;
    if (f.ok) {
      const uint64_t body_hash = XXH3_64bits(f.body.data(), f.body.size());
      const int64_t picks = router->picks_total(index);
      if (body_hash != last_body_hash) {
        last_body_hash = body_hash;
        picks_at_change = picks;
      } else if (picks - picks_at_change >= kFrozenAfterPicks) {
        f.ok = false;
        error = "metrics frozen: unchanged while requests were sent";
      }
    }
    if (f.ok) {
      PromText text = parse_prom_text(f.body);
      EngineMetricsResult m = map_engine_metrics(text, ep.engine);
      if (m.recognized) {
        if (dcgm) {
          ScrapeFetch d = co_await fetch(*dcgm, dcgm_target, sc.timeout);
          if (d.ok) {
            if (auto duty = map_duty_cycle(parse_prom_text(d.body), ep.duty_cycle_gpus)) m.signals.duty_cycle = *duty;
          }
        }
        m.signals.scraped_at = now();
        router->update_signals(index, std::move(m.signals));
      } else {
        error = m.error;
      }
    }
    if (!error.empty()) router->record_scrape_error(index);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    {
      std::lock_guard lock(impl->mu);
      auto& st = impl->status[status_slot];
      if (error.empty()) {
        ++st.ok_total;
      } else {
        if (st.last_error != error) spdlog::debug("scraper {}/{}: {}", st.pool, st.endpoint, error);
        ++st.errors_total;
      }
      st.last_error = error;
      st.last_duration_ms = ms;
    }
    if (impl->stopping.load()) break;
    timer.expires_at(started + sc.interval);
    co_await timer.async_wait(use_tuple);
  }
}

}  // namespace

void Scrapers::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  asio::post(impl_->strand, [impl = impl_] {
    for (auto& s : impl->signals) s->emit(asio::cancellation_type::terminal);
  });
}

bool Scrapers::stopped() const { return !impl_ || impl_->stopping.load(); }

std::vector<ScrapeStatus> Scrapers::status() const {
  if (!impl_) return {};
  std::lock_guard lock(impl_->mu);
  return impl_->status;
}

std::shared_ptr<Scrapers> start_scrapers(asio::io_context& io, const std::vector<PoolRouter*>& routers,
                                         std::function<Time()> now, std::shared_ptr<const void> keep) {
  auto s = std::make_shared<Scrapers>();
  s->impl_ = std::make_shared<Scrapers::Impl>(io);
  auto& impl = *s->impl_;
  for (PoolRouter* r : routers) {
    if (!r) continue;
    for (size_t i = 0; i < r->config().endpoints.size(); ++i)
      impl.status.push_back({r->config().name, r->config().endpoints[i].name, 0, 0, 0, {}});
  }
  size_t slot = 0;
  for (PoolRouter* r : routers) {
    if (!r) continue;
    for (size_t i = 0; i < r->config().endpoints.size(); ++i) {
      auto sig = std::make_shared<asio::cancellation_signal>();
      impl.signals.push_back(sig);
      asio::co_spawn(impl.strand, scrape_loop(s->impl_, r, i, slot++, now, keep),
                     asio::bind_cancellation_slot(sig->slot(), asio::detached));
    }
  }
  return s;
}

}  // namespace sluice
