// HotPrefixProbe: how many replicas hold one prefix (the workload's group "hot", or its most popular
// Zipf prefix "p0") over time, for the fleet simulator's report. The prefix is the longest common
// leading run of full KV blocks of the first two requests of that group. Every second of virtual
// time it records: the replicas whose KV cache holds at least 90% of those blocks (engine truth),
// and the replicas the group's requests were dispatched to during that second.
#pragma once
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/engine/block_manager.h"
#include "model/engine/tokenizer.h"
#include "core/time.h"

namespace sluice::fleetsim {

struct HotPrefixSample {
  double t_s = 0;
  int holders = 0;    // replicas caching the prefix
  int receivers = 0;  // replicas sent the group's requests in the last second
  int requests = 0;   // the group's requests in the last second
};

class HotPrefixProbe {
 public:
  // A request of `group` with engine tokens `prompt` went to `replica`.
  void on_dispatch(std::string_view group, std::span<const engine::TokenId> prompt, int block_size, size_t replica);
  // Records a sample when a second has passed since the last one (call at every scrape).
  void on_scrape(Time now, std::span<const engine::BlockManager* const> replicas);

  bool active() const { return !hashes_.empty(); }
  const std::vector<HotPrefixSample>& samples() const { return samples_; }
  std::string_view group() const { return group_; }
  int64_t prefix_blocks() const { return static_cast<int64_t>(hashes_.size()); }

 private:
  std::string group_;
  int seen_ = 0;
  std::vector<engine::BlockHash> hashes_, scratch_;
  std::set<size_t> receivers_;
  int requests_ = 0;
  Time next_sample_{};
  std::vector<HotPrefixSample> samples_;
};

}  // namespace sluice::fleetsim
