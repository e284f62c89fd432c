#include "gateway/gateway.h"

#include <fmt/format.h>

#include <chrono>

#include "gateway/observability/endpoint_metrics.h"

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
    : startup_(config), seed_(options.seed), epoch_(std::chrono::steady_clock::now()), metrics_(registry_),
      access_log_(options.access_log) {
  current_.store(build_generation(std::move(config), nullptr, metrics_, seed_));

  // Series whose values live in the current generation's routers, and the admission layer's.
  registry_.add_collector([this](std::string& out) {
    const auto gen = current();
    append_endpoint_metrics(out, gen->pools, now());
    if (gen->admission) gen->admission->render(out);
    out += fmt::format("# HELP sluice_active_requests Requests being served by the gateway.\n"
                       "# TYPE sluice_active_requests gauge\nsluice_active_requests {}\n"
                       "# HELP sluice_open_connections Open client connections.\n"
                       "# TYPE sluice_open_connections gauge\nsluice_open_connections {}\n"
                       "# HELP sluice_config_generation Config generation in use (1 at start, +1 per applied reload).\n"
                       "# TYPE sluice_config_generation gauge\nsluice_config_generation {}\n",
                       active_requests.load(), connections.load(), gen->number);
  });
}

Time Gateway::now() const {
  return std::chrono::duration_cast<Time>(std::chrono::steady_clock::now() - epoch_);
}

bool Gateway::ready() const {
  if (draining.load()) return false;
  const auto gen = current();
  for (const auto& [name, pool] : gen->pools) {
    bool any = false;
    for (size_t i = 0; i < pool->router.size() && !any; ++i) any = pool->router.healthy(i);
    if (!any) return false;
  }
  return true;
}

void Gateway::complete(const RequestRecord& r) { complete(r, *current()); }

void Gateway::complete(const RequestRecord& r, const Generation& gen) {
  if (r.outcome == Outcome::ok && r.status == 200) {
    auto it = gen.ok_requests.find(r.model);
    const PoolRuntime* pool = gen.pool(r.pool);
    if (it != gen.ok_requests.end() && pool) {
      it->second->inc();
      pool->series.duration->observe(to_seconds(r.duration));
      if (r.ttft) pool->series.ttft->observe(to_seconds(*r.ttft));
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
