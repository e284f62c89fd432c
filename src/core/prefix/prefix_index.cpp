#include "core/prefix/prefix_index.h"

// xxHash's header-only mode: the per-block hash is inlined into match_text's loop instead of a call
// through the shared library's PLT for every 64-byte block.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/cpu_clones.h"

namespace sluice {

PrefixIndex::PrefixIndex(size_t endpoints, int64_t default_capacity_blocks)
    : default_capacity_(std::max<int64_t>(1, default_capacity_blocks)) {
  reset(endpoints);
}

uint64_t PrefixIndex::seed(std::string_view model, std::string_view adapter, std::string_view cache_salt) {
  XXH64_state_t st;
  XXH64_reset(&st, 0);
  const char zero = 0;
  XXH64_update(&st, model.data(), model.size());
  XXH64_update(&st, &zero, 1);
  XXH64_update(&st, adapter.data(), adapter.size());
  XXH64_update(&st, &zero, 1);
  XXH64_update(&st, cache_salt.data(), cache_salt.size());
  return XXH64_digest(&st);
}

namespace {

// One link of the block chain (see the header): the block's own hash, which does not depend on the
// blocks before it, so the CPU computes several at once, folded into the previous block's chained
// hash by a multiply (odd constant: a bijection) and a shift (the product's high bits into the low
// ones, which the slot's fingerprint uses). Only the link is sequential. With the block's text
// hashed under the previous hash as its seed instead, every block waited for the one before it
// (~10 ns each, the chain latency-bound).
[[gnu::always_inline]] inline uint64_t chain_block(uint64_t prev, const char* block, size_t n) {
  const uint64_t x = (prev ^ XXH3_64bits(block, n)) * 0x9E3779B97F4A7C15ull;
  return x ^ (x >> 32);
}

}  // namespace

void PrefixIndex::hash_blocks(std::string_view text, size_t block_chars, uint64_t seed, size_t max_blocks,
                              std::vector<uint64_t>& out) {
  out.clear();
  if (block_chars == 0) return;
  size_t n = std::min(text.size() / block_chars, max_blocks);
  out.reserve(n);
  uint64_t h = seed;
  for (size_t i = 0; i < n; ++i) {
    h = chain_block(h, text.data() + i * block_chars, block_chars);
    out.push_back(h);
  }
}

void PrefixIndex::reset(size_t endpoints) {
  nodes_.clear();
  nodes_.shrink_to_fit();
  free_ = kNil;
  slots_.assign(16, Slot{});
  lrus_.assign(endpoints, Lru{kNil, kNil, 0, default_capacity_});
  entries_ = distinct_ = 0;
  ancestor_closed_ = true;
}

void PrefixIndex::grow(size_t endpoints) {
  if (endpoints > lrus_.size()) lrus_.resize(endpoints, Lru{kNil, kNil, 0, default_capacity_});
}

int64_t PrefixIndex::total_capacity() const {
  int64_t t = 0;
  for (const auto& l : lrus_) t += l.capacity;
  return t;
}

void PrefixIndex::set_capacity(size_t endpoint, int64_t blocks) {
  auto& l = lrus_[endpoint];
  l.capacity = blocks > 0 ? blocks : default_capacity_;
  while (l.size > l.capacity) remove_node(l.tail);
}

size_t PrefixIndex::memory_bytes() const {
  return nodes_.capacity() * sizeof(Node) + slots_.capacity() * sizeof(Slot) + lrus_.capacity() * sizeof(Lru);
}

// ---- table -------------------------------------------------------------------------------

size_t PrefixIndex::find_slot(uint64_t h) const {
  const size_t n = slots_.size();
  const uint32_t fp = static_cast<uint32_t>(h);
  for (size_t i = home(h);; i = (i + 1 == n ? 0 : i + 1)) {
    const Slot& s = slots_[i];
    if (s.head == kNil) return n;
    if (s.fp == fp && nodes_[s.head].hash == h) return i;
  }
}

size_t PrefixIndex::holder_count(uint64_t hash) const {
  const size_t i = find_slot(hash);
  if (i == slots_.size()) return 0;
  size_t n = 0;  // a slot's chain holds only the nodes of its hash (one per endpoint)
  for (uint32_t node = slots_[i].head; node != kNil; node = nodes_[node].chain) ++n;
  return n;
}

size_t PrefixIndex::insert_slot(uint64_t h) {
  if (size_t i = find_slot(h); i != slots_.size()) return i;
  if (static_cast<double>(distinct_ + 1) > 0.75 * static_cast<double>(slots_.size())) grow_table(distinct_ + 1);
  const size_t n = slots_.size();
  size_t i = home(h);
  while (slots_[i].head != kNil) i = (i + 1 == n ? 0 : i + 1);
  slots_[i].fp = static_cast<uint32_t>(h);
  slots_[i].mask = 0;
  // head is set by the caller (a slot with head kNil is empty).
  ++distinct_;
  return i;
}

void PrefixIndex::erase_slot(size_t i) {
  const size_t n = slots_.size();
  slots_[i] = Slot{};
  --distinct_;
  size_t j = i;
  for (;;) {
    j = (j + 1 == n ? 0 : j + 1);
    if (slots_[j].head == kNil) return;
    size_t k = home(nodes_[slots_[j].head].hash);
    // Move slots_[j] back to the hole at i unless its home lies cyclically in (i, j].
    bool stays = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
    if (stays) continue;
    slots_[i] = slots_[j];
    slots_[j] = Slot{};
    i = j;
  }
}

void PrefixIndex::grow_table(size_t min_distinct) {
  // Never larger than the whole pool's capacity needs at a 0.72 load; at least double otherwise.
  const double bound = static_cast<double>(std::max<int64_t>(total_capacity(), 1)) / 0.72 + 16;
  size_t target = std::max<size_t>(16, std::min<size_t>(slots_.size() * 2, static_cast<size_t>(bound)));
  target = std::max(target, static_cast<size_t>(static_cast<double>(min_distinct) / 0.75) + 2);
  auto old = std::move(slots_);
  slots_.assign(target, Slot{});
  slots_.shrink_to_fit();
  for (const Slot& s : old) {
    if (s.head == kNil) continue;
    size_t i = home(nodes_[s.head].hash);
    while (slots_[i].head != kNil) i = (i + 1 == target ? 0 : i + 1);
    slots_[i] = s;
  }
}

// ---- nodes and lists ---------------------------------------------------------------------

uint32_t PrefixIndex::alloc_node() {
  if (free_ != kNil) {
    uint32_t n = free_;
    free_ = nodes_[n].next;
    return n;
  }
  if (nodes_.size() == nodes_.capacity()) {
    size_t want = std::max<size_t>(1024, nodes_.size() * 2);
    want = std::min<size_t>(want, static_cast<size_t>(std::max<int64_t>(total_capacity(), 1)));
    nodes_.reserve(std::max(want, nodes_.size() + 1));
  }
  nodes_.push_back(Node{0, kNil, kNil, kNil, 0});
  return static_cast<uint32_t>(nodes_.size() - 1);
}

void PrefixIndex::lru_unlink(Lru& l, uint32_t n) {
  Node& x = nodes_[n];
  if (x.prev != kNil) nodes_[x.prev].next = x.next;
  else l.head = x.next;
  if (x.next != kNil) nodes_[x.next].prev = x.prev;
  else l.tail = x.prev;
  x.prev = x.next = kNil;
}

void PrefixIndex::lru_push_front(Lru& l, uint32_t n) {
  Node& x = nodes_[n];
  x.prev = kNil;
  x.next = l.head;
  if (l.head != kNil) nodes_[l.head].prev = n;
  l.head = n;
  if (l.tail == kNil) l.tail = n;
}

uint32_t PrefixIndex::find_node(size_t slot, size_t endpoint) const {
  const Slot& s = slots_[slot];
  if (endpoint < 64 && !(s.mask & (uint64_t{1} << endpoint))) return kNil;
  for (uint32_t n = s.head; n != kNil; n = nodes_[n].chain)
    if (nodes_[n].endpoint == endpoint) return n;
  return kNil;
}

void PrefixIndex::remove_node(uint32_t n) {
  Node& x = nodes_[n];
  Lru& l = lrus_[x.endpoint];
  lru_unlink(l, n);
  --l.size;
  --entries_;
  size_t si = find_slot(x.hash);
  Slot& s = slots_[si];
  if (s.head == n) {
    s.head = x.chain;
  } else {
    uint32_t p = s.head;
    while (nodes_[p].chain != n) p = nodes_[p].chain;
    nodes_[p].chain = x.chain;
  }
  if (x.endpoint < 64) s.mask &= ~(uint64_t{1} << x.endpoint);
  if (s.head == kNil) {
    s.head = kNil;
    erase_slot(si);
  }
  x.chain = kNil;
  x.next = free_;
  free_ = n;
}

// ---- learning and matching ---------------------------------------------------------------

bool PrefixIndex::forget(size_t endpoint, uint64_t hash) {
  if (endpoint >= lrus_.size()) return false;
  const size_t si = find_slot(hash);
  if (si == slots_.size()) return false;
  const uint32_t node = find_node(si, endpoint);
  if (node == kNil) return false;
  remove_node(node);
  ancestor_closed_ = false;  // a block may now be missing under a descendant the endpoint still holds
  return true;
}

void PrefixIndex::learn(size_t endpoint, std::span<const uint64_t> blocks) {
  if (endpoint >= lrus_.size()) return;
  const size_t n = std::min<size_t>(blocks.size(), static_cast<size_t>(lrus_[endpoint].capacity));
  // Tail first, so the head of the prompt ends up most recent and is evicted last.
  for (size_t k = n; k-- > 0;) {
    const uint64_t h = blocks[k];
    Lru& l = lrus_[endpoint];
    if (size_t si = find_slot(h); si != slots_.size()) {
      if (uint32_t node = find_node(si, endpoint); node != kNil) {
        lru_unlink(l, node);
        lru_push_front(l, node);
        continue;
      }
    }
    if (l.size >= l.capacity) remove_node(l.tail);
    uint32_t node = alloc_node();  // may reallocate nodes_: take references after
    size_t si = insert_slot(h);
    Slot& s = slots_[si];
    Node& x = nodes_[node];
    x.hash = h;
    x.endpoint = static_cast<uint32_t>(endpoint);
    x.chain = s.head;
    s.head = node;
    if (endpoint < 64) s.mask |= uint64_t{1} << endpoint;
    lru_push_front(lrus_[endpoint], node);
    ++lrus_[endpoint].size;
    ++entries_;
  }
}

void PrefixIndex::least_recent(size_t endpoint, size_t k, std::vector<uint64_t>& out) const {
  if (endpoint >= lrus_.size()) return;
  for (uint32_t n = lrus_[endpoint].tail; n != kNil && k > 0; n = nodes_[n].prev, --k) out.push_back(nodes_[n].hash);
}

std::vector<uint64_t> PrefixIndex::blocks_of(size_t endpoint) const {
  std::vector<uint64_t> out;
  if (endpoint >= lrus_.size()) return out;
  out.reserve(static_cast<size_t>(lrus_[endpoint].size));
  for (uint32_t n = lrus_[endpoint].head; n != kNil; n = nodes_[n].next) out.push_back(nodes_[n].hash);
  return out;
}

uint64_t PrefixIndex::holders(uint64_t h) const {
  const uint32_t fp = static_cast<uint32_t>(h);
  const size_t n = slots_.size();
  for (size_t j = home(h);; j = (j + 1 == n ? 0 : j + 1)) {
    const Slot& s = slots_[j];
    if (s.head == kNil) return 0;
    if (s.fp == fp) return s.mask;
  }
}

namespace {
// The endpoints still matching (`running`) that do not hold block `depth` (not in `mask`) matched
// `depth` leading blocks.
inline void narrow(uint64_t& running, uint64_t mask, size_t depth, std::span<uint32_t> matched) {
  for (uint64_t dropped = running & ~mask; dropped; dropped &= dropped - 1)
    matched[static_cast<size_t>(__builtin_ctzll(dropped))] = static_cast<uint32_t>(depth);
  running &= mask;
}
}  // namespace

void PrefixIndex::match(std::span<const uint64_t> blocks, std::span<uint32_t> matched) const {
  std::fill(matched.begin(), matched.end(), 0u);
  const size_t ne = std::min(matched.size(), lrus_.size());
  if (ne == 0 || blocks.empty() || entries_ == 0) return;
  const size_t n = slots_.size();
  for (uint64_t h : blocks) __builtin_prefetch(&slots_[home(h)]);
  if (ne <= 64) {
    uint64_t running = ne == 64 ? ~uint64_t{0} : (uint64_t{1} << ne) - 1;
    size_t i = 0;
    for (; i < blocks.size() && running; ++i) narrow(running, holders(blocks[i]), i, matched);
    for (; running; running &= running - 1) matched[static_cast<size_t>(__builtin_ctzll(running))] = static_cast<uint32_t>(i);
    return;
  }
  // More than 64 endpoints: walk the chains; matched[e] == i means e matched every block so far.
  for (size_t i = 0; i < blocks.size(); ++i) {
    size_t si = find_slot(blocks[i]);
    if (si == n) return;
    bool any = false;
    for (uint32_t x = slots_[si].head; x != kNil; x = nodes_[x].chain) {
      uint32_t e = nodes_[x].endpoint;
      if (e < ne && matched[e] == i) {
        matched[e] = static_cast<uint32_t>(i + 1);
        any = true;
      }
    }
    if (!any) return;
  }
}

SLUICE_CPU_CLONES [[gnu::flatten]] uint64_t PrefixIndex::match_text(std::string_view text, size_t block_chars, uint64_t seed, size_t max_blocks,
                                 std::span<uint32_t> matched) const {
  const size_t ne = std::min(matched.size(), lrus_.size());
  if (ne > 64 || block_chars == 0) {
    std::vector<uint64_t> blocks;
    hash_blocks(text, block_chars, seed, max_blocks, blocks);
    match(blocks, matched);
    uint32_t deepest = 0;
    for (const uint32_t m : matched) deepest = std::max(deepest, m);
    return deepest > 0 && deepest <= blocks.size() ? blocks[deepest - 1] : 0;
  }
  std::fill(matched.begin(), matched.end(), 0u);
  if (ne == 0 || entries_ == 0) return 0;
  uint64_t deepest = 0;
  const size_t total = std::min(text.size() / block_chars, max_blocks);
  uint64_t running = ne == 64 ? ~uint64_t{0} : (uint64_t{1} << ne) - 1;
  // The hashes run kAhead blocks ahead of the probes, each slot prefetched when its hash is known,
  // so every probe's cache line has had kAhead hashes (and the probes between) to arrive. The
  // blocks hashed past the deepest match are wasted work, so the lead is short: with 8 (a window
  // sliding one block at a time, rather than chunks of 32 hashed then probed) a 64-endpoint
  // decision on a 16k-character prompt took ~0.4 us less, hit or miss (sluice_microbench, the 92 MB
  // index). With chain_block's cheaper link, 16 ahead was slower again (bench/results, round 15).
  //
  // Strides. While the index is ancestor-closed (every endpoint's blocks of a chain are a leading
  // run of it: see ancestor_closed()), an endpoint that holds block j holds every block before it.
  // So only the last block of each stride of 8 blocks is probed: when every endpoint still
  // matching holds it, they all hold the whole stride; when some do not, the stride is walked
  // block by block (its slots are already prefetched) to find where each one stopped. A 16k-
  // character prompt whose first half is cached probes ~25 slots instead of ~130. The result is the
  // block-by-block walk's; without closure (an index that forgot single blocks) every block is
  // probed.
  constexpr size_t kAhead = 8;
  const size_t stride = ancestor_closed_ ? 8 : 1;
  constexpr size_t kRing = 32;  // a power of two >= kAhead + the stride: [start, end + kAhead) fits
  uint64_t hashes[kRing];
  uint64_t h = seed;
  size_t hashed = 0;
  const auto hash_to = [&](size_t n) {
    for (; hashed < n; ++hashed) {
      // 64 characters (16 tokens, the engines' default block) as a constant: XXH3's length dispatch
      // folds away and the hash is inlined.
      const char* block = text.data() + hashed * block_chars;
      h = block_chars == 64 ? chain_block(h, block, 64) : chain_block(h, block, block_chars);
      hashes[hashed % kRing] = h;
      __builtin_prefetch(&slots_[home(h)]);
    }
  };
  size_t start = 0;  // every endpoint in `running` holds blocks [0, start)
  while (start < total && running) {
    const size_t end = std::min(total, start + stride);  // this stride: blocks [start, end)
    // The first stride's probes wait for memory whatever the lead (a miss, the common case of a
    // cold prompt, stops there); later strides are hashed kAhead blocks ahead of their probes.
    hash_to(start == 0 ? end : std::min(total, end + kAhead));
    if (const uint64_t last = hashes[(end - 1) % kRing]; (running & ~holders(last)) == 0) {
      deepest = last;
      start = end;
      continue;
    }
    for (size_t i = start; i < end; ++i) {
      const uint64_t hi = hashes[i % kRing];
      narrow(running, holders(hi), i, matched);
      if (!running) return deepest;
      deepest = hi;
    }
    start = end;
  }
  for (; running; running &= running - 1) matched[static_cast<size_t>(__builtin_ctzll(running))] = static_cast<uint32_t>(start);
  return deepest;
}

void PrefixIndex::purge(size_t endpoint) {
  if (endpoint >= lrus_.size()) return;
  while (lrus_[endpoint].tail != kNil) remove_node(lrus_[endpoint].tail);
}

}  // namespace sluice
