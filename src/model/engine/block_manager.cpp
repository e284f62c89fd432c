#include "model/engine/block_manager.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <array>
#include <cstring>

namespace sluice::engine {

namespace {
constexpr BlockHash kRootHash = 0x5c1e5c1e5c1e5c1eULL;  // parent of the first block
}

uint64_t extra_keys_hash(std::string_view adapter, std::string_view cache_salt) {
  if (adapter.empty() && cache_salt.empty()) return 0;
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, adapter.data(), adapter.size());
  const char sep = '\0';
  XXH3_64bits_update(&st, &sep, 1);
  XXH3_64bits_update(&st, cache_salt.data(), cache_salt.size());
  return XXH3_64bits_digest(&st);
}

BlockHash hash_block(BlockHash parent, std::span<const TokenId> block_tokens, uint64_t extra_keys) {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, &parent, sizeof parent);
  XXH3_64bits_update(&st, &extra_keys, sizeof extra_keys);
  XXH3_64bits_update(&st, block_tokens.data(), block_tokens.size_bytes());
  return XXH3_64bits_digest(&st);
}

void extend_block_hashes(std::span<const TokenId> tokens, uint64_t extra_keys, int block_size,
                         std::vector<BlockHash>& hashes) {
  const size_t bs = static_cast<size_t>(block_size);
  while ((hashes.size() + 1) * bs <= tokens.size()) {
    const BlockHash parent = hashes.empty() ? kRootHash : hashes.back();
    hashes.push_back(hash_block(parent, tokens.subspan(hashes.size() * bs, bs), extra_keys));
  }
}

BlockManager::BlockManager(int64_t num_blocks, int block_size, bool prefix_caching)
    : blocks_(static_cast<size_t>(num_blocks > 0 ? num_blocks : 0)),
      block_size_(block_size > 0 ? block_size : kDefaultBlockSize),
      prefix_caching_(prefix_caching) {
  for (BlockId b = 0; b < static_cast<BlockId>(blocks_.size()); ++b) push_free_tail(b);
}

void BlockManager::push_free_tail(BlockId b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  blk.prev = free_tail_;
  blk.next = -1;
  if (free_tail_ >= 0) blocks_[static_cast<size_t>(free_tail_)].next = b;
  else free_head_ = b;
  free_tail_ = b;
  blk.in_free_queue = true;
  ++num_free_;
}

void BlockManager::unlink_free(BlockId b) {
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.prev >= 0) blocks_[static_cast<size_t>(blk.prev)].next = blk.next;
  else free_head_ = blk.next;
  if (blk.next >= 0) blocks_[static_cast<size_t>(blk.next)].prev = blk.prev;
  else free_tail_ = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free_queue = false;
  --num_free_;
}

BlockId BlockManager::pop_free_head() {
  const BlockId b = free_head_;
  unlink_free(b);
  Block& blk = blocks_[static_cast<size_t>(b)];
  if (blk.has_hash) {  // evict: the block's old content is no longer findable
    auto it = cached_.find(blk.hash);
    if (it != cached_.end() && it->second == b) cached_.erase(it);
    blk.has_hash = false;
    ++evictions_;
    if (events_on_) {
      auto* last = events_.empty() ? nullptr : std::get_if<kv::BlockRemoved>(&events_.back());
      if (!last) {
        events_.emplace_back(kv::BlockRemoved{{}, "GPU"});
        last = std::get_if<kv::BlockRemoved>(&events_.back());
      }
      last->block_hashes.push_back(blk.hash);
    }
  }
  return b;
}

int64_t BlockManager::cached_prefix_blocks(std::span<const BlockHash> hashes, int64_t max_blocks) const {
  if (!prefix_caching_) return 0;
  int64_t n = 0;
  for (BlockHash h : hashes) {
    if (n >= max_blocks || !cached_.count(h)) break;
    ++n;
  }
  return n;
}

bool BlockManager::allocate_slots(std::vector<BlockId>& blocks, std::span<const BlockHash> hashes,
                                  int64_t num_cached, int64_t num_tokens) {
  if (!blocks.empty()) num_cached = 0;
  const int64_t needed = (num_tokens + block_size_ - 1) / block_size_;
  int64_t fresh = needed - static_cast<int64_t>(blocks.size()) - num_cached;
  if (fresh < 0) fresh = 0;
  // Cached blocks nobody references sit in the free queue: taking them uses free capacity too.
  int64_t cached_from_free = 0;
  for (int64_t i = 0; i < num_cached; ++i) {
    auto it = cached_.find(hashes[static_cast<size_t>(i)]);
    if (it == cached_.end()) return false;  // caller's lookup is stale
    if (blocks_[static_cast<size_t>(it->second)].ref == 0) ++cached_from_free;
  }
  if (fresh + cached_from_free > num_free_) return false;
  for (int64_t i = 0; i < num_cached; ++i) {
    const BlockId b = cached_.at(hashes[static_cast<size_t>(i)]);
    Block& blk = blocks_[static_cast<size_t>(b)];
    if (blk.in_free_queue) unlink_free(b);
    ++blk.ref;
    blocks.push_back(b);
  }
  for (int64_t i = 0; i < fresh; ++i) {
    const BlockId b = pop_free_head();
    blocks_[static_cast<size_t>(b)].ref = 1;
    blocks.push_back(b);
  }
  return true;
}

bool BlockManager::cache_block(BlockId block, BlockHash h, const StoredInfo* info) {
  if (!prefix_caching_) return false;
  Block& blk = blocks_[static_cast<size_t>(block)];
  if (blk.has_hash) return false;
  if (!cached_.emplace(h, block).second) return false;  // an identical block is already cached
  blk.has_hash = true;
  blk.hash = h;
  if (events_on_ && info) {
    // Extend the last event when this block continues its chain (same adapter and salt).
    auto* last = events_.empty() ? nullptr : std::get_if<kv::BlockStored>(&events_.back());
    if (!last || !info->parent || last->block_hashes.back() != *info->parent || last->lora_name != info->lora_name ||
        last->cache_salt != info->cache_salt) {
      kv::BlockStored ev;
      ev.parent_block_hash = info->parent;
      ev.block_size = block_size_;
      ev.medium = "GPU";
      ev.lora_name.assign(info->lora_name);
      ev.cache_salt.assign(info->cache_salt);
      events_.emplace_back(std::move(ev));
      last = std::get_if<kv::BlockStored>(&events_.back());
    }
    last->block_hashes.push_back(h);
    last->token_ids.insert(last->token_ids.end(), info->tokens.begin(), info->tokens.end());
  }
  return true;
}

void BlockManager::reset_prefix_cache() {
  for (auto& blk : blocks_) blk.has_hash = false;
  cached_.clear();
  if (events_on_) events_.emplace_back(kv::AllBlocksCleared{});
}

void BlockManager::release(std::vector<BlockId>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) {
    Block& blk = blocks_[static_cast<size_t>(*it)];
    if (--blk.ref == 0) push_free_tail(*it);
  }
  blocks.clear();
}

}  // namespace sluice::engine
