// PrefixIndex: an approximate, per-pool index of which endpoint probably holds which prefix blocks
// in its KV cache, learned from the gateway's own routing decisions (no engine KV events).
//
// Blocks. The rendered request text (chat template applied, all messages in order, or the prompt)
// is cut into blocks of `block_chars` characters = the engine's block_size tokens x ~4 characters
// (16 tokens -> 64 characters). Only full blocks count, as in the engine. Block hashes are chained:
//   h_0 = XXH64(model \0 adapter \0 cache_salt, 0),  h_i = mix((h_{i-1} xor XXH3_64(block_i)) x phi)
// with phi = 0x9E3779B97F4A7C15 and mix(x) = x xor (x >> 32). Each block's own XXH3 hash does not
// depend on the blocks before it, so several are computed at once; only the multiply-and-shift link
// is sequential (the chain used to be XXH3 seeded with h_{i-1}, which made every block wait for the
// one before it). So the same text under another model, adapter or salt never matches, and a block
// matches only if every block before it matched (longest common prefix in whole blocks, like vLLM's
// hash chain).
// A request hashes its whole text up to `max_blocks` (the policies default to 8192 blocks = 512k
// characters, ~128k tokens: every real context fits; the cap only bounds hostile bodies).
//
// Bounds. Per endpoint an LRU of block hashes bounded by that endpoint's KV capacity in blocks
// (cache_config_info; 31,250 when unknown, the llm-d default). Learning touches a request's blocks
// tail first, so the head of a prompt is the most recent and the tail is evicted first, as vLLM frees
// a request's blocks last-block-first. purge() forgets an endpoint (removed or restarted).
//
// Memory layout (goal < 64 bytes per (block, endpoint) entry; measured ~45-50 at capacity):
//   - nodes_: one 24-byte node per (block hash, endpoint) entry, in a flat array with a free list;
//     each node is in its endpoint's intrusive doubly linked LRU list and in the singly linked chain
//     of nodes sharing its hash;
//   - slots_: an open-addressing table (linear probing, backward-shift deletion, load <= 0.75,
//     sized by fast range reduction, not powers of two) of 16-byte slots: a 32-bit fingerprint of the
//     block hash, the head of its node chain, and a 64-bit mask of the endpoints (index < 64) holding
//     it. match() reads only the slots: one probe per block, prefetched, bit operations across all
//     endpoints at once. Pools with more than 64 endpoints walk the node chains instead.
// match() trusts the 32-bit fingerprint at the probed position (a false hit needs equal low 32 bits
// and a nearby home slot: ~1e-9 per probe); learning and eviction compare full hashes.
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/prefix/huge_page_allocator.h"

namespace sluice {

class PrefixIndex {
 public:
  static constexpr int64_t kDefaultCapacityBlocks = 31250;

  explicit PrefixIndex(size_t endpoints = 0, int64_t default_capacity_blocks = kDefaultCapacityBlocks);

  // The chain seed for a request: separates models, adapters and cache salts.
  static uint64_t seed(std::string_view model, std::string_view adapter, std::string_view cache_salt);
  // Fills `out` with the chained hashes of the full blocks of `text` (at most `max_blocks`).
  static void hash_blocks(std::string_view text, size_t block_chars, uint64_t seed, size_t max_blocks,
                          std::vector<uint64_t>& out);

  // Forgets everything and sizes the index for `endpoints` endpoints (default capacities).
  void reset(size_t endpoints);
  size_t endpoints() const { return lrus_.size(); }
  // Grows to `endpoints` endpoints, keeping what is learned (never shrinks).
  void grow(size_t endpoints);
  // Bounds endpoint's LRU (blocks <= 0: the default); shrinking evicts least recent blocks.
  void set_capacity(size_t endpoint, int64_t blocks);
  int64_t capacity(size_t endpoint) const { return lrus_[endpoint].capacity; }

