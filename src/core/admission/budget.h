/*
 * Token budgets: reserve at admission, settle on completion.
 *
 * Algorithm. Every tenant (and every tenant x model with per-model limits) has one GCRA bucket
 * per configured dimension: requests/min, input tokens/min, output tokens/min, tokens/day
 * (input + output). `reserve` charges, under the tenant's lock and all-or-nothing across every
 * bucket of both scopes:
 *     requests 1 | input: estimated input tokens | output: the output bound | day: input + bound
 * so concurrent requests can never all pass a check-then-charge gap. Outcomes:
 *   - some bucket is smaller than what this request alone needs -> `too_large` at once (429,
 *     x-should-retry: false), never queued or retried forever;
 *   - some bucket lacks room now -> `rate_limit` (429 OpenAI body "Rate limit reached for ... on
 *     input tokens per min (ITPM): Limit L, Used U, Requested R. Please try again in 1.146s."),
 *     retry-after = the longest refill time among the short buckets, jittered (outcome.h);
 *   - otherwise all buckets are charged and a `Reservation` is returned.
 * The output bound is the largest of max_tokens / max_completion_tokens, or a configured default
 * that the gateway injects upstream as max_tokens (see `output_bound_for`), so it is a true bound.
 *
 * Settlement with actual usage (cached input tokens do not count): per dimension, the difference
 * to what was reserved is refunded (GCRA refund) or charged extra (may put the bucket in debt).
 * `Reservation` is an RAII guard: if destroyed unsettled it settles itself --
 *   - never dispatched (rejected by the queue, queue timeout, client left while queued): full
 *     refund, including the request itself;
 *   - dispatched: charged the estimated input plus the output tokens reported delivered so far
 *     via `add_delivered` (a stream cut by the client is charged what it received).
 * The destructor has no clock: it uses the latest time the Budget has seen.
 *
 * x-ratelimit-* headers (OpenAI): limit/remaining/reset for requests (the requests bucket of the
 * tighter scope) and tokens (the per-minute token bucket with the least remaining); reset is the
 * time until that bucket is full again, Go-formatted ("20ms", "6m0s").
 *
 * Thread-safety: one mutex per tenant; reservations may be settled or destroyed on any thread.
 */
#pragma once
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/admission/counters.h"
#include "core/admission/gcra.h"
#include "core/admission/outcome.h"
#include "core/admission/tenants.h"

namespace sluice {

enum class LimitDimension : uint8_t { requests, input_tokens, output_tokens, daily_tokens };
inline constexpr size_t kLimitDimensionCount = 4;
std::string_view to_string(LimitDimension d);

// What one request reserves at admission.
struct TokenCost {
  int64_t input_tokens = 0;  // estimated prompt tokens (estimate_tokens on the rendered prompt)
  int64_t output_bound = 0;  // see output_bound_for
};

// The dimensions as indices into per-dimension arrays (the local and the shared budget's).
namespace limit_dim {
inline constexpr size_t kReq = static_cast<size_t>(LimitDimension::requests);
inline constexpr size_t kIn = static_cast<size_t>(LimitDimension::input_tokens);
inline constexpr size_t kOut = static_cast<size_t>(LimitDimension::output_tokens);
inline constexpr size_t kDay = static_cast<size_t>(LimitDimension::daily_tokens);
}  // namespace limit_dim
// A dimension's name in a rejection's message: "requests per min (RPM)", ...
std::string_view limit_label(size_t dimension);
// What a request costs in each dimension: 1 request, its input, its output bound, both per day.
std::array<int64_t, kLimitDimensionCount> limit_amounts(const TokenCost& c);

// Actual usage at the end (from the engine's usage, or counted from what was streamed).
struct Usage {
  int64_t input_tokens = 0;
  int64_t cached_input_tokens = 0;  // not charged
  int64_t output_tokens = 0;
};

struct OutputBound {
  int64_t tokens = 0;
  bool inject_max_tokens = false;  // the request had no bound: forward max_tokens = tokens
};
// requested = RequestModel::max_output_tokens (already the largest of the fields present). Without
// one, the default is reserved and must be injected upstream so the engine honours it.
OutputBound output_bound_for(std::optional<int64_t> requested, int64_t default_max_output);

// Values for OpenAI's x-ratelimit-* headers; a dimension without a limit emits no headers.
struct RateLimitStatus {
  struct Dim {
    bool present = false;
    int64_t limit = 0;
    int64_t remaining = 0;
    Duration reset{0};
  };
  Dim requests;
  Dim tokens;
  // x-ratelimit-limit-requests, ...-remaining-requests, ...-reset-requests, same for tokens.
  HeaderList headers() const;
};

class Budget;

class Reservation {
 public:
  Reservation() = default;
  Reservation(const Reservation&) = delete;
  Reservation& operator=(const Reservation&) = delete;
  Reservation(Reservation&& o) noexcept { *this = std::move(o); }
  Reservation& operator=(Reservation&& o) noexcept;
  ~Reservation() { release(); }

