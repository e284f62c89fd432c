#include "core/admission/concurrency.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

namespace sluice {

ConcurrencySlot& ConcurrencySlot::operator=(ConcurrencySlot&& o) noexcept {
  if (this != &o) {
    release();
    limiter_ = std::exchange(o.limiter_, nullptr);
    tenant_ = o.tenant_;
  }
  return *this;
}

void ConcurrencySlot::release() {
  if (limiter_ == nullptr) return;
  std::exchange(limiter_, nullptr)->release(tenant_);
}

ConcurrencyLimiter::ConcurrencyLimiter(std::shared_ptr<const TenantRegistry> tenants,
                                       AdmissionCounters* counters, Duration retry_base,
                                       JitterPolicy jitter)
    : tenants_(std::move(tenants)), counters_(counters), retry_base_(retry_base), jitter_(jitter) {
  in_flight_ = std::make_unique<std::atomic<int64_t>[]>(tenants_->size());
  for (size_t i = 0; i < tenants_->size(); ++i) in_flight_[i].store(0);
}

ConcurrencyLimiter::~ConcurrencyLimiter() {
  assert(total_in_flight() == 0 && "a ConcurrencySlot outlived its limiter");
}

SlotResult ConcurrencyLimiter::try_acquire(const Tenant& tenant, AdmissionRng& rng) {
  SlotResult r;
  auto& count = in_flight_[tenant.id];
  const int64_t before = count.fetch_add(1, std::memory_order_acq_rel);
  if (tenant.limits.max_concurrent && before >= *tenant.limits.max_concurrent) {
    count.fetch_sub(1, std::memory_order_acq_rel);
    Denial d;
    d.reason = RejectReason::rate_limit;
    d.error.status = 429;
    d.error.type = "requests";
    d.error.code = "rate_limit_exceeded";
    d.retry_after = jittered(retry_base_, rng, jitter_);
    d.error.message = fmt::format(
        "Rate limit reached for {} on concurrent requests: Limit {}, Used {}, Requested 1. Please "
        "try again in {}.",
        tenant.name, *tenant.limits.max_concurrent, std::min(before, *tenant.limits.max_concurrent),
        format_go_duration(d.retry_after));
    if (counters_ != nullptr) counters_->reject(RejectReason::rate_limit);
    r.denial = std::move(d);
    return r;
  }
  total_.fetch_add(1, std::memory_order_relaxed);
  if (counters_ != nullptr) counters_->in_flight.fetch_add(1, std::memory_order_relaxed);
  r.slot.limiter_ = this;
  r.slot.tenant_ = tenant.id;
  return r;
}

void ConcurrencyLimiter::release(TenantId t) {
  in_flight_[t].fetch_sub(1, std::memory_order_acq_rel);
  total_.fetch_sub(1, std::memory_order_relaxed);
  if (counters_ != nullptr) counters_->in_flight.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace sluice
