#include "core/health/outlier_detector.h"

#include <algorithm>
#include <cmath>

namespace sluice {

OutlierDetector::OutlierDetector(size_t endpoints, OutlierConfig cfg) : cfg_(cfg), state_(endpoints) {}

void OutlierDetector::refresh(State& s, Time now) {
  if (s.ejected && now >= s.until) {
    s.ejected = false;
    s.streak = 0;
    s.healthy_since = now;
  }
  // Forgive one past ejection per healthy base period, so a flap long ago does not cost 300 s.
  while (!s.ejected && s.times_ejected > 0 && now - s.healthy_since >= cfg_.base_ejection) {
    --s.times_ejected;
    s.healthy_since += cfg_.base_ejection;
  }
}

bool OutlierDetector::record(size_t endpoint, AttemptResult result, Time now) {
  auto& s = state_.at(endpoint);
  refresh(s, now);
  if (result == AttemptResult::success) {
    s.streak = 0;
    return false;
  }
  if (result == AttemptResult::client_error) return false;  // never the replica's fault
  if (s.ejected) return false;
  if (++s.streak < cfg_.consecutive_failures) return false;

  const size_t n = state_.size();
  size_t allowed = static_cast<size_t>(std::floor(cfg_.max_ejected_fraction * static_cast<double>(n)));
  if (n >= 2) allowed = std::max<size_t>(allowed, 1);
  if (ejected_count(now) >= allowed) return false;

  s.times_ejected += 1;
  s.ejected = true;
  s.streak = 0;
  auto d = cfg_.base_ejection * s.times_ejected;
  s.until = now + std::min<Duration>(d, cfg_.max_ejection);
  return true;
}

bool OutlierDetector::ejected(size_t endpoint, Time now) {
  auto& s = state_.at(endpoint);
  refresh(s, now);
  return s.ejected;
}

size_t OutlierDetector::ejected_count(Time now) {
  size_t c = 0;
  for (auto& s : state_) {
    refresh(s, now);
    c += s.ejected ? 1 : 0;
  }
  return c;
}

}  // namespace sluice
