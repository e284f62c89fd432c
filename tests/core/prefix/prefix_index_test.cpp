#include "core/prefix/prefix_index.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <list>
#include <map>
#include <random>
#include <set>
#include <string>

namespace sluice {
namespace {

std::vector<uint64_t> blocks_of(const std::string& text, std::string_view model = "m", std::string_view adapter = "",
                                std::string_view salt = "", size_t block_chars = 64) {
  std::vector<uint64_t> out;
  PrefixIndex::hash_blocks(text, block_chars, PrefixIndex::seed(model, adapter, salt), 1 << 20, out);
  return out;
}

std::string text_of(char c, size_t n) { return std::string(n, c); }

std::vector<uint32_t> match(const PrefixIndex& idx, const std::vector<uint64_t>& b) {
  std::vector<uint32_t> m(idx.endpoints());
  idx.match(b, m);
  return m;
}

TEST(PrefixIndex, HashingCutsFullBlocksAndChains) {
  auto a = blocks_of(text_of('x', 64 * 3 + 10));
  ASSERT_EQ(a.size(), 3u);  // the partial tail block is not hashed
  // Identical blocks at different positions hash differently (chained).
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  // A different first block changes every later hash even when later text is identical.
  auto b = blocks_of("y" + text_of('x', 64 * 3 - 1));
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(a[i], b[i]);
  std::vector<uint64_t> capped;
  PrefixIndex::hash_blocks(text_of('x', 64 * 10), 64, 1, 4, capped);
  EXPECT_EQ(capped.size(), 4u);
}

TEST(PrefixIndex, LongestCommonPrefixPerEndpoint) {
  PrefixIndex idx(3);
  std::string shared = text_of('s', 64 * 4);
  auto r1 = blocks_of(shared + text_of('a', 64 * 2));
  auto r2 = blocks_of(shared + text_of('b', 64 * 2));
  idx.learn(0, r1);
  idx.learn(1, blocks_of(shared.substr(0, 128)));
  EXPECT_EQ(match(idx, r1), (std::vector<uint32_t>{6, 2, 0}));
  EXPECT_EQ(match(idx, r2), (std::vector<uint32_t>{4, 2, 0}));
  EXPECT_EQ(idx.entries(), 8u);
  EXPECT_EQ(idx.entries(0), 6u);
  EXPECT_EQ(idx.distinct_blocks(), 6u);  // endpoint 1's two blocks are shared with endpoint 0
}

// holder_count counts every endpoint holding a block, also past the first 64 (the match mask's).
TEST(PrefixIndex, HolderCountCountsEveryEndpointHoldingTheBlock) {
  PrefixIndex idx(80);
  const auto b = blocks_of(text_of('h', 64 * 3));
  EXPECT_EQ(idx.holder_count(b[2]), 0u);
  for (size_t e : {0, 5, 63, 64, 79}) idx.learn(e, b);
  idx.learn(7, std::vector<uint64_t>(b.begin(), b.begin() + 2));  // the first two blocks only
  EXPECT_EQ(idx.holder_count(b[2]), 5u);
  EXPECT_EQ(idx.holder_count(b[1]), 6u);
  EXPECT_TRUE(idx.forget(64, b[2]));
  EXPECT_EQ(idx.holder_count(b[2]), 4u);
  EXPECT_EQ(idx.holder_count(12345), 0u);
}

TEST(PrefixIndex, AdapterModelAndSaltSeparate) {
  PrefixIndex idx(1);
  std::string t = text_of('q', 64 * 5);
  idx.learn(0, blocks_of(t, "m", "adapter-a"));
  EXPECT_EQ(match(idx, blocks_of(t, "m", "adapter-a"))[0], 5u);
  EXPECT_EQ(match(idx, blocks_of(t, "m", "adapter-b"))[0], 0u);
  EXPECT_EQ(match(idx, blocks_of(t, "m", ""))[0], 0u);
  EXPECT_EQ(match(idx, blocks_of(t, "other-model", "adapter-a"))[0], 0u);
  EXPECT_EQ(match(idx, blocks_of(t, "m", "adapter-a", "salt"))[0], 0u);
  // Seed fields are delimited: ("ab","") differs from ("a","b").
  EXPECT_NE(PrefixIndex::seed("ab", "", ""), PrefixIndex::seed("a", "b", ""));
}

TEST(PrefixIndex, LruBoundEvictsLeastRecentAndTailFirst) {
  PrefixIndex idx(2);
  idx.set_capacity(0, 8);
  auto a = blocks_of(text_of('a', 64 * 6));
  auto b = blocks_of(text_of('b', 64 * 6));
  idx.learn(0, a);
  idx.learn(0, b);  // needs 4 slots: evicts a's 4 least recent blocks = its tail
  EXPECT_EQ(idx.entries(0), 8u);
  EXPECT_EQ(match(idx, a)[0], 2u);  // a's head survives
  EXPECT_EQ(match(idx, b)[0], 6u);
  idx.learn(0, a);  // a again: now b loses its tail
  EXPECT_EQ(match(idx, a)[0], 6u);
  EXPECT_EQ(match(idx, b)[0], 2u);
  // A request longer than the capacity keeps its head.
  auto c = blocks_of(text_of('c', 64 * 20));
  idx.learn(0, c);
  EXPECT_EQ(idx.entries(0), 8u);
  EXPECT_EQ(match(idx, c)[0], 8u);
  // Shrinking the capacity evicts.
  idx.set_capacity(0, 3);
  EXPECT_EQ(idx.entries(0), 3u);
  EXPECT_EQ(match(idx, c)[0], 3u);
  EXPECT_EQ(idx.capacity(1), PrefixIndex::kDefaultCapacityBlocks);
}

TEST(PrefixIndex, LeastRecentListsTheNextEvictedFirst) {
  PrefixIndex idx(2);
  auto a = blocks_of(text_of('a', 64 * 3));
  auto b = blocks_of(text_of('b', 64 * 2));
  idx.learn(0, a);
  idx.learn(0, b);
  std::vector<uint64_t> out;
  idx.least_recent(0, 4, out);  // a's tail first, head last; then b's tail
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0], a[2]);
  EXPECT_EQ(out[1], a[1]);
  EXPECT_EQ(out[2], a[0]);
  EXPECT_EQ(out[3], b[1]);
  idx.learn(0, a);  // a touched: b is the least recent now
  out.clear();
  idx.least_recent(0, 100, out);
  ASSERT_EQ(out.size(), 5u);  // never more than the endpoint holds
  EXPECT_EQ(out[0], b[1]);
  EXPECT_EQ(out[4], a[0]);
  out.clear();
  idx.least_recent(1, 3, out);  // an endpoint that holds nothing
  EXPECT_TRUE(out.empty());
}

