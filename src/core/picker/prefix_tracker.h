// PrefixTracker: a policy's view of the pool's prefix index (core/prefix/prefix_index.h).
// It keeps the index in step with the endpoints' scraped configuration (block size from
// cache_config_info: a change of block size invalidates every hash, so the index is cleared; KV
// capacity in blocks bounds each endpoint's LRU), hashes a request once per pick, and converts
// matched blocks into predicted cached tokens (blocks x block_size, at most the input tokens).
// Block size before any scrape: 16 tokens = 64 characters.
// With engine KV events attached (attach_events, core/prefix/kv_event_index.h), match() takes each
// endpoint whose events are fresh from the event index (plus the recent dispatches) and keeps the
// learned index only for the others; sources() says which one each prediction came from. The
// driver tells the tracker the time of the pick (at()) before ranking and dispatching.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/prefix/kv_event_index.h"

#include "core/picker/policy.h"
#include "core/prefix/prefix_index.h"

namespace sluice {

struct PrefixTrackerOptions {
  size_t max_blocks = 8192;         // per request: 512k characters at 64 per block
  int64_t default_capacity_blocks = PrefixIndex::kDefaultCapacityBlocks;
  bool capacity_from_engine = true;  // false: every endpoint keeps default_capacity_blocks
};

class PrefixTracker {
 public:
  explicit PrefixTracker(PrefixTrackerOptions opts = {});

  void reset(size_t endpoints);
  // Adopts block size and capacities from the endpoints' signals.
  void sync(std::span<const EndpointView> endpoints);
  // Hashes `req` and returns matched blocks per endpoint index (valid until the next call).
  std::span<const uint32_t> match(const PickRequest& req);
  void learn(const PickRequest& req, size_t endpoint);
  void purge(size_t endpoint) { index_.purge(endpoint); }
  // Takes over what `old` learned (a reload that changed the pool): new endpoint e gets old
  // endpoint old_of_new[e]'s blocks (-1: none), with its capacity and the block size.
  void adopt(const PrefixTracker& old, std::span<const int> old_of_new);

  // Inline: called for every endpoint of every decision.
  int64_t cached_tokens(uint32_t matched_blocks, int64_t input_tokens) const {
    return std::min<int64_t>(static_cast<int64_t>(matched_blocks) * block_tokens_, std::max<int64_t>(0, input_tokens));
  }
  int block_tokens() const { return block_tokens_; }
  size_t block_chars() const { return static_cast<size_t>(block_tokens_) * 4; }
  size_t request_blocks() const { return request_blocks_; }  // of the last match()
  // The learned index's hash of the deepest block some endpoint held in the last match() (names the
  // longest cached prefix; 0: none). Engine-event matches do not change it.
  uint64_t deepest_hash() const { return deepest_; }
  // The chained hashes of the whole blocks of the request last learned.
  std::span<const uint64_t> learned_blocks() const { return blocks_; }
  const PrefixIndex& index() const { return index_; }

  void attach_events(std::shared_ptr<KvEventIndex> events) { events_ = std::move(events); }
  const std::shared_ptr<KvEventIndex>& events() const { return events_; }
  void at(Time now) { now_ = now; }
  // Per endpoint, the source of the last match() (all `learned` without events).
  std::span<const KvEventIndex::Source> sources() const { return sources_; }

 private:
  void hash(const PickRequest& req);

  PrefixTrackerOptions opts_;
  PrefixIndex index_;
  int block_tokens_ = 16;
  std::vector<uint64_t> blocks_;
  std::vector<uint32_t> matched_;
  size_t request_blocks_ = 0;
  uint64_t deepest_ = 0;
  std::shared_ptr<KvEventIndex> events_;
  Time now_{};
  std::vector<KvEventIndex::Source> sources_;
};

}  // namespace sluice
