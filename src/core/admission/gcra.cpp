#include "core/admission/gcra.h"

#include <algorithm>
#include <limits>

namespace sluice {

Gcra::Gcra(const GcraSpec& spec)
    : limit_(std::max<int64_t>(1, spec.limit)),
      burst_(spec.burst > 0 ? spec.burst : std::max<int64_t>(1, spec.limit)),
      period_(spec.period.count() > 0 ? spec.period : std::chrono::minutes(1)) {
  tau_ = cost(burst_);
}

Duration Gcra::to_duration_ceil(Scaled s) const {
  if (s <= 0) return Duration::zero();
  Scaled ns = (s + limit_ - 1) / limit_;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return Duration(ns > kMax ? kMax : static_cast<int64_t>(ns));
}

bool Gcra::try_consume(int64_t n, Time now) {
  if (n <= 0) return true;
  if (n > burst_) return false;
  const Scaled t = scaled(now);
  const Scaled next = std::max(tat_, t) + cost(n);
  if (next - t > tau_) return false;
  tat_ = next;
  return true;
}

void Gcra::force_consume(int64_t n, Time now) {
  if (n <= 0) return;
  tat_ = std::max(tat_, scaled(now)) + cost(n);
}

void Gcra::refund(int64_t n, Time now) {
  if (n <= 0) return;
  tat_ = std::max(tat_ - cost(n), scaled(now));
}

Duration Gcra::time_until(int64_t n, Time now) const {
  if (n > burst_) return kNever;
  if (n <= 0) return Duration::zero();
  const Scaled t = scaled(now);
  return to_duration_ceil(std::max(tat_, t) + cost(n) - tau_ - t);
}

int64_t Gcra::remaining(Time now) const {
  const Scaled t = scaled(now);
  const Scaled room = t + tau_ - std::max(tat_, t);
  if (room <= 0) return 0;
  const Scaled units = room / period_.count();
  return units >= burst_ ? burst_ : static_cast<int64_t>(units);
}

Duration Gcra::time_until_full(Time now) const { return to_duration_ceil(tat_ - scaled(now)); }

}  // namespace sluice
