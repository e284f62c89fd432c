#include "gateway/signals/health_checker.h"

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

#include "gateway/observability/metrics.h"
#include "gateway/signals/http_get.h"

namespace sluice {

namespace asio = boost::asio;

struct HealthCheckers::Impl {
  asio::strand<asio::io_context::executor_type> strand;
  std::atomic<bool> stopping{false};
  std::vector<std::shared_ptr<asio::cancellation_signal>> signals;  // touched on the strand only
  explicit Impl(asio::io_context& io) : strand(asio::make_strand(io)) {}
};

namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// One probe on a fresh connection: true on a 2xx within `timeout`.
asio::awaitable<bool> probe(const Address& addr, const std::string& path, Duration timeout, std::string& error) {
  HttpGetConnection c(addr.host, addr.port, "sluice-health", false);
  HttpGetResult r = co_await c.get(path, timeout, 64u << 10);
  if (!r.error.empty()) {
    error = std::move(r.error);
    co_return false;
  }
  if (r.status < 200 || r.status >= 300) {
    error = "status " + std::to_string(r.status);
    co_return false;
  }
  co_return true;
}

asio::awaitable<void> check_loop(std::shared_ptr<HealthCheckers::Impl> impl, PoolHealth* pool, size_t index,
                                 std::function<Time()> now, std::shared_ptr<const void> keep) {
  const PoolConfig& pc = pool->router().config();
  const Address addr = pc.endpoints.at(index).address;
  const std::string name = pc.name + "/" + pc.endpoints.at(index).name;
  const HealthCheckConfig hc = pc.health;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  std::string last_error;
  while (!impl->stopping.load()) {
    const auto started = std::chrono::steady_clock::now();
    std::string error;
    const bool ok = co_await probe(addr, hc.path, hc.timeout, error);
    if (impl->stopping.load()) break;  // cancelled by stop(): not the endpoint's fault
    if (error != last_error && !error.empty()) spdlog::debug("health check {}: {}", name, error);
    last_error = error;
    pool->on_probe(index, ok, now());
    pool->refresh(now());
    timer.expires_at(started + hc.interval);
    co_await timer.async_wait(use_tuple);
  }
}

}  // namespace

void add_health_metrics(MetricsRegistry& registry, std::function<std::vector<std::shared_ptr<PoolHealth>>()> pools) {
  registry.add_collector([pools = std::move(pools)](std::string& out) {
    const auto all = pools();
    PromWriter w(out);
    w.family("sluice_retries_total", "counter", "Upstream attempts retried on another endpoint.");
    for (const auto& p : all) w.sample("sluice_retries_total", {{"pool", p->router().config().name}}, double(p->retries_total()));
    w.family("sluice_retries_refused_total", "counter", "Retries the pool's retry budget refused.");
    for (const auto& p : all)
      w.sample("sluice_retries_refused_total", {{"pool", p->router().config().name}}, double(p->retries_refused_total()));
    // Per endpoint: one pass per family, so each family's samples follow its HELP/TYPE.
    auto per_endpoint = [&](const char* name, const char* help, auto value) {
      w.family(name, "counter", help);
      for (const auto& p : all) {
        const PoolConfig& pc = p->router().config();
        for (size_t i = 0; i < pc.endpoints.size(); ++i)
          w.sample(name, {{"pool", pc.name}, {"endpoint", pc.endpoints[i].name}}, double(value(p->counters(i))));
      }
    };
    per_endpoint("sluice_outlier_ejections_total", "Passive outlier ejections.",
                 [](const auto& c) { return c.ejections.load(); });
    per_endpoint("sluice_health_check_failures_total", "Failed active health probes.",
                 [](const auto& c) { return c.probe_failures.load(); });
  });
}

void HealthCheckers::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  asio::post(impl_->strand, [impl = impl_] {
    for (auto& s : impl->signals) s->emit(asio::cancellation_type::terminal);
  });
}

std::shared_ptr<HealthCheckers> start_health_checkers(asio::io_context& io, const std::vector<PoolHealth*>& pools,
                                                      std::function<Time()> now, std::shared_ptr<const void> keep) {
  auto h = std::make_shared<HealthCheckers>();
  h->impl_ = std::make_shared<HealthCheckers::Impl>(io);
  for (PoolHealth* p : pools) {
    if (!p || !p->router().config().health.enabled) continue;
    for (size_t i = 0; i < p->router().size(); ++i) {
      auto sig = std::make_shared<asio::cancellation_signal>();
      h->impl_->signals.push_back(sig);
      asio::co_spawn(h->impl_->strand, check_loop(h->impl_, p, i, now, keep),
                     asio::bind_cancellation_slot(sig->slot(), asio::detached));
    }
  }
  return h;
}

}  // namespace sluice
