#include "core/admission/admission.h"

namespace sluice {

void AdmittedRequest::on_dispatched() {
  placement_.disarm();
  reservation_.mark_dispatched();
}

void AdmittedRequest::on_output(int64_t tokens) {
  if (tokens <= 0 || !reservation_.valid()) return;
  reservation_.add_delivered(tokens);
  if (queue_ != nullptr && tenant_ != nullptr) queue_->charge_output(tenant_->id, priority_, tokens, tenant_->weight);
}

void AdmittedRequest::settle(const Usage& usage, Time now) {
  placement_.leave();
  reservation_.settle(usage, now);
  slot_.release();
}

void AdmittedRequest::release() {
  placement_.leave();
  reservation_.release();
  slot_.release();
}

Admission::Admission(std::shared_ptr<const TenantRegistry> tenants, AdmissionConfig config)
    : tenants_(std::move(tenants)),
      config_(std::move(config)),
      budget_(tenants_, &counters_, config_.jitter, !config_.shared_budgets),
      limiter_(tenants_, &counters_, config_.concurrency_retry_base, config_.jitter),
      queue_(config_.queue, &counters_) {}

AdmissionResult Admission::admit(const Tenant& tenant, const AdmissionRequest& req, bool pool_saturated, Time now,
                             AdmissionRng& rng) {
  AdmissionResult out;
  SlotResult slot = limiter_.try_acquire(tenant, rng);
  if (!slot.ok()) {
    // Like every other 429: the client sees where it stands on its buckets (x-ratelimit-*).
    out.rate_limit_headers = budget_.status(tenant, req.model, now).headers();
    out.denial = std::move(slot.denial);
    return out;
  }
  const OutputBound bound = output_bound_for(req.max_output_tokens, config_.default_max_output_tokens);
  // n > 1 (or best_of): the engine generates that many completions, each up to the bound.
  const int64_t reserved_output = bound.tokens * std::max<int64_t>(1, req.completions);
  ReserveResult reserved = budget_.reserve(tenant, req.model, {req.input_tokens, reserved_output}, now, rng);
  out.rate_limit_headers = reserved.status.headers();
  if (!reserved.ok()) {
    out.denial = std::move(reserved.denial);
    return out;
  }
  const int priority = effective_priority(tenant.priority, req.priority);
  EnqueueResult queued = queue_.enqueue(
      {tenant.id, tenant.weight, priority, req.input_tokens, req.body_bytes, req.cookie}, pool_saturated, now, rng);
  if (!queued.ok()) {
    out.denial = std::move(queued.denial);
    return out;  // the reservation refunds and the slot releases here
  }
  AdmittedRequest& r = out.request;
  r.slot_ = std::move(slot.slot);
  r.reservation_ = std::move(reserved.reservation);
  r.placement_ = QueuePlacement(queue_, queued.ticket);
  r.queue_ = &queue_;
  r.tenant_ = &tenant;
  r.priority_ = priority;
  r.bound_ = bound;
  out.deadline = queued.deadline;
  return out;
}

}  // namespace sluice
