/*
 * Fair share of a pool's in-flight slots between tenants, with headroom kept for quiet tenants.
 *
 * Why: the fair queue (VTC, admission_queue.h) orders requests that wait, but a light tenant whose
 * requests arrive one at a time rarely waits behind anybody: it waits for a slot, and a noisy
 * tenant with many long streams holds every slot for its whole decode. Its TTFT then becomes "time
 * until some noisy stream ends" (tens to hundreds of ms) instead of a prefill. Ordering cannot fix
 * that; only keeping a little capacity free for tenants below their share can (the same idea as
 * Kubernetes API Priority and Fairness' seat reservation, here per tenant and demand-aware).
 *
 * Algorithm (one FairShare per pool; capacity C = healthy endpoints x max_in_flight_per_endpoint,
 * taken from the PoolRouter at each decision):
 *   - A tenant is active while it has requests queued or in flight for the pool, and for
 *     `active_window` after its last arrival. Its priority is that of its latest request.
 *   - Strict priority comes first (the queue dispatches higher bands first): shares are split
 *     within a priority band, share(t) = C * weight(t) / sum of the weights of the active tenants
 *     of t's priority, and slots are kept only for tenants of t's priority or higher, so a
 *     critical tenant is never held back for a lower band.
 *   - demand(t) = ceil of t's average (queued + in flight), a time-weighted moving average with
 *     time constant active_window / 4 (at least 1 for an active tenant); reserve(t) = max(0,
 *     min(floor(share(t)), demand(t) + spare) - in_flight(t)): what t has recently needed on
 *     average plus `spare` slots, never more than its share. (The peak instead of the average
 *     cost the noisy tenant ~40% of its throughput in the same runs.)
 *   - A request of tenant t may dispatch when in_flight(t) < share(t) (below its share: always,
 *     room permitting), or when the slots free after setting aside reserve(o) for every other
 *     active tenant o of priority >= t's are more than zero (above its share: only what nobody
 *     else is likely to need).
 * The caller still checks that the pool is not saturated (PoolRouter::saturated); this only decides
 * who may take a free slot. With one active tenant nothing is reserved (work-conserving); the
 * cost is at most sum(demand + spare) idle slots while quiet tenants are active.
 * Under saturation by engine signals (queue depth, KV) below the hard cap, nobody dispatches and
 * the light tenant is protected by the queue's VTC order only.
 * Trade-off (fleet simulator, 4 replicas x 4 slots, noisy tenant at ~3x capacity, 60 req/s,
 * bench/results/tenants-*-4): quiet tenants' TTFT p90 falls from 136-186 ms (VTC order alone) to
 * 19-64 ms, p50 to the unloaded ~14 ms; the noisy tenant loses 9-12% of its throughput to the idle
 * reserve. spare 1 halves the quiet p90 again at twice the throughput cost.
 *
 * Cost: O(recently active tenants) per decision: only tenants seen within the window are listed
 * (pruned on arrivals when the list doubled or a window passed), however many the config has.
 * Pure: time is passed in; not thread-safe (the admission driver serialises access).
 */
#pragma once
#include <cstdint>
#include <vector>

#include "core/admission/tenants.h"
#include "core/time.h"

namespace sluice {

struct FairShareConfig {
  bool enabled = true;
  Duration active_window = std::chrono::seconds(10);
  int64_t spare = 0;
};

class FairShare {
 public:
  explicit FairShare(FairShareConfig c = {}) : c_(c) {}

  // A request of `t` (at `priority`) joined the pool's queue.
  void on_queued(TenantId t, double weight, Time now, int priority = 0);
  // A queued request left without dispatch (expired, client gone, refused).
  void on_left_queue(TenantId t, Time now);
  // A queued request was dispatched (now in flight).
  void on_dispatched(TenantId t);
  // A dispatched request ended.
  void on_finished(TenantId t, Time now);

  // May a request of `t` take a slot now? `capacity` and `in_flight` are the pool's.
  bool may_dispatch(TenantId t, int64_t capacity, int64_t in_flight, Time now) const;

  double share(TenantId t, int64_t capacity, Time now) const;
  int64_t reserved_for_others(TenantId t, int64_t capacity, Time now) const;
  int64_t in_flight(TenantId t) const { return t < ts_.size() ? ts_[t].in_flight : 0; }
  int64_t queued(TenantId t) const { return t < ts_.size() ? ts_[t].queued : 0; }
  size_t listed() const { return listed_.size(); }  // tenants a decision looks at
  // Requests dispatched through this FairShare and not yet finished (all tenants).
  int64_t total_in_flight() const { return total_in_flight_; }
  const FairShareConfig& config() const { return c_; }

 private:
  struct State {
    double weight = 1.0;
    int priority = 0;
    int64_t queued = 0;
    int64_t in_flight = 0;
    Time last_arrival{0};
    bool seen = false;
    double avg = 0;       // time-weighted moving average of queued + in_flight
    Time avg_at{0};       // when avg was last brought up to date
    bool listed = false;  // in listed_
  };
  bool active(const State& s, Time now) const;
  int64_t demand(const State& s, Time now) const;
  double band_weight(int priority, Time now) const;  // active tenants of that priority
  void prune(Time now);                               // unlist tenants no longer active
  double average(const State& s, Time now) const;    // avg brought up to `now`
  void settle(State& s, Time now);                    // before queued / in_flight change
  State& at(TenantId t);

  FairShareConfig c_;
  std::vector<State> ts_;          // by TenantId
  std::vector<TenantId> listed_;   // every active tenant (and some recently inactive ones)
  size_t pruned_at_size_ = 0;
  Time pruned_at_{0};
  int64_t total_in_flight_ = 0;
};

}  // namespace sluice
