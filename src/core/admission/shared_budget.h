/*
 * Token budgets shared by every gateway replica: the replica's side of the shared GCRA buckets
 * (state in Redis, shared_bucket_script.h), with local leases (lease_policy.h) and the fail-open
 * fallback. Pure: the driver (gateway/redis/) moves the calls this object plans to Redis and back.
 *
 * Per request, the same buckets and amounts as Budget (budget.h): requests 1, input tokens the
 * estimate, output tokens the bound, daily tokens both, for the tenant and the tenant x model.
 *   1. reserve_local: refused at once when some bucket is smaller than the request (too large);
 *      granted from the lease credit when it covers every bucket (no Redis call); otherwise the
 *      credit it has is pinned and a LeaseAsk says what to reserve in Redis (the rest of the need
 *      plus a slice per bucket).
 *   2. complete: with the script's reply, the grant becomes credit and the request's reservation,
 *      or the pinned credit goes back and the request gets the 429 from the shared state.
 *      abandon: the call failed; the pinned credit goes back. Then, by redis.on_error:
 *      reserve_fallback (open: a local bucket of limit/N) or unavailable (closed: a clear 429).
 *   3. SharedReservation settles locally at once (refund into the credit, or debt to charge) and
 *      every sync_interval due_syncs plans one settle call per bucket group with what changed
 *      (net charge, credit given back, the replica's held units); on_synced reads the shared
 *      remaining back for the x-ratelimit headers.
 * SharedReservation is an RAII guard with Reservation's rules: never dispatched -> full refund;
 * dispatched and destroyed unsettled -> charged the estimated input and the delivered output.
 *
 * Thread-safety: one mutex per tenant (a request's reserve and settle take it once each; nothing
 * per token). All SharedReservations must be gone before the SharedBudget.
 */
#pragma once
#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/admission/budget.h"
#include "core/admission/lease_policy.h"
#include "core/admission/shared_bucket_script.h"

namespace sluice {

struct SharedBudgetConfig {
  LeaseConfig lease;
  std::string key_prefix = "sluice:";
  std::string replica_id = "replica";  // unique per process (the held hash and the replica count)
  Duration held_ttl = std::chrono::seconds(60);
  Duration unavailable_retry = std::chrono::seconds(1);  // fail-closed Retry-After base
};

class SharedBudget;

class SharedReservation {
 public:
  SharedReservation() = default;
  SharedReservation(const SharedReservation&) = delete;
  SharedReservation& operator=(const SharedReservation&) = delete;
  SharedReservation(SharedReservation&& o) noexcept { *this = std::move(o); }
  SharedReservation& operator=(SharedReservation&& o) noexcept;
  ~SharedReservation() { release(); }

  bool valid() const { return budget_ != nullptr; }
  bool from_fallback() const { return fallback_; }
  const TokenCost& reserved() const { return cost_; }
  void mark_dispatched() { dispatched_ = true; }
  void add_delivered(int64_t n) { delivered_ += n > 0 ? n : 0; }
  void settle(const Usage& actual, Time now);
  void cancel(Time now);
  void release();

 private:
  friend class SharedBudget;
  SharedBudget* budget_ = nullptr;
  TenantId tenant_ = 0;
  int32_t scope_ = -1;  // model scope, -1 none
  TokenCost cost_;
  bool fallback_ = false;
  bool dispatched_ = false;
  int64_t delivered_ = 0;
};

// What one request asks Redis for (the buckets the lease did not cover, all of the request's).
struct LeaseAsk {
  TenantId tenant = 0;
  int32_t scope = -1;
  TokenCost cost;
  std::vector<const SharedBucketRef*> buckets;
  std::vector<ScriptBucketArg> args;     // need beyond the pinned credit, slice
  std::vector<uint8_t> slots;            // scope (0 tenant, 1 model) x 4 + dimension, per bucket
  std::vector<int64_t> pinned;           // credit taken for this request while the call runs
};

struct SharedReserveResult {
  SharedReservation reservation;  // valid() when granted
  std::optional<Denial> denial;
  std::optional<LeaseAsk> ask;    // reserve_local only: call Redis, then complete() or abandon()
  RateLimitStatus status;
  bool ok() const { return reservation.valid(); }
};

// One settle call for one tenant x scope.
struct SyncCall {
  TenantId tenant = 0;
  int32_t scope = -1;
  std::vector<const SharedBucketRef*> buckets;
  std::vector<ScriptBucketArg> args;  // adjust, held
  std::vector<uint8_t> dims;
  std::vector<int64_t> charged;       // the charge part of each adjust (restored if the call fails)
};

class SharedBudget {
 public:
  SharedBudget(std::shared_ptr<const TenantRegistry> tenants, SharedBudgetConfig config,
               AdmissionCounters* counters = nullptr, JitterPolicy jitter = {});
  SharedBudget(const SharedBudget&) = delete;
  SharedBudget& operator=(const SharedBudget&) = delete;
  ~SharedBudget();

