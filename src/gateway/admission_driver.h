/*
 * The live gateway's admission driver: connects the pure admission layer (core/admission) and its
 * dispatcher (core/admission/dispatcher.h, the same rule fleetsim runs) to the request path.
 *
 * Per request (the request's life calls the generation's AdmissionRuntime):
 *   1. authenticate `Authorization: Bearer <key>` (401 in OpenAI's format when missing/unknown,
 *      unless an anonymous tenant is configured), before the model is resolved. Keys are never
 *      logged; the access log's tenant field becomes the tenant's name.
 *   2. admit: concurrency slot, token reservation, enqueue (refusals: 429 rate_limit / too_large /
 *      queue_full / shed). `x-sluice-priority: <int>` may lower the tenant's priority.
 *   3. the dispatcher runs at once: when the pool has room the request is popped in the same
 *      critical section and never waits. Otherwise its coroutine parks on a steady_timer (on its own
 *      worker thread) until the dispatcher pops it (woken by a handler posted to its executor), its
 *      queue TTL passes (503 queue_timeout, jittered Retry-After), or its client leaves (the
 *      connection's cancellation signal cancels the wait; the entry leaves the queue and is
 *      refunded). Nothing polls.
 *   4. the ticket (AdmissionTicket) wraps the AdmittedRequest: on_dispatched when the request holds
 *      its DispatchGuard, on_output per relayed read, settle with the usage at the end (unknown
 *      usage or a cut stream: charged the estimated input and the output delivered).
 * The dispatcher runs after every admit, when a request is placed or ends (only if something is
 * queued), and on poke() (the worker's housekeeping tick: room that appears without a request
 * ending, e.g. an endpoint turning healthy).
 *
 * Without `tenants:` / `admission:` the same driver is the implicit gate: one tenant without limits
 * or keys, no fair shares, the default queue; the client's Authorization passes through untouched.
 * It makes max_in_flight_per_endpoint a hard cap in both modes (requests beyond it wait in the
 * gateway queue, with its TTL and shedding rules).
 *
 * One Admission per gateway (budgets are tenant-wide, across pools); the queue is shared by the
 * pools. Threading: requests run on several worker threads; the driver's state (waiters by cookie,
 * the dispatcher) must change atomically with pop_next/expire, else a popped cookie could miss its
 * waiter. A plain mutex (mu_) does that: critical sections are short and never suspend; a strand
 * would force every admit to hop threads. Waking a waiter never touches its timer from another
 * thread: the state is set under mu_ and the timer is cancelled by a handler posted to the waiter's
 * executor.
 */
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "gateway/generation.h"

namespace sluice {

class MetricsRegistry;

// What the driver needs from the process: its metrics, its clock, the current generation (a pool
// replaced by a reload: the current one's room counts).
struct AdmissionHost {
  MetricsRegistry& registry;
  std::function<Time()> now;
  std::function<std::shared_ptr<const Generation>()> current;
};

// The admission layer for `config`: the configured one (Config::admission), or the implicit gate
// when admission is off. Null with `error` set when the tenants do not validate. A reload whose
// `tenants:` and `admission:` sections are unchanged keeps `previous`'s (budgets, queue, VTC
// counters and fair shares carry over); a changed one gets a new layer with full budgets, and
// requests queued in the old one are still dispatched by it.
std::shared_ptr<AdmissionRuntime> make_admission(const AdmissionHost& host, const Config& config,
                                                 const Generation* previous, std::string& error);

}  // namespace sluice
