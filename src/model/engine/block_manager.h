// Paged KV cache with vLLM-style automatic prefix caching.
//
// - Fixed block size (16 tokens); a capacity in blocks.
// - A full block's hash chains its parent's hash, its token ids and the request's extra keys
//   (LoRA adapter name and cache_salt, folded into one 64-bit key), so a block matches only when
//   every block before it matches and the same text under two adapters never shares cache.
// - Only full blocks are cached, from the moment the step that computes them is scheduled (the
//   engine calls cache_block then, as vLLM v1 does; engine.h). Freed blocks keep their hash and go
//   to the tail of the free queue; new blocks are taken from its head, evicting the least recently
//   freed cached block.
// - A request's blocks are freed last-block-first, so the tail of a prompt is evicted before its head.
// - Blocks are reference-counted: requests sharing a cached prefix share its blocks.
// - KV-cache events (enable_events): every block newly cached (BlockStored, consecutive blocks of
//   one chain merged into one event, as vLLM does per request and step), every cached block evicted
//   (BlockRemoved) and reset_prefix_cache (AllBlocksCleared) are logged in order, in vLLM's types
//   (core/prefix/kv_events.h), for a publisher to take (take_events). Off: nothing is logged.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/prefix/kv_events.h"
#include "model/engine/tokenizer.h"

namespace sluice::engine {

using BlockId = int32_t;
using BlockHash = uint64_t;
inline constexpr int kDefaultBlockSize = 16;

// 0 when both are empty (base model, no salt).
uint64_t extra_keys_hash(std::string_view adapter, std::string_view cache_salt);
BlockHash hash_block(BlockHash parent, std::span<const TokenId> block_tokens, uint64_t extra_keys);
// Appends to `hashes` the hashes of the full blocks of `tokens` not hashed yet.
void extend_block_hashes(std::span<const TokenId> tokens, uint64_t extra_keys, int block_size,
                         std::vector<BlockHash>& hashes);

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int block_size = kDefaultBlockSize, bool prefix_caching = true);

  // Number of leading blocks of `hashes` present in the cache, at most `max_blocks`.
  int64_t cached_prefix_blocks(std::span<const BlockHash> hashes, int64_t max_blocks) const;

  // Makes `blocks` cover `num_tokens` tokens. When `blocks` is empty and `num_cached` > 0, the first
  // `num_cached` blocks come from the cache (hashes[0..num_cached), as found by
  // cached_prefix_blocks just before). All or nothing: false and no change when too few blocks are free.
  bool allocate_slots(std::vector<BlockId>& blocks, std::span<const BlockHash> hashes, int64_t num_cached,
                      int64_t num_tokens);

  // What a BlockStored event says of a newly cached block (events only).
  struct StoredInfo {
    std::optional<BlockHash> parent;   // nil for a chain's first block
    std::span<const TokenId> tokens;   // the block's token ids
    std::string_view lora_name, cache_salt;
  };
  // Records that `block` now holds the computed full block with hash `h` (no-op if caching is off
  // or another block already holds `h`). True when it was newly cached.
  bool cache_block(BlockId block, BlockHash h, const StoredInfo* info = nullptr);

  // Forgets every cached hash (vLLM's reset_prefix_cache); logs AllBlocksCleared.
  void reset_prefix_cache();
  void enable_events(bool on) { events_on_ = on; }
  bool events_enabled() const { return events_on_; }
  // The events logged since the last call, in order.
  std::vector<kv::Event> take_events() { return std::exchange(events_, {}); }

  // Drops the request's references, last block first, and clears `blocks`.
  void release(std::vector<BlockId>& blocks);

  int block_size() const { return block_size_; }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free() const { return num_free_; }
  double usage() const { return num_blocks() ? 1.0 - double(num_free_) / double(num_blocks()) : 0.0; }
  bool prefix_caching() const { return prefix_caching_; }
  int64_t num_cached() const { return static_cast<int64_t>(cached_.size()); }
  int64_t evictions() const { return evictions_; }
  int ref_count(BlockId b) const { return blocks_[static_cast<size_t>(b)].ref; }
  bool is_cached(BlockHash h) const { return cached_.count(h) != 0; }

 private:
  struct Block {
    int ref = 0;
    bool has_hash = false;
    BlockHash hash = 0;
    BlockId prev = -1, next = -1;  // free-queue links
    bool in_free_queue = false;
  };
  void push_free_tail(BlockId b);
  void unlink_free(BlockId b);
  BlockId pop_free_head();

  std::vector<Block> blocks_;
  std::unordered_map<BlockHash, BlockId> cached_;
  BlockId free_head_ = -1, free_tail_ = -1;
  int64_t num_free_ = 0;
  int block_size_;
  bool prefix_caching_;
  int64_t evictions_ = 0;
  bool events_on_ = false;
  std::vector<kv::Event> events_;
};

}  // namespace sluice::engine