  SharedReserveResult reserve_local(const Tenant& tenant, std::string_view model, const TokenCost& cost, Time now);
  SharedReserveResult complete(const LeaseAsk& ask, const ScriptReply& reply, Time now, AdmissionRng& rng);
  void abandon(const LeaseAsk& ask);
  // Fail-open: a local bucket of 1/N of the budget (N = replicas seen), per bucket.
  SharedReserveResult reserve_fallback(const Tenant& tenant, std::string_view model, const TokenCost& cost, Time now,
                                       AdmissionRng& rng);
  // Fail-closed: the 429 for a request the lease cannot cover while Redis is unreachable.
  SharedReserveResult unavailable(const Tenant& tenant, std::string_view model, Time now, AdmissionRng& rng);

  std::vector<SyncCall> due_syncs(Time now);
  void on_synced(const SyncCall& call, const ScriptReply& reply, Time now);
  // sent = false: the call never left (its credit comes back too).
  void on_sync_failed(const SyncCall& call, bool sent = true);

  // Redis unreachable (true) / back (false): fallback buckets are made from the shared state last seen.
  void set_degraded(bool degraded);
  bool degraded() const { return degraded_.load(std::memory_order_relaxed); }
  void set_replicas(int n) { replicas_.store(n < 1 ? 1 : n, std::memory_order_relaxed); }
  int replicas() const { return replicas_.load(std::memory_order_relaxed); }

  RateLimitStatus status(const Tenant& tenant, std::string_view model, Time now);
  int64_t outstanding() const { return outstanding_.load(std::memory_order_relaxed); }
  // Units this replica holds from Redis (credit + running reservations), over all buckets.
  int64_t held_units() const;
  const std::string& held_key() const { return held_key_; }
  const std::string& replicas_key() const { return replicas_key_; }
  const SharedBudgetConfig& config() const { return config_; }
  const TenantRegistry& tenants() const { return *tenants_; }

 private:
  friend class SharedReservation;
  struct Bucket {
    SharedBucketRef ref;
    int64_t credit = 0;     // prepaid, unreserved
    int64_t inflight = 0;   // reserved by running requests (lease)
    int64_t charge = 0;     // to charge at the next sync (debt, fallback spending)
    int64_t held_reported = 0;  // -1 = unknown
    int64_t shared_remaining = -1;  // -1 = never seen (full)
    Duration shared_reset{0};
    Time seen_at{0};
    Time last_used{0};
    bool touched = false;
    std::optional<Gcra> fallback;
  };
  struct Scope {
    std::array<std::optional<Bucket>, kLimitDimensionCount> buckets;
  };
  struct TenantState {
    std::mutex mu;
    std::vector<Scope> scopes;  // 0 = tenant-wide, 1 + m = Tenant::model_limits[m]
  };
  using Need = std::array<int64_t, kLimitDimensionCount>;

  int32_t scope_of(const Tenant& tenant, std::string_view model) const;
  template <typename F>
  void for_buckets(TenantState& st, int32_t scope, F&& f);
  int64_t remaining_now(const Bucket& b, Time now) const;
  RateLimitStatus status_locked(TenantState& st, int32_t scope, Time now);
  std::optional<Denial> too_large(TenantState& st, const Tenant& tenant, std::string_view model, int32_t scope,
                                  const Need& need);
  SharedReservation make_reservation(const Tenant& tenant, int32_t scope, const TokenCost& cost, bool fallback);
  void apply_settlement(const SharedReservation& r, const Usage& actual, bool refund_all);
  Time latest() const { return Time(latest_ns_.load(std::memory_order_relaxed)); }
  void observe(Time now);

  std::shared_ptr<const TenantRegistry> tenants_;
  SharedBudgetConfig config_;
  AdmissionCounters* counters_;
  JitterPolicy jitter_;
  std::string held_key_, replicas_key_;
  std::unique_ptr<TenantState[]> state_;
  std::atomic<int64_t> outstanding_{0};
  std::atomic<int64_t> latest_ns_{0};
  std::atomic<bool> degraded_{false};
  std::atomic<int> replicas_{1};
};

}  // namespace sluice