TEST(PrefixIndex, RelearningRefreshesRecency) {
  PrefixIndex idx(1);
  idx.set_capacity(0, 4);
  auto a = blocks_of(text_of('a', 64 * 2)), b = blocks_of(text_of('b', 64 * 2)), c = blocks_of(text_of('c', 64 * 2));
  idx.learn(0, a);
  idx.learn(0, b);
  idx.learn(0, a);  // a is now the most recent
  idx.learn(0, c);  // evicts b
  EXPECT_EQ(match(idx, a)[0], 2u);
  EXPECT_EQ(match(idx, b)[0], 0u);
  EXPECT_EQ(match(idx, c)[0], 2u);
}

TEST(PrefixIndex, PurgeForgetsOneEndpoint) {
  PrefixIndex idx(2);
  auto a = blocks_of(text_of('a', 64 * 5));
  idx.learn(0, a);
  idx.learn(1, a);
  idx.purge(0);
  EXPECT_EQ(match(idx, a), (std::vector<uint32_t>{0, 5}));
  EXPECT_EQ(idx.entries(), 5u);
  idx.purge(1);
  EXPECT_EQ(idx.entries(), 0u);
  EXPECT_EQ(idx.distinct_blocks(), 0u);
}

// Random operations against a naive model (per-endpoint std::list LRU), for both the bitmask
// path (<= 64 endpoints) and the chain-walk path (> 64).
void random_against_model(size_t endpoints) {
  std::mt19937_64 rng(endpoints);
  PrefixIndex idx(endpoints);
  std::vector<int64_t> cap(endpoints);
  for (size_t e = 0; e < endpoints; ++e) {
    cap[e] = 5 + static_cast<int64_t>(rng() % 40);
    idx.set_capacity(e, cap[e]);
  }
  std::vector<std::list<uint64_t>> model(endpoints);
  auto model_learn = [&](size_t e, const std::vector<uint64_t>& b) {
    size_t n = std::min<size_t>(b.size(), static_cast<size_t>(cap[e]));
    for (size_t k = n; k-- > 0;) {
      model[e].remove(b[k]);
      if (static_cast<int64_t>(model[e].size()) >= cap[e]) model[e].pop_back();
      model[e].push_front(b[k]);
    }
  };
  auto model_match = [&](size_t e, const std::vector<uint64_t>& b) {
    std::set<uint64_t> have(model[e].begin(), model[e].end());
    uint32_t m = 0;
    while (m < b.size() && have.count(b[m])) ++m;
    return m;
  };
  for (int step = 0; step < 3000; ++step) {
    // 20 prefix families, each a shared head plus a random-length tail.
    int fam = static_cast<int>(rng() % 20);
    std::string text = std::string(64 * (1 + fam % 7), static_cast<char>('a' + fam));
    text += std::to_string(rng() % 5) + std::string(64 * (rng() % 6), 'z');
    auto b = blocks_of(text);
    size_t e = rng() % endpoints;
    if (rng() % 50 == 0) {
      idx.purge(e);
      model[e].clear();
      continue;
    }
    idx.learn(e, b);
    model_learn(e, b);
    auto m = match(idx, b);
    for (size_t x = 0; x < endpoints; ++x) ASSERT_EQ(m[x], model_match(x, b)) << "step " << step << " endpoint " << x;
    // The chunked text path agrees with hashing first (probe a text that may diverge mid-way).
    std::string probe = std::string(64 * (1 + fam % 7), static_cast<char>('a' + fam)) + std::to_string(rng() % 5) +
                        std::string(64 * 40, 'z');
    auto pb = blocks_of(probe);
    std::vector<uint32_t> mt(endpoints);
    const uint64_t deepest = idx.match_text(probe, 64, PrefixIndex::seed("m", "", ""), 1 << 20, mt);
    ASSERT_EQ(mt, match(idx, pb)) << "step " << step;
    // It names the longest cached prefix: the hash of the deepest block any endpoint holds.
    const uint32_t depth = *std::max_element(mt.begin(), mt.end());
    ASSERT_EQ(deepest, depth > 0 ? pb[depth - 1] : 0u) << "step " << step;
  }
  size_t total = 0;
  for (size_t e = 0; e < endpoints; ++e) {
    EXPECT_EQ(idx.entries(e), model[e].size());
    total += model[e].size();
  }
  EXPECT_EQ(idx.entries(), total);
}

