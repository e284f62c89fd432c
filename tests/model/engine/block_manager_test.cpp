#include "model/engine/block_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace sluice::engine {
namespace {

std::vector<TokenId> seq_tokens(size_t n, TokenId start = 0) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

std::vector<BlockHash> hashes_of(const std::vector<TokenId>& t, uint64_t extra = 0) {
  std::vector<BlockHash> h;
  extend_block_hashes(t, extra, 16, h);
  return h;
}

TEST(EngineBlockHash, ChainedOnlyFullBlocksWithExtraKeys) {
  auto t = seq_tokens(40);
  auto h = hashes_of(t);
  EXPECT_EQ(h.size(), 2u);  // 40 tokens -> 2 full blocks
  EXPECT_EQ(h, hashes_of(t));
  auto t2 = t;
  t2[3] = 999;  // change the first block: every later hash changes too
  auto h2 = hashes_of(t2);
  EXPECT_NE(h2[0], h[0]);
  EXPECT_NE(h2[1], h[1]);
  auto t3 = t;
  t3[20] = 999;  // change only the second block
  EXPECT_EQ(hashes_of(t3)[0], h[0]);
  EXPECT_NE(hashes_of(t3)[1], h[1]);
  // Adapter and salt are extra keys.
  EXPECT_EQ(extra_keys_hash("", ""), 0u);
  EXPECT_NE(extra_keys_hash("a", ""), extra_keys_hash("", "a"));
  EXPECT_NE(hashes_of(t, extra_keys_hash("lora1", ""))[0], h[0]);
  // Incremental extension equals hashing at once.
  std::vector<BlockHash> inc;
  std::vector<TokenId> grow;
  for (auto x : t) {
    grow.push_back(x);
    extend_block_hashes(grow, 0, 16, inc);
  }
  EXPECT_EQ(inc, h);
}

TEST(EngineBlockManager, CachedPrefixHitSharesBlocks) {
  BlockManager bm(10);
  auto h = hashes_of(seq_tokens(48));
  std::vector<BlockId> a;
  ASSERT_TRUE(bm.allocate_slots(a, h, 0, 48));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_EQ(bm.num_free(), 7);
  EXPECT_EQ(bm.cached_prefix_blocks(h, 10), 0);  // not computed yet
  for (size_t i = 0; i < 3; ++i) bm.cache_block(a[i], h[i]);
  EXPECT_EQ(bm.cached_prefix_blocks(h, 10), 3);
  EXPECT_EQ(bm.cached_prefix_blocks(h, 2), 2);
  std::vector<BlockId> b;
  ASSERT_TRUE(bm.allocate_slots(b, h, 2, 40));  // two cached + one fresh
  EXPECT_EQ(b[0], a[0]);
  EXPECT_EQ(b[1], a[1]);
  EXPECT_NE(b[2], a[2]);
  EXPECT_EQ(bm.ref_count(a[0]), 2);
  EXPECT_EQ(bm.num_free(), 6);
  bm.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(bm.ref_count(b[0]), 1);
  EXPECT_EQ(bm.num_free(), 7);
  bm.release(b);
  EXPECT_EQ(bm.num_free(), 10);
  EXPECT_EQ(bm.cached_prefix_blocks(h, 10), 3);  // freed blocks keep their hashes
}

TEST(EngineBlockManager, AllOrNothingAllocation) {
  BlockManager bm(4);
  std::vector<BlockId> a;
  EXPECT_FALSE(bm.allocate_slots(a, {}, 0, 16 * 5));
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(bm.num_free(), 4);
  ASSERT_TRUE(bm.allocate_slots(a, {}, 0, 17));
  EXPECT_EQ(a.size(), 2u);
  ASSERT_TRUE(bm.allocate_slots(a, {}, 0, 32));  // still fits in two blocks
  EXPECT_EQ(a.size(), 2u);
  ASSERT_TRUE(bm.allocate_slots(a, {}, 0, 33));
  EXPECT_EQ(a.size(), 3u);
  EXPECT_DOUBLE_EQ(bm.usage(), 0.75);
}

TEST(EngineBlockManager, LruEvictionTailOfPromptFirst) {
  BlockManager bm(4);
  auto h = hashes_of(seq_tokens(48));
  std::vector<BlockId> a;
  ASSERT_TRUE(bm.allocate_slots(a, h, 0, 48));
  for (size_t i = 0; i < 3; ++i) bm.cache_block(a[i], h[i]);
  bm.release(a);  // freed last-block-first
  // Two fresh blocks: the free untouched block goes first, then the prompt's LAST block.
  std::vector<BlockId> b;
  ASSERT_TRUE(bm.allocate_slots(b, {}, 0, 32));
  EXPECT_EQ(bm.evictions(), 1);
  EXPECT_EQ(bm.cached_prefix_blocks(h, 10), 2);  // head of the prompt survives
  EXPECT_FALSE(bm.is_cached(h[2]));
  // Taking a cached free block counts against free capacity.
  std::vector<BlockId> c;
  EXPECT_FALSE(bm.allocate_slots(c, h, 2, 48));  // 2 cached (both free) + 1 fresh > 2 free
  EXPECT_TRUE(bm.allocate_slots(c, h, 2, 32));
  EXPECT_EQ(bm.num_free(), 0);
}

TEST(EngineBlockManager, PrefixCachingOff) {
  BlockManager bm(4, 16, false);
  auto h = hashes_of(seq_tokens(32));
  std::vector<BlockId> a;
  ASSERT_TRUE(bm.allocate_slots(a, h, 0, 32));
  bm.cache_block(a[0], h[0]);
  EXPECT_EQ(bm.cached_prefix_blocks(h, 10), 0);
  EXPECT_EQ(bm.num_cached(), 0);
}

TEST(EngineBlockManager, DuplicateContentStaysUncached) {
  BlockManager bm(4);
  auto h = hashes_of(seq_tokens(16));
  std::vector<BlockId> a, b;
  ASSERT_TRUE(bm.allocate_slots(a, h, 0, 16));
  ASSERT_TRUE(bm.allocate_slots(b, h, 0, 16));
  bm.cache_block(a[0], h[0]);
  bm.cache_block(b[0], h[0]);
  EXPECT_EQ(bm.num_cached(), 1);
  bm.release(b);
  std::vector<BlockId> c;
  ASSERT_TRUE(bm.allocate_slots(c, {}, 0, 16));  // takes b's block: no eviction, a still cached
  EXPECT_EQ(bm.evictions(), 0);
  EXPECT_TRUE(bm.is_cached(h[0]));
}

}  // namespace
}  // namespace sluice::engine
