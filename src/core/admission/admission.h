/*
 * Admission facade: the one object the live gateway and the fleet simulator hold, bundling the
 * tenant registry, token budgets (budget.h), per-tenant concurrency slots (concurrency.h) and the
 * priority/VTC queue (admission_queue.h), with the counters (counters.h) they all update.
 *
 * Life of one request (the order of calls):
 *   1. auth = admission.authenticate(authorization_header)      -> 401 Denial or the Tenant
 *   2. r = admission.admit(*auth.tenant, {model, input_tokens, max_output_tokens, priority,
 *                          body_bytes, cookie}, pool_saturated, now, rng)
 *        admit = concurrency slot -> budget reservation (all dimensions at once) -> enqueue.
 *        Refusals come back as a Denial (429 rate_limit / too_large / queue_full / shed); send
 *        error_json(denial.error) with denial.headers() (+ r.rate_limit_headers on 429s).
 *        r.request.output_bound().inject_max_tokens says whether to inject max_tokens upstream.
 *   3. the driver's dispatcher, whenever the pool has room (after an admit, after a request
 *      ends, on a timer): `while (room && (d = admission.pop_next(now))) wake(d->cookie)`;
 *      and `for (x : admission.expire(now, rng)) fail(x.cookie, x.denial)` (503 queue_timeout).
 *      admission.next_deadline() tells when to run expire() next.
 *   4. the woken request: request.on_dispatched(), pick the endpoint, forward;
 *      request.on_output(n) for every n streamed tokens (VTC fairness + delivered count).
 *   5. request.settle(usage, now) with the engine's usage -- or just let `AdmittedRequest` go out
 *      of scope: queued -> leaves the queue and is refunded fully; streaming -> charged the
 *      estimated input and the output delivered so far; slot released in every case.
 * The response carries r.rate_limit_headers (x-ratelimit-*) on success too.
 *
 * A tenant's max_concurrent counts its requests from admit() until release: queued and running.
 * Defaults: output bound 4096 tokens when the request sets none; concurrency retry-after 1 s;
 * queue defaults as in admission_queue.h. Thread-safe (each part guards its own state). Every
 * AdmittedRequest must be gone before its Admission is destroyed.
 */
#pragma once
#include <memory>
#include <optional>
#include <string_view>

#include "core/admission/admission_queue.h"
#include "core/admission/budget.h"
#include "core/admission/concurrency.h"
#include "core/admission/counters.h"
#include "core/admission/fair_share.h"
#include "core/admission/tenants.h"

namespace sluice {

struct AdmissionConfig {
  QueueConfig queue;
  FairShareConfig fair_share;  // per pool, applied by the dispatcher (fair_share.h)
  int64_t default_max_output_tokens = 4096;
  Duration concurrency_retry_base = std::chrono::seconds(1);
  JitterPolicy jitter;  // for rate-limit retry-after
  // The token buckets live in Redis (shared_budget.h, charged by the driver): the local Budget
  // only counts reservations.
  bool shared_budgets = false;
};

struct AdmissionRequest {
  std::string_view model;
  int64_t input_tokens = 0;                     // estimate_tokens(rendered prompt)
  std::optional<int64_t> max_output_tokens;     // RequestModel::max_output_tokens (per completion)
  std::optional<int64_t> priority;              // per-request priority (can only lower)
  size_t body_bytes = 0;
  uintptr_t cookie = 0;                         // returned by pop_next / expire
  int64_t completions = 1;                      // RequestModel::completions (n / best_of): the reservation covers this many
};

class Admission;

// Everything one admitted request holds. Move-only; destruction releases all of it.
class AdmittedRequest {
 public:
  AdmittedRequest() = default;
  AdmittedRequest(AdmittedRequest&&) noexcept = default;
  AdmittedRequest& operator=(AdmittedRequest&&) noexcept = default;

  bool valid() const { return reservation_.valid(); }
  const Tenant* tenant() const { return tenant_; }
  int priority() const { return priority_; }
  Ticket ticket() const { return placement_.ticket(); }
  const OutputBound& output_bound() const { return bound_; }
  const Reservation& reservation() const { return reservation_; }

  // pop_next handed this request out: it no longer sits in the queue; its input now counts.
  void on_dispatched();
  // n more output tokens reached the client.
  void on_output(int64_t tokens);
  // Final usage from the engine. Also releases the concurrency slot.
  void settle(const Usage& usage, Time now);
  // Client left (queued or streaming): same as destruction, but explicit.
  void release();

 private:
  friend class Admission;
  // Declaration order = reverse destruction order: leave the queue, then settle, then the slot.
  ConcurrencySlot slot_;
  Reservation reservation_;
  QueuePlacement placement_;
  AdmissionQueue* queue_ = nullptr;
  const Tenant* tenant_ = nullptr;
  int priority_ = 0;
  OutputBound bound_;
};

struct AdmissionResult {
  AdmittedRequest request;       // valid() when admitted (queued)
  std::optional<Denial> denial;  // else why not
  HeaderList rate_limit_headers; // x-ratelimit-* for the response (success or 429)
  Time deadline{0};              // queue TTL deadline when admitted
  bool ok() const { return request.valid(); }
};

class Admission {
 public:
  Admission(std::shared_ptr<const TenantRegistry> tenants, AdmissionConfig config = {});

  AuthResult authenticate(std::string_view authorization) const { return tenants_->authenticate(authorization); }
  AdmissionResult admit(const Tenant& tenant, const AdmissionRequest& req, bool pool_saturated, Time now,
                    AdmissionRng& rng);

  std::optional<Dispatch> pop_next(Time now) { return queue_.pop_next(now); }
  std::optional<Dispatch> pop_next(Time now, const std::function<bool(TenantId, uintptr_t)>& eligible) {
    return queue_.pop_next(now, eligible);
  }
  std::vector<QueueExit> expire(Time now, AdmissionRng& rng) { return queue_.expire(now, rng); }
  std::optional<Time> next_deadline() const { return queue_.next_deadline(); }

  const TenantRegistry& tenants() const { return *tenants_; }
  const AdmissionCounters& counters() const { return counters_; }
  AdmissionCounters& counters() { return counters_; }
  Budget& budget() { return budget_; }
  ConcurrencyLimiter& limiter() { return limiter_; }
  AdmissionQueue& queue() { return queue_; }
  const AdmissionConfig& config() const { return config_; }

 private:
  std::shared_ptr<const TenantRegistry> tenants_;
  AdmissionConfig config_;
  AdmissionCounters counters_;
  Budget budget_;
  ConcurrencyLimiter limiter_;
  AdmissionQueue queue_;
};

}  // namespace sluice