// match_text probes one block per stride while the index is ancestor-closed; an engine's removal
// of one block (forget) can leave a hole under blocks the endpoint still holds, and the match must
// stop at the hole, not at the deepest block.
TEST(PrefixIndex, MatchTextStopsAtABlockForgottenUnderItsDescendants) {
  PrefixIndex idx(2);
  const std::string text = text_of('q', 64 * 20);
  auto b = blocks_of(text);
  idx.learn(0, b);
  idx.learn(1, std::vector<uint64_t>(b.begin(), b.begin() + 11));
  std::vector<uint32_t> mt(2);
  EXPECT_TRUE(idx.ancestor_closed());
  EXPECT_EQ(idx.match_text(text, 64, PrefixIndex::seed("m", "", ""), 1 << 20, mt), b[19]);
  EXPECT_EQ(mt, (std::vector<uint32_t>{20, 11}));
  ASSERT_TRUE(idx.forget(0, b[3]));
  EXPECT_FALSE(idx.ancestor_closed());
  EXPECT_EQ(idx.match_text(text, 64, PrefixIndex::seed("m", "", ""), 1 << 20, mt), b[10]);
  EXPECT_EQ(mt, (std::vector<uint32_t>{3, 11}));
  EXPECT_EQ(mt, match(idx, b));
  idx.reset(2);
  EXPECT_TRUE(idx.ancestor_closed());
}

