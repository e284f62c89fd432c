#include "core/picker/prefix_demand.h"

#include <algorithm>
#include <cmath>

namespace sluice {

double PrefixDemand::decayed(const Way& w, Time now) {
  const double dt = std::max(0.0, to_millis(now - w.last));
  return w.count * std::exp(-dt / kTauMs);
}

double PrefixDemand::rate(uint64_t key, Time now) const {
  for (const Way& w : sets_[set_of(key)])
    if (w.count > 0 && w.key == key) return decayed(w, now) / kTauMs;
  return 0.0;
}

void PrefixDemand::note(uint64_t key, Time now) {
  auto& set = sets_[set_of(key)];
  for (Way& w : set) {
    if (w.count > 0 && w.key == key) {
      w.count = decayed(w, now) + 1.0;
      w.last = now;
      return;
    }
  }
  Way& victim = decayed(set[0], now) <= decayed(set[1], now) ? set[0] : set[1];
  victim = Way{key, 1.0, now};
}

void PrefixDemand::clear() { sets_ = {}; }

std::vector<std::pair<uint64_t, double>> PrefixDemand::top(Time now, size_t n) const {
  std::vector<std::pair<uint64_t, double>> out;
  for (const auto& set : sets_)
    for (const Way& w : set)
      if (w.count > 0)
        if (const double c = decayed(w, now); c >= 0.5) out.emplace_back(w.key, c / kTauMs);
  const auto more = [](const auto& a, const auto& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); };
  const size_t k = std::min(n, out.size());
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k), out.end(), more);
  out.resize(k);
  return out;
}

}  // namespace sluice
