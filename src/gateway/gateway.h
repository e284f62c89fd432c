// The state one gateway process shares across its worker threads: the current config generation
// (generation.h: the immutable config snapshot, one PoolRuntime per pool, the admission layer),
// swapped atomically on reload; the metrics registry, the access log, and the counters graceful
// drain watches. Per-connection and per-worker state lives elsewhere (session.h, upstream_pool.h).
// `complete` is the one place every request ends.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/fields.hpp>

#include "core/admission/outcome.h"
#include "core/config.h"
#include "core/picker/pool_router.h"
#include "core/openai/request.h"
#include "gateway/observability/access_log.h"
#include "gateway/generation.h"
#include "gateway/observability/metrics.h"
#include "gateway/signals/pool_health.h"

namespace sluice {

// ---- authenticate + admit: the admission layer's hook ----------------------------------------
// Held for the life of an admitted request (a rate-limit reservation, a queue slot); released when
// the request ends, whatever way it ends.
struct AdmissionTicket {
  virtual ~AdmissionTicket() = default;
  // The request was placed on an endpoint (its DispatchGuard is held); idempotent.
  virtual void on_dispatched() {}
  // n more output tokens were relayed to the client.
  virtual void on_output(int64_t n) {}
  // Called once at the end with what the request really used (tokens -1 when unknown: the
  // ticket then charges what was delivered).
  virtual void settle(int64_t prompt_tokens, int64_t completion_tokens) {}
  // The tenant's name for the access log ("" = keep the default).
  virtual std::string_view tenant() const { return {}; }
  // Extra headers for every response to this request (x-ratelimit-*).
  virtual const HeaderList* response_headers() const { return nullptr; }
  // max_tokens to inject upstream (the request set no bound and a default applies).
  virtual std::optional<int64_t> inject_max_tokens() const { return std::nullopt; }
};
struct AdmitRequest {
  const RequestModel& request;
  const ModelRoute& route;
  std::string_view tenant;
  const boost::beast::http::fields& headers;
  std::function<bool()> client_gone = {};  // polled while the request waits in a queue
};
struct AdmitResult {
  std::optional<Denial> denial;             // set: refuse with this answer
  std::unique_ptr<AdmissionTicket> ticket;  // may be null (also when the client left while queued)
  HeaderList headers;                       // extra headers for the refusal (x-ratelimit-*)
  bool client_left = false;                 // the client disconnected while queued
};

struct GatewayMetrics {
  explicit GatewayMetrics(MetricsRegistry& r);
  CounterFamily& requests;       // pool, model, status, outcome
  CounterFamily& rejects;        // pool, reason
  CounterFamily& cancellations;  // phase
  HistogramFamily& duration;     // pool
  HistogramFamily& ttft;         // pool
  HistogramFamily& itl;          // pool
  HistogramFamily& pick;         // pool
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

  // Steady-clock time since the gateway started (the core's `Time`).
  Time now() const;
  // Ready: every pool has at least one healthy endpoint, and the gateway is not draining.
  bool ready() const;

  // The single completion path: access-log line + metrics for one finished request, with the
  // series of `gen` (the request's own generation; the first form takes the current one).
  void complete(const RequestRecord& record);
  void complete(const RequestRecord& record, const Generation& gen);

  std::atomic<bool> draining{false};
  std::atomic<int64_t> active_requests{0};
  std::atomic<int64_t> connections{0};

 private:
  std::shared_ptr<const Config> startup_;
  uint64_t seed_;
  std::chrono::steady_clock::time_point epoch_;
  MetricsRegistry registry_;
  GatewayMetrics metrics_;
  AccessLog access_log_;
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
