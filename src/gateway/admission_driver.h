/*
 * The live gateway's admission driver: connects the pure admission layer (core/admission) to the
 * request path through Gateway::admit.
 *
 * Per request (proxy.cpp calls the generation's AdmissionRuntime after parsing, before picking):
 *   1. authenticate `Authorization: Bearer <key>` (401 in OpenAI's format when missing/unknown,
 *      unless an anonymous tenant is configured). Keys are never logged; the access log's tenant
 *      field becomes the tenant's name.
 *   2. admit: concurrency slot, token reservation, enqueue (refusals: 429 rate_limit / too_large /
 *      queue_full / shed). `x-sluice-priority: <int>` may lower the tenant's priority.
 *   3. wait: the request's coroutine parks on a steady_timer (on its own worker thread) until the
 *      dispatcher pops its cookie, its queue TTL passes (503 queue_timeout, jittered Retry-After)
 *      or its client leaves (polled every kPoll; the entry leaves the queue and is refunded).
 *   4. the ticket (AdmissionTicket) wraps the AdmittedRequest: on_dispatched when proxy.cpp holds
 *      the DispatchGuard, on_output per relayed token, settle with the usage at the end (unknown
 *      usage or a cut stream: charged the estimated input and the output delivered).
 *
 * Dispatcher: runs after every admit, after every dispatch/finish of an admitted request, and on
 * every waiter's poll tick. It pops (AdmissionQueue::pop_next with an eligibility filter) the
 * highest-priority, smallest-VTC-counter request that may go now: its pool is not saturated
 * (PoolRouter::saturated: hard in-flight cap, or fresh engine queue / KV signals at the pool's
 * saturation limits), has no popped-but-not-yet-placed request (so two pops cannot both see the
 * same free slot), and its tenant may take a free slot of that pool (FairShare, one per pool:
 * below its weighted share always; above it only slots not kept for other recently active
 * tenants' recent demand). The endpoint is picked by the woken request (late binding).
 *
 * One Admission per gateway (budgets are tenant-wide, across pools); the queue is shared by the
 * pools and the filter passes over entries whose pool has no room, so a full pool never blocks
 * another pool's requests.
 *
 * Threading: requests run on several worker threads. Admission's parts guard their own state, but
 * the driver's state (waiters by cookie, per-pool queued/popped counts) must change atomically
 * with pop_next/expire, else a popped cookie could miss its waiter. A plain mutex (mu_) does that:
 * critical sections are short (map operations + one pop) and never suspend; a strand would force
 * every admit to hop threads. Waking a waiter never touches its timer from another thread: the
 * state is set under mu_ and the timer is cancelled by a handler posted to the waiter's executor.
 */
#pragma once
#include <memory>
#include <string>

#include "gateway/gateway.h"

namespace sluice {

// The admission layer for `config` (Config::admission): null when admission is disabled (or, with
// `error` set, when the tenants do not validate). A reload whose `tenants:` and `admission:`
// sections are unchanged keeps `previous`'s (budgets, queue, VTC counters and fair shares carry
// over); a changed one gets a new layer with full budgets, and requests queued in the old one are
// still dispatched by it.
std::shared_ptr<AdmissionRuntime> make_admission(Gateway& gw, const Config& config, const Generation* previous,
                                                 std::string& error);

}  // namespace sluice
