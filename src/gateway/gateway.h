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

namespace sluice {

// ---- authenticate + admit: the admission layer's hook ----------------------------------------
// Held for the life of an admitted request (a rate-limit reservation, a queue slot); released when
// the request ends, whatever way it ends.
struct AdmissionTicket {
  virtual ~AdmissionTicket() = default;
  // Called once at the end with what the request really used (tokens -1 when unknown).
  virtual void settle(int64_t prompt_tokens, int64_t completion_tokens) {}
};
struct AdmitRequest {
  const RequestModel& request;
  const ModelRoute& route;
  std::string_view tenant;
  const boost::beast::http::fields& headers;
};
struct AdmitResult {
  std::optional<Denial> denial;             // set: refuse with this answer
  std::unique_ptr<AdmissionTicket> ticket;  // may be null
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
  MetricsRegistry registry_;
  GatewayMetrics metrics_;
  AccessLog access_log_;
  std::string models_json_;
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