  // matched[e] = number of leading blocks of `blocks` endpoint e holds (matched.size() must be
  // endpoints()). Const: does not refresh recency.
  void match(std::span<const uint64_t> blocks, std::span<uint32_t> matched) const;
  // The same for a text, hashing it at most 8 blocks ahead of its probes and stopping as soon as no
  // endpoint matches any more (a miss costs a stride of hashes, not the whole prompt); while the
  // index is ancestor_closed() it probes one block per stride of 8 and walks only the strides where
  // an endpoint stops. Returns the chained hash of the deepest block some endpoint holds (it names
  // the longest cached prefix: every block before it is in the chain), 0 when none matched.
  uint64_t match_text(std::string_view text, size_t block_chars, uint64_t seed, size_t max_blocks,
                      std::span<uint32_t> matched) const;
  // Endpoint `e` was sent a request with these blocks: it will hold them (most recent first).
  void learn(size_t endpoint, std::span<const uint64_t> blocks);
  void purge(size_t endpoint);
  // Endpoint `e` no longer holds block `hash` (an engine's BlockRemoved). False if it did not.
  bool forget(size_t endpoint, uint64_t hash);
  // The block hashes endpoint holds, most recent first (learn() takes them back in that order).
  std::vector<uint64_t> blocks_of(size_t endpoint) const;
  // The endpoints holding block `hash` (any index, not only the first 64).
  size_t holder_count(uint64_t hash) const;
  // The `k` least recent block hashes of endpoint (the next evicted first), appended to `out`.
  void least_recent(size_t endpoint, size_t k, std::vector<uint64_t>& out) const;

  // True while every endpoint's blocks of any chain are a leading run of it (holding block j means
  // holding blocks 0..j-1). learn() keeps it: it touches a chain tail first, so a block is never
  // less recent than its descendants and the LRU evicts descendants first; so do set_capacity()
  // and purge(). forget() (an engine's removal of one block) may break it, until reset().
  bool ancestor_closed() const { return ancestor_closed_; }

  size_t entries() const { return entries_; }
  size_t entries(size_t endpoint) const { return static_cast<size_t>(lrus_[endpoint].size); }
  size_t distinct_blocks() const { return distinct_; }
  // Bytes allocated by the index (nodes, table, per-endpoint lists).
  size_t memory_bytes() const;

 private:
  static constexpr uint32_t kNil = 0xffffffffu;
  struct Node {
    uint64_t hash;
    uint32_t prev, next;  // endpoint LRU list (prev = more recent); next also links the free list
    uint32_t chain;       // next node with the same hash
    uint32_t endpoint;
  };
  struct Slot {
    uint32_t fp = 0;
    uint32_t head = kNil;  // kNil = empty slot
    uint64_t mask = 0;
  };
  struct Lru {
    uint32_t head = kNil, tail = kNil;  // head = most recent
    int64_t size = 0;
    int64_t capacity = 0;
  };

  size_t home(uint64_t h) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(h) * slots_.size()) >> 64);
  }
  size_t find_slot(uint64_t h) const;  // index of the slot holding h, or slots_.size()
  // The mask of the endpoints (index < 64) holding block h, by its slot's fingerprint (0: none).
  uint64_t holders(uint64_t h) const;
  size_t insert_slot(uint64_t h);      // find or create
  void erase_slot(size_t i);
  void grow_table(size_t min_distinct);
  uint32_t alloc_node();
  void lru_unlink(Lru& l, uint32_t n);
  void lru_push_front(Lru& l, uint32_t n);
  uint32_t find_node(size_t slot, size_t endpoint) const;
  void remove_node(uint32_t n);  // from its LRU, chain, mask and slot
  int64_t total_capacity() const;

  int64_t default_capacity_;
  std::vector<Node, HugePageAllocator<Node>> nodes_;
  uint32_t free_ = kNil;
  std::vector<Slot, HugePageAllocator<Slot>> slots_;
  std::vector<Lru> lrus_;
  size_t entries_ = 0;
  size_t distinct_ = 0;
  bool ancestor_closed_ = true;
};

}  // namespace sluice
