#include "core/picker/prefix_demand.h"

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

}  // namespace sluice
