// Fraction of recent time an engine spent executing steps (the simulator's stand-in for DCGM's
// GR_ENGINE_ACTIVE). Samples of (time, cumulative busy time) are recorded at most every
// `min_gap`; the fraction over the last `window` is the busy-time delta over the time delta from
// the newest sample at least `window` old (or the oldest one kept).
#pragma once
#include <algorithm>
#include <deque>
#include <utility>

#include "core/time.h"

namespace sluice::sim {

class DutyCycle {
 public:
  explicit DutyCycle(Duration window = std::chrono::seconds(1), Duration min_gap = std::chrono::milliseconds(50))
      : window_(window), min_gap_(min_gap) {}

  void record(Time now, Duration busy) {
    if (!samples_.empty() && now - samples_.back().first < min_gap_) return;
    samples_.emplace_back(now, busy);
    // Keep one sample older than the window as the base.
    while (samples_.size() > 2 && samples_[1].first <= now - window_) samples_.pop_front();
  }

  double fraction(Time now, Duration busy_now) const {
    std::pair<Time, Duration> base{Time{0}, Duration{0}};
    for (const auto& s : samples_) {
      if (s.first <= now - window_) base = s;
      else break;
    }
    // No sample is old enough yet: measure from time zero.
    const double dt = to_seconds(now - base.first);
    if (dt <= 0) return 0.0;
    return std::clamp(to_seconds(busy_now - base.second) / dt, 0.0, 1.0);
  }

 private:
  Duration window_, min_gap_;
  std::deque<std::pair<Time, Duration>> samples_;
};

}  // namespace sluice::sim
