/*
 * The gateway's admission queue: where requests wait while the pool is saturated.
 *
 * Algorithm (flow control after the Gateway API Inference Extension, fairness after VTC):
 *   - Strict priority bands: a request's band is its priority (the tenant's, optionally lowered
 *     per request, see effective_priority); higher bands always dispatch first. Negative
 *     priorities are sheddable: refused at once (`shed`, 429) when the pool is saturated.
 *   - Within a band, fairness between tenants by a Virtual Token Counter (vtc.h): the backlogged
 *     tenant with the smallest counter goes next; its input is charged at dispatch and output is
 *     charged as it streams (charge_output). Within a tenant, FCFS.
 *   - Bounded memory: at most max_requests entries and max_bytes request bytes in all bands;
 *     beyond that `queue_full` (429, jittered retry-after).
 *   - Queue-time budget per priority (TTL): an entry that waits past enqueue time + TTL leaves
 *     with `queue_timeout` (503, jittered retry-after) via expire(); pop_next never hands out an
 *     expired entry.
 *   - remove(ticket) when a queued client disconnects: the entry leaves at once; the caller's
 *     Reservation (not held here) refunds the budget. `QueuePlacement` is the RAII form.
 *   - pop_next(now) is called by the dispatcher whenever the pool has room; the endpoint is
 *     picked by the caller after that (late binding). pop_next(now, eligible) lets the caller
 *     pass over tenants that may not take a slot now (fair_share.h) without reordering anyone.
 * Defaults: max_requests 4096, max_bytes 64 MiB, TTL 30 s for every priority, retry-after base
 * 1 s with full-width jitter (spread 1.0: [1 s, 2 s]), VTC weights w_in 1, w_out 2.
 *
 * The queue holds no reservation or coroutine: an entry carries an opaque `cookie` from the
 * caller (e.g. a pointer to the waiter) that comes back on dispatch or expiry. Thread-safe (one
 * mutex); the fleet simulator drives it from one thread with virtual time.
 */
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/admission/counters.h"
#include "core/admission/outcome.h"
#include "core/admission/tenants.h"
#include "core/admission/vtc.h"

namespace sluice {

using Ticket = uint64_t;  // 0 = none

struct QueueConfig {
  size_t max_requests = 4096;
  size_t max_bytes = size_t{64} << 20;
  Duration default_ttl = std::chrono::seconds(30);
  std::vector<std::pair<int, Duration>> ttl_by_priority;  // exact priority -> TTL
  Duration retry_base = std::chrono::seconds(1);
  JitterPolicy jitter{1.0, std::chrono::milliseconds(10)};
  VtcWeights vtc;

  Duration ttl_for(int priority) const;
};

// The tenant's priority, lowered (never raised) by a per-request value (header or body field).
int effective_priority(int tenant_priority, std::optional<int64_t> requested);

struct QueueRequest {
  TenantId tenant = 0;
  double weight = 1.0;        // Tenant::weight
  int priority = 0;           // effective_priority(...)
  int64_t input_tokens = 0;   // charged to the VTC at dispatch
  size_t bytes = 0;           // request body size, counted against max_bytes
  uintptr_t cookie = 0;       // opaque, returned on dispatch / expiry
};

struct EnqueueResult {
  Ticket ticket = 0;
  Time deadline{0};              // when the entry expires if still queued
  std::optional<Denial> denial;  // queue_full or shed
  bool ok() const { return !denial.has_value(); }
};

struct Dispatch {
  Ticket ticket = 0;
  uintptr_t cookie = 0;
  TenantId tenant = 0;
  int priority = 0;
  Duration waited{0};
};

struct QueueExit {  // an expired entry
  Ticket ticket = 0;
  uintptr_t cookie = 0;
  TenantId tenant = 0;
  int priority = 0;
  Duration waited{0};
  Denial denial;  // queue_timeout, 503
};

struct BandDepth {
  int priority = 0;
  size_t requests = 0;
  size_t bytes = 0;
};

class AdmissionQueue {
 public:
  static constexpr size_t kLookahead = 32;  // entries of one tenant pop_next(now, eligible) looks at
  explicit AdmissionQueue(QueueConfig config = {}, AdmissionCounters* counters = nullptr);
  AdmissionQueue(const AdmissionQueue&) = delete;
  AdmissionQueue& operator=(const AdmissionQueue&) = delete;

