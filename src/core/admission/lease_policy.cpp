#include "core/admission/lease_policy.h"

#include <algorithm>
#include <cmath>

namespace sluice {

int64_t lease_slice(int64_t burst, int64_t remaining, int replicas, const LeaseConfig& cfg) {
  if (cfg.share <= 0 || remaining <= 0 || burst <= 0) return 0;
  const double n = std::max(1, replicas);
  const auto by_share = static_cast<int64_t>(std::floor(cfg.share * static_cast<double>(remaining) / n));
  const auto cap = static_cast<int64_t>(std::floor(cfg.max_slice * static_cast<double>(burst)));
  return std::max<int64_t>(0, std::min(by_share, cap));
}

int64_t lease_keep(int64_t burst, int64_t remaining, int replicas, Duration since_used, const LeaseConfig& cfg) {
  if (since_used >= cfg.idle_return) return 0;
  return lease_slice(burst, remaining, replicas, cfg);
}

int64_t lease_idle_bound(int64_t burst, int64_t remaining, int replicas, const LeaseConfig& cfg) {
  return 2 * static_cast<int64_t>(std::max(1, replicas)) * lease_slice(burst, remaining, replicas, cfg);
}

}  // namespace sluice
