/*
 * Per-tenant maximum concurrent requests, held by an RAII slot guard.
 *
 * Algorithm: one atomic in-flight count per tenant. try_acquire increments it and keeps the slot
 * if the count was below the tenant's max_concurrent (unlimited when unset), else undoes the
 * increment and refuses with a 429 (`rate_limit`, type "requests", retry-after = a jittered
 * base, default 1 s: a slot frees when some request of the same tenant ends, which no bucket can
 * predict). The `ConcurrencySlot` guard gives the slot back when destroyed, so a cancelled stream
 * can never leak capacity and lock a tenant out (a known failure of counters decremented by hand).
 * Lock-free; slots may be released on any thread.
 */
#pragma once
#include <atomic>
#include <memory>
#include <optional>

#include "core/admission/counters.h"
#include "core/admission/outcome.h"
#include "core/admission/tenants.h"

namespace sluice {

class ConcurrencyLimiter;

class ConcurrencySlot {
 public:
  ConcurrencySlot() = default;
  ConcurrencySlot(const ConcurrencySlot&) = delete;
  ConcurrencySlot& operator=(const ConcurrencySlot&) = delete;
  ConcurrencySlot(ConcurrencySlot&& o) noexcept
      : limiter_(std::exchange(o.limiter_, nullptr)), tenant_(o.tenant_) {}
  ConcurrencySlot& operator=(ConcurrencySlot&& o) noexcept;
  ~ConcurrencySlot() { release(); }

  bool valid() const { return limiter_ != nullptr; }
  TenantId tenant() const { return tenant_; }
  void release();

 private:
  friend class ConcurrencyLimiter;
  ConcurrencyLimiter* limiter_ = nullptr;
  TenantId tenant_ = 0;
};

struct SlotResult {
  ConcurrencySlot slot;          // valid() when acquired
  std::optional<Denial> denial;  // when the tenant is at its max_concurrent
  bool ok() const { return slot.valid(); }
};

class ConcurrencyLimiter {
 public:
  explicit ConcurrencyLimiter(std::shared_ptr<const TenantRegistry> tenants,
                              AdmissionCounters* counters = nullptr,
                              Duration retry_base = std::chrono::seconds(1), JitterPolicy jitter = {});
  // All slots must be released before the limiter is destroyed.
  ~ConcurrencyLimiter();

  SlotResult try_acquire(const Tenant& tenant, AdmissionRng& rng);
  int64_t in_flight(TenantId t) const { return in_flight_[t].load(std::memory_order_relaxed); }
  int64_t total_in_flight() const { return total_.load(std::memory_order_relaxed); }

 private:
  friend class ConcurrencySlot;
  void release(TenantId t);

  std::shared_ptr<const TenantRegistry> tenants_;
  AdmissionCounters* counters_;
  Duration retry_base_;
  JitterPolicy jitter_;
  std::unique_ptr<std::atomic<int64_t>[]> in_flight_;
  std::atomic<int64_t> total_{0};
};

}  // namespace sluice