  // `pool_saturated`: the picker's verdict. Sheddable requests are refused when it is true.
  EnqueueResult enqueue(const QueueRequest& req, bool pool_saturated, Time now, AdmissionRng& rng);
  // The client left while queued. True if the entry was still queued (and is now gone).
  bool remove(Ticket ticket);
  // The next request to dispatch, or nullopt when nothing (unexpired) is queued.
  std::optional<Dispatch> pop_next(Time now);
  // The same, passing over tenants whose oldest entry `eligible(tenant, cookie)` refuses (e.g. a
  // tenant above its fair share of the pool, fair_share.h, or a pool without room): the
  // highest band with an eligible tenant, its smallest-counter eligible tenant, that tenant's oldest.
  std::optional<Dispatch> pop_next(Time now, const std::function<bool(TenantId, uintptr_t)>& eligible);
  // Removes every entry whose TTL has passed (including ones pop_next skipped) with its 503.
  std::vector<QueueExit> expire(Time now, AdmissionRng& rng);
  // The earliest deadline of a queued entry (for the driver's timer).
  std::optional<Time> next_deadline() const;

  // Output tokens streamed for a request dispatched from band `priority` (VTC charge).
  void charge_output(TenantId tenant, int priority, int64_t tokens, double weight = 1.0);

  size_t size() const;
  size_t bytes() const;
  std::vector<BandDepth> band_depths() const;  // highest priority first
  double vtc_counter(int priority, TenantId tenant) const;
  const QueueConfig& config() const { return config_; }

 private:
  struct Entry {
    Ticket ticket;
    uintptr_t cookie;
    TenantId tenant;
    double weight;
    int64_t input_tokens;
    size_t bytes;
    Time enqueued;
    Time deadline;
    std::list<Ticket>::iterator arrival_pos;
  };
  struct Band {
    int priority = 0;
    Duration ttl{0};
    std::unordered_map<TenantId, std::list<Entry>> tenants;  // FCFS per tenant
    std::list<Ticket> arrival;                               // all entries, oldest first
    VirtualTokenCounter vtc;
    size_t requests = 0;
    size_t bytes = 0;
  };
  struct Location {
    Band* band;
    std::list<Entry>::iterator entry;
  };
  struct Expired {
    Entry entry;
    int priority;
  };

  Band& band_for(int priority);
  Entry take(Band& band, std::list<Entry>::iterator it);  // unlinks an entry everywhere
  void collect_expired(Time now);                         // into expired_

  QueueConfig config_;
  AdmissionCounters* counters_;
  mutable std::mutex mu_;
  std::map<int, Band, std::greater<int>> bands_;
  std::unordered_map<Ticket, Location> index_;
  std::vector<Expired> expired_;
  size_t requests_ = 0;
  size_t bytes_ = 0;
  Ticket next_ticket_ = 1;
};

// RAII form of a queued entry: removes it on destruction unless it was dispatched or expired
// (removing a ticket that is no longer queued is a no-op).
class QueuePlacement {
 public:
  QueuePlacement() = default;
  QueuePlacement(AdmissionQueue& q, Ticket t) : queue_(&q), ticket_(t) {}
  QueuePlacement(const QueuePlacement&) = delete;
  QueuePlacement& operator=(const QueuePlacement&) = delete;
  QueuePlacement(QueuePlacement&& o) noexcept
      : queue_(std::exchange(o.queue_, nullptr)), ticket_(o.ticket_) {}
  QueuePlacement& operator=(QueuePlacement&& o) noexcept {
    if (this != &o) {
      leave();
      queue_ = std::exchange(o.queue_, nullptr);
      ticket_ = o.ticket_;
    }
    return *this;
  }
  ~QueuePlacement() { leave(); }

  Ticket ticket() const { return ticket_; }
  // The entry was dispatched (or expired): nothing to remove any more.
  void disarm() { queue_ = nullptr; }
  // Leave the queue now (client gone). True if it was still queued.
  bool leave() { return queue_ != nullptr && std::exchange(queue_, nullptr)->remove(ticket_); }

 private:
  AdmissionQueue* queue_ = nullptr;
  Ticket ticket_ = 0;
};

}  // namespace sluice
