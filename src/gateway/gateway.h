// The state one gateway process shares across its worker threads: the current config generation
// (generation.h: the immutable config snapshot, one PoolRuntime per pool, the admission layer),
// swapped atomically on reload; the metrics registry, the access log, and the counters graceful
// drain watches. Per-connection and per-worker state lives elsewhere (session.h, upstream_pool.h).
// `complete` is the one place every request ends.
#pragma once
#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/fields.hpp>

#include "core/config.h"
#include "core/openai/response_locator.h"
#include "core/picker/pool_router.h"
#include "gateway/observability/access_log.h"
#include "gateway/admission_driver.h"
#include "gateway/generation.h"
#include "gateway/observability/metrics.h"
#include "gateway/signals/pool_health.h"

namespace sluice {

// What the gateway itself costs a request, by phase (sluice_gateway_overhead_seconds{phase}).
enum class OverheadPhase : uint8_t { read_body, parse, admit, pick, connect, send_request, first_upstream_byte };
inline constexpr size_t kOverheadPhases = 7;

struct GatewayMetrics {
  explicit GatewayMetrics(MetricsRegistry& r);
  Histogram& overhead(OverheadPhase p) { return *overhead_series[static_cast<size_t>(p)]; }
  CounterFamily& requests;       // pool, model, status, outcome
  CounterFamily& rejects;        // pool, reason, tenant
  CounterFamily& cancellations;  // phase
  CounterFamily& client_retries; // pool
  HistogramFamily& duration;     // pool, model, adapter (core/metrics/model_labels.h)
  HistogramFamily& ttft;         // pool, model, adapter
  HistogramFamily& itl;          // pool, model, adapter
  HistogramFamily& pick;         // pool
  HistogramFamily& ttft_estimate;  // pool
  HistogramFamily& overhead_family;                 // phase
  std::array<Histogram*, kOverheadPhases> overhead_series;  // resolved once
  CounterFamily& admin_requests;                    // path, status (the admin listener)
};

struct GatewayOptions {
  std::string access_log = "-";
  uint64_t seed = 1;
};

class Gateway {
 public:
  Gateway(std::shared_ptr<const Config> config, const GatewayOptions& options);

  // The current generation. A request takes it once and keeps it to its end.
  std::shared_ptr<const Generation> current() const { return current_.load(std::memory_order_acquire); }
  // Makes `next` current (reload); requests already running keep theirs.
  void install(std::shared_ptr<const Generation> next) { current_.store(std::move(next), std::memory_order_release); }
  // The config the process started with: listen addresses and worker count (not reloadable).
  const Config& startup_config() const { return *startup_; }
  uint64_t seed() const { return seed_; }
  MetricsRegistry& registry() { return registry_; }
  GatewayMetrics& metrics() { return metrics_; }
  AccessLog& access_log() { return access_log_; }
  // Where stored Responses API responses live (previous_response_id routing); kept across reloads.
  ResponseLocator& responses() { return responses_; }

  // Steady-clock time since the gateway started (the core's `Time`).
  Time now() const;
  // The same for a time point already read (no second clock read on the request's path).
  Time at(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration_cast<Time>(t - epoch_);
  }
  // Ready: every pool has at least one healthy endpoint, and the gateway is not draining.
  bool ready() const;

  // The single completion path: access-log line + metrics for one finished request, with the
  // series of `gen` (the request's own generation; the first form takes the current one). Every
  // answer on every listener passes here: model requests, the API listener's own answers (404,
  // 405, /v1/models, health, bad HTTP) and the admin listener's (record.listener == "admin":
  // counted in sluice_admin_requests_total, logged only when it is an error).
  void complete(const RequestRecord& record);
  void complete(const RequestRecord& record, const Generation& gen);
  // The admission layer's view of this process (admission_driver.h), and what a generation is
  // built from (generation.h: start-up here, reload in reload.cpp).
  AdmissionHost admission_host();
  GenerationInputs generation_inputs(uint64_t seed);

  std::atomic<bool> draining{false};
  std::atomic<int64_t> active_requests{0};
  std::atomic<int64_t> connections{0};

 private:
  // The tenant label of a reject (bounded: configured tenants only, the first 32 by name).
  std::string_view reject_tenant_label(const RequestRecord& r);

  std::shared_ptr<const Config> startup_;
  uint64_t seed_;
  std::mutex reject_labels_mu_;
  std::set<std::string, std::less<>> reject_tenants_;
  std::chrono::steady_clock::time_point epoch_;
  MetricsRegistry registry_;
  GatewayMetrics metrics_;
  AccessLog access_log_;
  ResponseLocator responses_;
  AdmissionHost admission_host_;
  std::atomic<std::shared_ptr<const Generation>> current_;
};

// RAII: counts one request in Gateway::active_requests (graceful drain waits for zero).
class ActiveRequest {
 public:
  explicit ActiveRequest(Gateway& gw) : gw_(gw) { gw_.active_requests.fetch_add(1, std::memory_order_relaxed); }
  ~ActiveRequest() { gw_.active_requests.fetch_sub(1, std::memory_order_relaxed); }
  ActiveRequest(const ActiveRequest&) = delete;
  ActiveRequest& operator=(const ActiveRequest&) = delete;

 private:
  Gateway& gw_;
};

}  // namespace sluice