  bool valid() const { return budget_ != nullptr; }
  TenantId tenant() const { return tenant_; }
  const TokenCost& reserved() const { return cost_; }
  bool dispatched() const { return dispatched_; }
  int64_t delivered_output() const { return delivered_; }

  // The request reached an engine: from now on its input is charged even if it is cut.
  void mark_dispatched() { dispatched_ = true; }
  // Output tokens delivered to the client so far (cumulative add).
  void add_delivered(int64_t output_tokens) { delivered_ += output_tokens > 0 ? output_tokens : 0; }
  // Final settlement with actual usage. Later calls and the destructor do nothing.
  void settle(const Usage& actual, Time now);
  // Refund everything (the request never ran). Later calls and the destructor do nothing.
  void cancel(Time now);
  // What the destructor would do, now.
  void release();

 private:
  friend class Budget;
  Budget* budget_ = nullptr;
  TenantId tenant_ = 0;
  int32_t model_scope_ = -1;  // index into the tenant's model scopes, -1 = none
  TokenCost cost_;
  bool dispatched_ = false;
  int64_t delivered_ = 0;
};

struct ReserveResult {
  Reservation reservation;      // valid() when granted
  std::optional<Denial> denial; // too_large or rate_limit when refused
  RateLimitStatus status;       // after this request, for the response headers
  bool ok() const { return reservation.valid(); }
};

class Budget {
 public:
  // local_buckets = false: no rate buckets here (the shared budget, shared_budget.h, holds them);
  // reservations are still granted and counted.
  explicit Budget(std::shared_ptr<const TenantRegistry> tenants, AdmissionCounters* counters = nullptr,
                  JitterPolicy jitter = {}, bool local_buckets = true);
  Budget(const Budget&) = delete;
  Budget& operator=(const Budget&) = delete;
  // All reservations must be gone before the Budget is destroyed.
  ~Budget();

  // Atomic all-or-nothing reservation across every bucket of the tenant and tenant x model.
  ReserveResult reserve(const Tenant& tenant, std::string_view model, const TokenCost& cost, Time now,
                        AdmissionRng& rng);
  // Current header values without reserving anything.
  RateLimitStatus status(const Tenant& tenant, std::string_view model, Time now);

  int64_t outstanding() const { return outstanding_.load(std::memory_order_relaxed); }
  const TenantRegistry& tenants() const { return *tenants_; }

 private:
  friend class Reservation;
  struct Scope {
    std::array<std::optional<Gcra>, kLimitDimensionCount> buckets;
  };
  struct TenantState {
    std::mutex mu;
    Scope tenant;
    std::vector<Scope> models;  // parallel to Tenant::model_limits
  };

  void observe(Time now);
  Time latest() const { return Time(latest_ns_.load(std::memory_order_relaxed)); }
  RateLimitStatus status_locked(const TenantState& st, int32_t model_scope, Time now) const;
  void apply_settlement(const Reservation& r, const Usage& actual, bool refund_all, Time now);

  std::shared_ptr<const TenantRegistry> tenants_;
  AdmissionCounters* counters_;
  JitterPolicy jitter_;
  std::unique_ptr<TenantState[]> state_;
  std::atomic<int64_t> outstanding_{0};
  std::atomic<int64_t> latest_ns_{0};
};

}  // namespace sluice
