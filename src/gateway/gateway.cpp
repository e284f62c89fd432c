#include "gateway/gateway.h"

#include "core/metrics/model_labels.h"
#include "core/prom_writer.h"

#include <fmt/format.h>

#include <chrono>
#include <stdexcept>

#include "gateway/observability/endpoint_metrics.h"
#include "gateway/observability/kv_event_metrics.h"
#include "gateway/observability/process_metrics.h"
#include "gateway/render_client.h"
#include "gateway/reload.h"

namespace sluice {


GatewayMetrics::GatewayMetrics(MetricsRegistry& r)
    : requests(r.counter("sluice_requests_total", "Finished requests by outcome.", {"pool", "model", "status", "outcome"})),
      rejects(r.counter("sluice_rejects_total",
                        "Requests refused by the gateway, by reason and tenant (configured tenants: the first 32 by "
                        "name, later ones other; - before or without authentication).",
                        {"pool", "reason", "tenant"})),
      cancellations(r.counter("sluice_cancellations_total", "Client disconnects by phase (stalled: cut for taking no byte of its answer for idle_ms).", {"phase"})),
      client_retries(r.counter("sluice_client_retries_total",
                               "Requests that arrived as a client's retry (x-stainless-retry-count >= 1, sent by the "
                               "OpenAI and Anthropic SDKs), whatever their outcome.",
                               {"pool"})),
      duration(r.histogram("sluice_request_duration_seconds",
                           "End-to-end request duration at the gateway (model: the base model served, adapter: the "
                           "LoRA adapter or -; configured names only).",
                           {"pool", "model", "adapter"}, duration_buckets())),
      ttft(r.histogram("sluice_ttft_seconds", "Gateway-measured time to first token.", {"pool", "model", "adapter"},
                       ttft_buckets())),
      itl(r.histogram("sluice_itl_seconds", "Gateway-measured gap between streamed token events.",
                      {"pool", "model", "adapter"}, itl_buckets())),
      pick(r.histogram("sluice_pick_duration_seconds", "Picker decision time (ranking every endpoint).", {"pool"},
                       pick_buckets())),
      ttft_estimate(r.histogram("sluice_ttft_estimate_ratio",
                                "A streamed request's time to first token from its pick over the TTFT the picker "
                                "expected on the endpoint it chose (1: the picker's model of the engines is right; "
                                "policies with estimates only: sluice).",
                                {"pool"}, ratio_buckets())),
      overhead_family(r.histogram("sluice_gateway_overhead_seconds",
                                  "What the gateway itself costs a request, by phase: read_body, parse, admit (with the "
                                  "queue wait), pick, connect (lease or open an upstream connection), send_request (the "
                                  "request written to the engine's socket: long once the engine stops reading), "
                                  "first_upstream_byte (request sent -> response head: the engine's own time, for "
                                  "comparison).",
                                  {"phase"}, overhead_buckets())),
      overhead_series{&overhead_family.with({"read_body"}), &overhead_family.with({"parse"}),
                      &overhead_family.with({"admit"}), &overhead_family.with({"pick"}),
                      &overhead_family.with({"connect"}), &overhead_family.with({"send_request"}),
                      &overhead_family.with({"first_upstream_byte"})},
      admin_requests(r.counter("sluice_admin_requests_total", "Answers of the admin listener by path and status.",
                               {"path", "status"})) {}

Gateway::Gateway(std::shared_ptr<const Config> config, const GatewayOptions& options)
    : startup_(config), seed_(options.seed), epoch_(std::chrono::steady_clock::now()), metrics_(registry_),
      access_log_(options.access_log), admission_host_(AdmissionHost{registry_, [this] { return now(); }, [this] { return current(); }}) {
  std::string error;
  auto first = build_generation(std::move(config), nullptr, generation_inputs(seed_), error);
  if (!first) throw std::runtime_error("admission: " + error);
  current_.store(std::move(first));
  (void)reload_failures(registry_);  // exported at 0 from the start (an alert compares increases)

  // Series whose values live in the current generation's routers, and the admission layer's.
  registry_.add_collector([this](std::string& out) {
    const auto gen = current();
    append_endpoint_metrics(out, gen->pools, now());
    append_kv_event_metrics(out, gen->pools, now());
    append_render_metrics(out, gen->pools);
    gen->admission->render(out);
    PromWriter w(out);
    w.family("sluice_active_requests", "gauge", "Requests being served by the gateway.");
    w.sample("sluice_active_requests", "", static_cast<double>(active_requests.load()));
    w.family("sluice_open_connections", "gauge", "Open client connections.");
    w.sample("sluice_open_connections", "", static_cast<double>(connections.load()));
    w.family("sluice_config_generation", "gauge", "Config generation in use (1 at start, +1 per applied reload).");
    w.sample("sluice_config_generation", "", static_cast<double>(gen->number));
    append_process_metrics(out);
  });
}

AdmissionHost Gateway::admission_host() { return admission_host_; }

GenerationInputs Gateway::generation_inputs(uint64_t seed) {
  return GenerationInputs{metrics_.duration, metrics_.ttft, metrics_.itl, metrics_.pick, metrics_.ttft_estimate, metrics_.requests, admission_host_,
                          seed};
}

Time Gateway::now() const { return at(std::chrono::steady_clock::now()); }

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

std::string_view Gateway::reject_tenant_label(const RequestRecord& r) {
  // Only configured tenants' names become label values (a client-chosen fairness id or `user` never
  // does), and only the first kRejectTenantLabels of them, as sluice_tenant_tokens_total does.
  constexpr size_t kRejectTenantLabels = 32;
  if (!r.tenant_configured || r.tenant.empty()) return "-";
  std::lock_guard lock(reject_labels_mu_);
  auto it = reject_tenants_.find(r.tenant);
  if (it != reject_tenants_.end()) return *it;
  if (reject_tenants_.size() >= kRejectTenantLabels) return "other";
  return *reject_tenants_.insert(r.tenant).first;
}

void Gateway::complete(const RequestRecord& r, const Generation& gen) {
  if (r.listener == "admin") {
    metrics_.admin_requests.with({r.path, std::to_string(r.status)}).inc();
    if (r.status >= 400) access_log_.write(r);
    return;
  }
  const std::string_view pool = r.pool.empty() ? std::string_view("-") : std::string_view(r.pool);
  if (r.client_retry > 0) metrics_.client_retries.with({pool}).inc();
  // The model's latency series once it resolved to a pool; null: not (yet) a configured model.
  const ModelSeries* series = r.pool.empty() ? nullptr : gen.series_for(r.model);
  if (r.outcome == Outcome::ok && r.status == 200 && series) {
    if (auto it = gen.ok_requests.find(r.model); it != gen.ok_requests.end()) {
      it->second->inc();
      series->duration->observe(to_seconds(r.duration));
      if (r.ttft) series->ttft->observe(to_seconds(*r.ttft));
      access_log_.write(r);
      return;
    }
  }
  const std::string status = std::to_string(r.status);
  // Model names are client-chosen: only configured ones become label values (bounded cardinality).
  const std::string_view model = r.model.empty() || !gen.ok_requests.contains(r.model) ? std::string_view("-") : std::string_view(r.model);
  metrics_.requests.with({pool, model, status, to_string(r.outcome)}).inc();
  // Model names are client-chosen: one that did not resolve is "-" (core/metrics/model_labels.h).
  constexpr std::string_view none = kUnresolvedModelLabel;
  (series ? *series->duration : metrics_.duration.with({pool, none, none})).observe(to_seconds(r.duration));
  if (r.ttft) (series ? *series->ttft : metrics_.ttft.with({pool, none, none})).observe(to_seconds(*r.ttft));
  if (r.outcome == Outcome::rejected) metrics_.rejects.with({pool, to_string(r.reason), reject_tenant_label(r)}).inc();
  if (r.outcome == Outcome::client_cancelled)
    metrics_.cancellations.with({r.reason == Reason::cancelled_queued       ? "queued"
                                 : r.reason == Reason::client_write_timeout ? "stalled"
                                 : r.cancelled_while_streaming              ? "streaming"
                                                                            : "upstream"}).inc();
  access_log_.write(r);
}

}  // namespace sluice
