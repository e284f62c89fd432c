#include "gateway/http/body_budget.h"

namespace sluice {

bool BodyBudget::try_charge(size_t n, size_t limit) {
  size_t now = buffered_.load(std::memory_order_relaxed);
  do {
    if (now + n > limit) return false;
  } while (!buffered_.compare_exchange_weak(now, now + n, std::memory_order_relaxed));
  const size_t total = now + n;
  size_t peak = peak_.load(std::memory_order_relaxed);
  while (total > peak && !peak_.compare_exchange_weak(peak, total, std::memory_order_relaxed)) {
  }
  return true;
}

void BodyBudget::release(size_t n) {
  if (n > 0) buffered_.fetch_sub(n, std::memory_order_relaxed);
}

bool BodyBudget::trim_due(size_t threshold) {
  const size_t now = buffered();
  size_t peak = peak_.load(std::memory_order_relaxed);
  if (peak < now + threshold) return false;
  return peak_.compare_exchange_strong(peak, now, std::memory_order_relaxed);
}

BodyBudget& body_budget() {
  static BodyBudget budget;
  return budget;
}

}  // namespace sluice
