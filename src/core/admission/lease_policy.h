/*
 * Local leases on shared token buckets: how big a slice a replica takes, when it gives it back,
 * and what that costs in accuracy. Pure functions; SharedBudget (shared_budget.h) applies them.
 *
 * Algorithm. A replica answers a request from its own lease credit when the credit covers every
 * bucket the request needs (no Redis round trip). Otherwise it makes one atomic script call
 * (shared_bucket_script.h) reserving the request's need plus a slice
 *     slice = min(floor(share x R / N), floor(max_slice x burst))
 * where R = the shared bucket's remaining units as last seen, N = replicas seen recently. The
 * slice is prepaid: it is charged to the shared bucket when taken, so it never lets the tenant
 * spend more than the shared GCRA allows. Settlements go to the local credit at once (refund or
 * debt) and reach Redis in a sync, batched per bucket group: every `sync_interval` a bucket group
 * with something to say sends one settle call with the net adjustment: a charge (debt) at once,
 * the credit above `keep` (the slice while the bucket was used within `idle_return`, else 0) once
 * the credit exceeds 2 x keep (at once when keep is 0), and otherwise, for a busy bucket, its held
 * units every `refresh`; the reply brings the shared remaining for the x-ratelimit headers. Near the limit R is small, so slices
 * shrink to 0 and every request is an exact reservation in Redis.
 *
 * Bounds (the tests and bench/results/redis-budgets.md measure them):
 *   - overshoot from leases: 0. Over any interval T the tokens admitted across all replicas are
 *     at most the shared bucket's allowance burst + rate x T, like one local GCRA, plus what a
 *     settlement charges above its reservation (input estimates that were low; output is bounded
 *     by the injected max_tokens).
 *   - what leases cost: at most 2 x N x slice <= 2 x share x R units sit unused in other
 *     replicas' leases at any time (credit is given back above 2 x keep), so a request may be
 *     refused while that much (never more than 2 x N x max_slice x burst) is held elsewhere; near
 *     the limit R, and with it every slice, goes to 0; unused credit comes back within
 *     idle_return + sync_interval.
 *   - fail-open (Redis unreachable): each replica falls back to a local bucket of limit/N and
 *     burst/N, started at its share R/N of the remaining last seen; what it admits is charged to
 *     Redis when it returns. With N right, the fleet admits at most burst + rate x T over the
 *     outage; each restart of Redis without persistence forgets the buckets' state (up to one
 *     burst more); with N seen too small by k replicas, the outage admits up to (N+k)/N x.
 * Defaults: share 0.25, max_slice 0.05 of the burst, idle_return 1 s, sync_interval 200 ms,
 * refresh 1 s.
 */
#pragma once
#include <cstdint>

#include "core/time.h"

namespace sluice {

struct LeaseConfig {
  double share = 0.25;      // of the remaining, split over the replicas seen; 0 disables leases
  double max_slice = 0.05;  // of the bucket size
  Duration idle_return = std::chrono::seconds(1);
  Duration sync_interval = std::chrono::milliseconds(200);
  Duration refresh = std::chrono::seconds(1);  // a busy bucket reports held units / reads remaining this often
};

// Units to take beyond a request's need. remaining = the shared bucket's remaining after the
// need; replicas >= 1.
int64_t lease_slice(int64_t burst, int64_t remaining, int replicas, const LeaseConfig& cfg);

// Credit a bucket keeps at a sync: the slice while used within idle_return, else nothing.
int64_t lease_keep(int64_t burst, int64_t remaining, int replicas, Duration since_used, const LeaseConfig& cfg);

// The most units all replicas' leases can hold unused at once (the early-refusal bound).
int64_t lease_idle_bound(int64_t burst, int64_t remaining, int replicas, const LeaseConfig& cfg);

}  // namespace sluice
