#include <gtest/gtest.h>

#include "model/engine/block_manager.h"

namespace sluice::engine {
namespace {

TEST(BlockManagerEvents, StoresChainIntoOneEventEvictionsAndResetAreLogged) {
  BlockManager bm(3, 16);
  bm.enable_events(true);
  std::vector<TokenId> toks(48);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<TokenId>(i);
  std::vector<BlockHash> hashes;
  extend_block_hashes(toks, 0, 16, hashes);
  std::vector<BlockId> blocks;
  ASSERT_TRUE(bm.allocate_slots(blocks, hashes, 0, 48));
  for (size_t i = 0; i < 3; ++i) {
    BlockManager::StoredInfo info;
    if (i > 0) info.parent = hashes[i - 1];
    info.tokens = std::span<const TokenId>(toks).subspan(i * 16, 16);
    EXPECT_TRUE(bm.cache_block(blocks[i], hashes[i], &info));
  }
  EXPECT_FALSE(bm.cache_block(blocks[0], hashes[0]));  // already cached: no event
  auto ev = bm.take_events();
  ASSERT_EQ(ev.size(), 1u);  // one chain, one BlockStored
  const auto& st = std::get<kv::BlockStored>(ev[0]);
  EXPECT_EQ(st.block_hashes, hashes);
  EXPECT_FALSE(st.parent_block_hash.has_value());
  EXPECT_EQ(st.token_ids, toks);
  EXPECT_EQ(st.block_size, 16);
  // Freed and reused by another request: the cached blocks are evicted, logged as one removal.
  bm.release(blocks);
  std::vector<BlockId> other;
  ASSERT_TRUE(bm.allocate_slots(other, {}, 0, 32));
  ev = bm.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(std::get<kv::BlockRemoved>(ev[0]).block_hashes.size(), 2u);
  bm.reset_prefix_cache();
  ev = bm.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<kv::AllBlocksCleared>(ev[0]));
  EXPECT_EQ(bm.num_cached(), 0);
  // Off: nothing is logged.
  bm.enable_events(false);
  bm.reset_prefix_cache();
  EXPECT_TRUE(bm.take_events().empty());
}

}  // namespace
}  // namespace sluice::engine
