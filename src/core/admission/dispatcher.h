/*
 * The admission dispatcher: which queued requests leave the gateway's queue for an endpoint, and
 * when. One rule, one object, called by every driver: the live gateway (gateway/admission_driver.cpp,
 * under its mutex) and the virtual-time fleet simulator (fleetsim/fleet_sim.cpp). Pure: time is
 * passed in, no threads, no clocks; not thread-safe (the driver serialises calls).
 *
 * A request's life as the dispatcher sees it (keyed by the driver's cookie):
 *   on_queued -> [pop, by dispatch()] -> on_placed (holds its endpoint's DispatchGuard, or gave up)
 *   -> on_finished                                      (its fair share of the slots is free again)
 *   on_queued -> on_left_queue                          (expired, or its client left while queued)
 *
 * The rule. dispatch(queue, now, router_of, on_pop) pops, in the queue's order (strict priority,
 * then the VTC counter: admission_queue.h), every request that may go now:
 *   - its pool is not saturated (PoolRouter::saturated: every healthy endpoint at the hard cap, or
 *     by fresh engine signals at the pool's saturation limits);
 *   - the pool has a free slot under the hard cap once the requests popped but not yet placed are
 *     counted: capacity - max(in_flight + promised, share_in_flight) > 0, where capacity = healthy
 *     endpoints x max_in_flight_per_endpoint and in_flight the router's count. The router frees a
 *     slot when the upstream exchange ends and the fair share when the request does (a little
 *     later), so the larger of the two is counted; else a noisy request could take the slot of a
 *     light request that is still finishing. Counting promised slots (instead of allowing one
 *     unplaced pop per pool) lets a burst leave the queue at once: the queue never fills faster
 *     than it drains because pops are serialised;
 *   - its tenant may take a free slot of that pool (FairShare, one per pool, when enabled).
 * A pool the driver does not know (router_of returns null) or with no healthy endpoint pops at
 * once: the request's own path answers it (503 no_endpoint with a jittered Retry-After), rather
 * than holding it for its whole queue TTL. Entries no longer registered (a stale cookie) are popped so they leave the queue.
 *
 * The queue is shared by every pool; the filter passes over entries whose pool has no room, so a
 * full pool never blocks another pool's requests. Cost: O(queued entries looked at) per pop plus a
 * PoolRouter occupancy read (one pool mutex) per distinct pool looked at per pass.
 */
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/admission/admission_queue.h"
#include "core/admission/fair_share.h"
#include "core/time.h"

namespace sluice {

class PoolRouter;

// May one more request leave the queue for `router`'s pool now? `promised`: popped, not placed;
// `share_in_flight`: the pool's FairShare::total_in_flight (0 without fair shares).
bool pool_has_room(const PoolRouter& router, int64_t promised, int64_t share_in_flight, Time now);

class Dispatcher {
 public:
  explicit Dispatcher(FairShareConfig fair_share = {}) : fair_(fair_share) {}

  struct Popped {
    uintptr_t cookie = 0;
    Duration waited{0};
  };
  using RouterOf = std::function<const PoolRouter*(std::string_view pool)>;

  void on_queued(uintptr_t cookie, std::string_view pool, TenantId tenant, double weight, int priority, Time now);
  // Left the queue without being popped (expired, or its client left). Unknown cookies are ignored.
  void on_left_queue(uintptr_t cookie, Time now);
  // Pops every request that may go now (see the rule above), calling on_pop for each; returns how
  // many. `pop_next` is the queue's pop_next(now, eligible) (Admission's or AdmissionQueue's).
  template <typename Queue>
  size_t dispatch(Queue& queue, Time now, const RouterOf& router_of, const std::function<void(const Popped&)>& on_pop) {
    size_t n = 0;
    const auto eligible = [&](TenantId t, uintptr_t cookie) { return eligible_now(t, cookie, now, router_of); };
    for (;;) {
      room_cache_.clear();
      auto d = queue.pop_next(now, eligible);
      if (!d) break;
      if (!popped(d->cookie)) continue;
      ++n;
      on_pop(Popped{d->cookie, d->waited});
    }
    return n;
  }
  // The fast path: when nothing is queued and `router`'s pool has room, registers the request as
  // popped at once (it never enters the queue) and returns true; else false (enqueue it).
  bool admit_now(uintptr_t cookie, std::string_view pool, TenantId tenant, double weight, int priority, Time now,
                 const PoolRouter& router);
  // The popped request holds its endpoint now (or ended before it got one). Idempotent.
  void on_placed(uintptr_t cookie);
  // The request ended, whatever way: its fair share of the slots is free. Forgets the cookie.
  void on_finished(uintptr_t cookie, Time now);

  // Requests waiting, by pool and priority (for sluice_queue_depth).
  void for_each_depth(const std::function<void(std::string_view pool, int priority, int64_t n)>& f) const;
  int64_t queued() const { return queued_total_; }
  int64_t promised(std::string_view pool) const;
  const FairShare* fair_share(std::string_view pool) const;

 private:
  enum class State : uint8_t { queued, popped, placed };
  struct Entry {
    std::string pool;
    TenantId tenant = 0;
    int priority = 0;
    State state = State::queued;
  };
  struct PoolState {
    std::map<int, int64_t> queued;  // priority -> waiting requests
    int64_t promised = 0;           // popped, not yet placed
    FairShare share;
  };
  bool eligible_now(TenantId tenant, uintptr_t cookie, Time now, const RouterOf& router_of);
  bool popped(uintptr_t cookie);  // queued -> popped; false for a stale cookie
  PoolState& pool(std::string_view name);

  FairShareConfig fair_;
  std::vector<std::pair<const PoolRouter*, bool>> room_cache_;  // per pop: pool_has_room by pool
  std::unordered_map<uintptr_t, Entry> entries_;
  std::map<std::string, PoolState, std::less<>> pools_;
  int64_t queued_total_ = 0;
};

}  // namespace sluice
