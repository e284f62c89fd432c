#include "core/admission/fair_share.h"

#include <algorithm>
#include <cmath>

namespace sluice {

FairShare::State& FairShare::at(TenantId t) {
  if (t >= ts_.size()) ts_.resize(t + 1);
  return ts_[t];
}

bool FairShare::active(const State& s, Time now) const {
  return s.queued > 0 || s.in_flight > 0 || (s.seen && now - s.last_arrival <= c_.active_window);
}

double FairShare::average(const State& s, Time now) const {
  const double current = static_cast<double>(s.queued + s.in_flight);
  const double dt = to_seconds(now - s.avg_at);
  const double tau = std::max(1e-3, to_seconds(c_.active_window) / 4);
  if (dt <= 0) return s.avg;
  const double keep = std::exp(-dt / tau);  // the count held `current` since avg_at
  return s.avg * keep + current * (1 - keep);
}

void FairShare::settle(State& s, Time now) {
  s.avg = average(s, now);
  s.avg_at = std::max(s.avg_at, now);
}

int64_t FairShare::demand(const State& s, Time now) const {
  // ceil, forgiving float noise: an average of 1.0000001 is one slot, not two
  const auto avg = static_cast<int64_t>(std::ceil(average(s, now) - 1e-6));
  return std::max<int64_t>(avg, 1);
}

double FairShare::band_weight(int priority, Time now) const {
  double w = 0;
  for (TenantId id : listed_) {
    const State& s = ts_[id];
    if (s.priority == priority && active(s, now)) w += s.weight;
  }
  return w;
}

void FairShare::prune(Time now) {
  // Amortised: a pass when the list doubled since the last one, or a window has passed.
  if (listed_.size() < 2 * std::max<size_t>(pruned_at_size_, 8) && now - pruned_at_ < c_.active_window) return;
  pruned_at_ = now;
  std::erase_if(listed_, [&](TenantId id) {
    if (active(ts_[id], now)) return false;
    ts_[id].listed = false;
    return true;
  });
  pruned_at_size_ = listed_.size();
}

void FairShare::on_queued(TenantId t, double weight, Time now, int priority) {
  State& s = at(t);
  settle(s, now);
  s.weight = weight > 0 ? weight : 1.0;
  s.priority = priority;
  s.queued += 1;
  s.seen = true;
  s.last_arrival = now;
  if (!s.listed) {
    s.listed = true;
    listed_.push_back(t);
    prune(now);
  }
}

void FairShare::on_left_queue(TenantId t, Time now) {
  State& s = at(t);
  settle(s, now);
  if (s.queued > 0) s.queued -= 1;
}

void FairShare::on_dispatched(TenantId t) {
  State& s = at(t);
  if (s.queued > 0) s.queued -= 1;
  s.in_flight += 1;
  total_in_flight_ += 1;
}

void FairShare::on_finished(TenantId t, Time now) {
  State& s = at(t);
  settle(s, now);
  if (s.in_flight > 0) {
    s.in_flight -= 1;
    total_in_flight_ -= 1;
  }
}

double FairShare::share(TenantId t, int64_t capacity, Time now) const {
  if (t >= ts_.size()) return static_cast<double>(capacity);
  const State& self = ts_[t];
  double total = band_weight(self.priority, now);
  if (!active(self, now)) total += self.weight;
  return total > 0 ? static_cast<double>(capacity) * self.weight / total : static_cast<double>(capacity);
}

int64_t FairShare::reserved_for_others(TenantId t, int64_t capacity, Time now) const {
  const int priority = t < ts_.size() ? ts_[t].priority : 0;
  // Active weight per priority band at or above t's (few distinct priorities: a small vector).
  std::vector<std::pair<int, double>> bands;
  for (TenantId id : listed_) {
    const State& s = ts_[id];
    if (s.priority < priority || !active(s, now)) continue;
    auto it = std::find_if(bands.begin(), bands.end(), [&](const auto& b) { return b.first == s.priority; });
    if (it == bands.end()) bands.emplace_back(s.priority, s.weight);
    else it->second += s.weight;
  }
  int64_t reserved = 0;
  for (TenantId o : listed_) {
    const State& s = ts_[o];
    if (o == t || !active(s, now) || s.priority < priority) continue;
    double total = std::find_if(bands.begin(), bands.end(), [&](const auto& b) { return b.first == s.priority; })->second;
    if (t < ts_.size() && ts_[t].priority == s.priority && !active(ts_[t], now)) total += ts_[t].weight;
    if (total <= 0) continue;
    const auto share = static_cast<int64_t>(std::floor(static_cast<double>(capacity) * s.weight / total));
    reserved += std::max<int64_t>(0, std::min(share, demand(s, now) + c_.spare) - s.in_flight);
  }
  return reserved;
}

bool FairShare::may_dispatch(TenantId t, int64_t capacity, int64_t in_flight, Time now) const {
  if (!c_.enabled) return true;
  if (this->in_flight(t) == 0 && capacity > 0) return true;  // below any positive share (the light tenant's case)
  if (static_cast<double>(this->in_flight(t)) < share(t, capacity, now)) return true;
  return capacity - in_flight - reserved_for_others(t, capacity, now) > 0;
}

}  // namespace sluice