// The stride walk against the block-by-block match on long prompts that part at every offset within
// a stride, at a block size other than 64 (the hash's generic path) and with a max_blocks cap: the
// endpoints' LRUs are small, so learning evicts, and prompts share heads of random lengths.
TEST(PrefixIndex, StrideMatchEqualsTheBlockWalkOnLongPrompts) {
  std::mt19937_64 rng(11);
  for (const size_t block_chars : {size_t{48}, size_t{64}}) {
    const size_t endpoints = 12;
    PrefixIndex idx(endpoints);
    for (size_t e = 0; e < endpoints; ++e) idx.set_capacity(e, 40 + static_cast<int64_t>(rng() % 300));
    const std::string base = [&] {
      std::string t(block_chars * 400, ' ');
      for (auto& c : t) c = static_cast<char>('a' + rng() % 26);
      return t;
    }();
    auto variant = [&](size_t keep_blocks, size_t total_blocks) {
      std::string t = base.substr(0, keep_blocks * block_chars + rng() % block_chars);
      while (t.size() < total_blocks * block_chars) t += static_cast<char>('A' + rng() % 26);
      return t;
    };
    const uint64_t seed = PrefixIndex::seed("m", "", "");
    for (int step = 0; step < 400; ++step) {
      std::vector<uint64_t> b;
      PrefixIndex::hash_blocks(variant(rng() % 300, 300), block_chars, seed, 1 << 20, b);
      idx.learn(rng() % endpoints, b);
      const std::string probe = variant(rng() % 320, 330);
      const size_t cap = step % 3 == 0 ? 1 + rng() % 200 : size_t{1} << 20;
      std::vector<uint64_t> pb;
      PrefixIndex::hash_blocks(probe, block_chars, seed, cap, pb);
      std::vector<uint32_t> walked(endpoints), strided(endpoints);
      idx.match(pb, walked);
      const uint64_t deepest = idx.match_text(probe, block_chars, seed, cap, strided);
      ASSERT_EQ(strided, walked) << "block " << block_chars << " step " << step;
      const uint32_t depth = *std::max_element(walked.begin(), walked.end());
      ASSERT_EQ(deepest, depth > 0 ? pb[depth - 1] : 0u) << "block " << block_chars << " step " << step;
    }
    EXPECT_TRUE(idx.ancestor_closed());
  }
}

TEST(PrefixIndex, MatchesNaiveModelUpTo64Endpoints) { random_against_model(7); }
TEST(PrefixIndex, MatchesNaiveModelBeyond64Endpoints) { random_against_model(70); }

TEST(PrefixIndex, MemoryPerEntryAtCapacityUnder64Bytes) {
  PrefixIndex idx(8);
  for (size_t e = 0; e < 8; ++e) idx.set_capacity(e, 20000);
  std::mt19937_64 rng(1);
  std::vector<uint64_t> b(256);
  while (idx.entries() < 8 * 20000) {
    for (auto& h : b) h = rng();
    idx.learn(rng() % 8, b);
  }
  for (int i = 0; i < 200; ++i) {  // churn at capacity
    for (auto& h : b) h = rng();
    idx.learn(rng() % 8, b);
  }
  EXPECT_EQ(idx.entries(), 8u * 20000);
  double per_entry = static_cast<double>(idx.memory_bytes()) / static_cast<double>(idx.entries());
  EXPECT_LT(per_entry, 64.0);
}

TEST(PrefixIndex, BlocksOfRoundTripsThroughLearn) {
  PrefixIndex a(2), b(3);
  const std::vector<uint64_t> first = {11, 12, 13}, second = {11, 12, 99};
  a.learn(1, first);
  a.learn(1, second);  // 11, 12 refreshed; 99 most recent after them
  const auto held = a.blocks_of(1);
  ASSERT_EQ(held.size(), 4u);
  EXPECT_EQ(held.front(), 11u);  // the head of the last prompt is the most recent
  EXPECT_TRUE(a.blocks_of(0).empty());
  b.learn(2, held);
  EXPECT_EQ(b.blocks_of(2), held);  // same blocks, same recency order
  std::vector<uint32_t> matched(3);
  b.match(first, matched);
  EXPECT_EQ(matched[2], 3u);
  EXPECT_EQ(matched[0], 0u);
}

}  // namespace
}  // namespace sluice
