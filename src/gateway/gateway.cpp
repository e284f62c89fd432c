#include "gateway/gateway.h"

#include <fmt/format.h>

#include <chrono>

#include "core/models_list.h"
#include "core/picker/policy_factory.h"
#include "gateway/endpoint_metrics.h"

namespace sluice {

GatewayMetrics::GatewayMetrics(MetricsRegistry& r)
    : requests(r.counter("sluice_requests_total", "Finished requests by outcome.", {"pool", "model", "status", "outcome"})),
      rejects(r.counter("sluice_rejects_total", "Requests refused by the gateway, by reason.", {"pool", "reason"})),
      cancellations(r.counter("sluice_cancellations_total", "Client disconnects by phase.", {"phase"})),
      duration(r.histogram("sluice_request_duration_seconds", "End-to-end request duration at the gateway.", {"pool"},
                           duration_buckets())),
      ttft(r.histogram("sluice_ttft_seconds", "Gateway-measured time to first token.", {"pool"}, ttft_buckets())),
      itl(r.histogram("sluice_itl_seconds", "Gateway-measured gap between streamed token events.", {"pool"},
                      itl_buckets())),
      pick(r.histogram("sluice_pick_duration_seconds", "Picker decision time (ranking every endpoint).", {"pool"},
                       pick_buckets())) {}

Gateway::Gateway(std::shared_ptr<const Config> config, const GatewayOptions& options)
    : config_(std::move(config)),
      epoch_(std::chrono::steady_clock::now()),
      metrics_(registry_),
      access_log_(options.access_log) {
  uint64_t seed = options.seed;
  for (const auto& pool : config_->pools)
    routers_.emplace(pool.name, std::make_unique<PoolRouter>(pool, make_policy(pool, seed++)));
  for (auto& [name, router] : routers_) health_.emplace(name, std::make_unique<PoolHealth>(*router));
  const auto created = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
  models_json_ = models_list_json(*config_, created);
  for (const auto& pool : config_->pools)
    pool_series_.emplace(pool.name, PoolSeries{&metrics_.duration.with({pool.name}), &metrics_.ttft.with({pool.name}),
                                               &metrics_.itl.with({pool.name}), &metrics_.pick.with({pool.name})});
  for (const auto& m : config_->models) ok_requests_.emplace(m.name, &metrics_.requests.with({m.pool, m.name, "200", "ok"}));

  // Endpoint series whose values live in the routers.
  registry_.add_collector([this](std::string& out) {
    append_endpoint_metrics(out, routers_, now());
    out += fmt::format("# HELP sluice_active_requests Requests being served by the gateway.\n"
                       "# TYPE sluice_active_requests gauge\nsluice_active_requests {}\n"
                       "# HELP sluice_open_connections Open client connections.\n"
                       "# TYPE sluice_open_connections gauge\nsluice_open_connections {}\n",
                       active_requests.load(), connections.load());
  });
}

PoolRouter* Gateway::router(std::string_view pool) {
  auto it = routers_.find(pool);
  return it == routers_.end() ? nullptr : it->second.get();
}

PoolHealth* Gateway::health(std::string_view pool) {
  auto it = health_.find(pool);
  return it == health_.end() ? nullptr : it->second.get();
}

std::vector<PoolHealth*> Gateway::pool_healths() {
  std::vector<PoolHealth*> out;
  for (auto& [name, h] : health_) out.push_back(h.get());
  return out;
}

Time Gateway::now() const {
  return std::chrono::duration_cast<Time>(std::chrono::steady_clock::now() - epoch_);
}

bool Gateway::ready() const {
  if (draining.load()) return false;
  for (const auto& [name, router] : routers_) {
    bool any = false;
    for (size_t i = 0; i < router->size() && !any; ++i) any = router->healthy(i);
    if (!any) return false;
  }
  return true;
}

const Gateway::PoolSeries* Gateway::pool_series(std::string_view pool) const {
  auto it = pool_series_.find(pool);
  return it == pool_series_.end() ? nullptr : &it->second;
}

void Gateway::complete(const RequestRecord& r) {
  if (r.outcome == Outcome::ok && r.status == 200) {
    auto it = ok_requests_.find(r.model);
    const PoolSeries* ps = pool_series(r.pool);
    if (it != ok_requests_.end() && ps) {
      it->second->inc();
      ps->duration->observe(to_seconds(r.duration));
      if (r.ttft) ps->ttft->observe(to_seconds(*r.ttft));
      access_log_.write(r);
      return;
    }
  }
  const std::string status = std::to_string(r.status);
  const std::string_view pool = r.pool.empty() ? std::string_view("-") : std::string_view(r.pool);
  // Unknown model names are client-chosen: keep them out of label values (unbounded cardinality).
  const std::string_view model = r.reason == "unknown_model" || r.model.empty() ? std::string_view("-") : std::string_view(r.model);
  metrics_.requests.with({pool, model, status, to_string(r.outcome)}).inc();
  metrics_.duration.with({pool}).observe(to_seconds(r.duration));
  if (r.ttft) metrics_.ttft.with({pool}).observe(to_seconds(*r.ttft));
  if (r.outcome == Outcome::rejected) metrics_.rejects.with({pool, r.reason}).inc();
  if (r.outcome == Outcome::client_cancelled)
    metrics_.cancellations.with({r.reason == "cancelled_queued" ? "queued" : r.cancelled_while_streaming ? "streaming" : "upstream"}).inc();
  access_log_.write(r);
}

}  // namespace sluice
