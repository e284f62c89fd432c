// The state one gateway process shares across its worker threads: the immutable config snapshot,
// one PoolRouter per pool, the metrics registry, the access log, the admission hook, and the
// counters graceful drain watches. Per-connection and per-worker state lives elsewhere (session.h,
// upstream_pool.h). `complete` is the one place every request ends.
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
#include "core/request.h"
#include "gateway/access_log.h"
#include "gateway/metrics.h"
#include "gateway/pool_health.h"

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
// May suspend (a fair queue); runs on the request's worker thread.
using AdmitHook = std::function<boost::asio::awaitable<AdmitResult>(const AdmitRequest&)>;

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

  const Config& config() const { return *config_; }
  std::shared_ptr<const Config> config_ptr() const { return config_; }
  PoolRouter* router(std::string_view pool);
  // The pool's health / ejection / retry budget state (pool_health.h); nullptr for an unknown pool.
  PoolHealth* health(std::string_view pool);
  std::vector<PoolHealth*> pool_healths();
  const std::map<std::string, std::unique_ptr<PoolRouter>, std::less<>>& routers() const { return routers_; }
  MetricsRegistry& registry() { return registry_; }
  GatewayMetrics& metrics() { return metrics_; }
  AccessLog& access_log() { return access_log_; }

  // Steady-clock time since the gateway started (the core's `Time`).
  Time now() const;
  // Ready: every pool has at least one healthy endpoint, and the gateway is not draining.
  bool ready() const;
  const std::string& models_json() const { return models_json_; }

  // The single completion path: access-log line + metrics for one finished request.
  void complete(const RequestRecord& record);

  AdmitHook admit;  // empty: everything is admitted
  std::atomic<bool> draining{false};
  std::atomic<int64_t> active_requests{0};
  std::atomic<int64_t> connections{0};

 private:
  std::shared_ptr<const Config> config_;
  std::chrono::steady_clock::time_point epoch_;
  std::map<std::string, std::unique_ptr<PoolRouter>, std::less<>> routers_;
  std::map<std::string, std::unique_ptr<PoolHealth>, std::less<>> health_;
  MetricsRegistry registry_;
  GatewayMetrics metrics_;
  AccessLog access_log_;
  std::string models_json_;
  // Series resolved once for the common case (no label-key building on the hot path).
  struct PoolSeries {
    Histogram* duration;
    Histogram* ttft;
    Histogram* itl;
    Histogram* pick;  // picker decision time
  };
  std::map<std::string, PoolSeries, std::less<>> pool_series_;
  std::map<std::string, Counter*, std::less<>> ok_requests_;  // model -> {status 200, outcome ok}

 public:
  // The pool's histograms (nullptr for an unknown pool).
  const PoolSeries* pool_series(std::string_view pool) const;
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
