#include "fleetsim/hot_prefix_probe.h"

#include <algorithm>

namespace sluice::fleetsim {

void HotPrefixProbe::on_dispatch(std::string_view group, std::span<const engine::TokenId> prompt, int block_size,
                                 size_t replica) {
  if (group_.empty() && (group == "hot" || group == "p0")) group_ = std::string(group);
  if (group_.empty() || group != group_) return;
  ++requests_;
  receivers_.insert(replica);
  if (seen_ >= 2) return;
  scratch_.clear();
  engine::extend_block_hashes(prompt, 0, block_size, scratch_);
  if (seen_++ == 0) {
    hashes_ = scratch_;
    return;
  }
  size_t n = 0;
  while (n < hashes_.size() && n < scratch_.size() && hashes_[n] == scratch_[n]) ++n;
  hashes_.resize(n);
}

void HotPrefixProbe::on_scrape(Time now, std::span<const engine::BlockManager* const> replicas) {
  if (now < next_sample_) return;
  next_sample_ = now + std::chrono::seconds(1);
  if (hashes_.empty() && samples_.empty()) return;
  HotPrefixSample s;
  s.t_s = to_seconds(now);
  const auto need = static_cast<int64_t>(hashes_.size() * 9 / 10);
  for (const auto* bm : replicas)
    if (!hashes_.empty() && bm->cached_prefix_blocks(hashes_, static_cast<int64_t>(hashes_.size())) >= std::max<int64_t>(1, need))
      ++s.holders;
  s.receivers = static_cast<int>(receivers_.size());
  s.requests = requests_;
  receivers_.clear();
  requests_ = 0;
  samples_.push_back(s);
}

}  // namespace sluice::fleetsim

#include "fleetsim/fleet_sim.h"

namespace sluice::fleetsim {

// Means over the samples taken while the group was being sent (requests > 0).
double FleetResult::hot_holders_mean() const {
  double sum = 0;
  int n = 0;
  for (const auto& s : hot_samples)
    if (s.requests > 0) sum += s.holders, ++n;
  return n ? sum / n : 0.0;
}

int FleetResult::hot_holders_max() const {
  int m = 0;
  for (const auto& s : hot_samples) m = std::max(m, s.holders);
  return m;
}

double FleetResult::hot_receivers_mean() const {
  double sum = 0;
  int n = 0;
  for (const auto& s : hot_samples)
    if (s.requests > 0) sum += s.receivers, ++n;
  return n ? sum / n : 0.0;
}

}  // namespace sluice::fleetsim
