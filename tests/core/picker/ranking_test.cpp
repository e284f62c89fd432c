// sort_rank_keys (ranking.h) against the order it must produce, written as the plain three-way
// comparison: unsaturated first, then higher score, then the smaller tie key.
#include "core/picker/ranking.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

namespace sluice {
namespace {

bool reference_less(const RankKey& a, const RankKey& b) {
  const bool sa = a.tie >> 63, sb = b.tie >> 63;
  if (sa != sb) return sb;
  if (a.score != b.score) return a.score > b.score;
  return a.tie < b.tie;
}

void expect_reference_order(std::vector<RankKey> keys) {
  std::vector<RankKey> want = keys;
  std::sort(want.begin(), want.end(), reference_less);
  sort_rank_keys(keys);
  ASSERT_EQ(keys.size(), want.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(keys[i].pos, want[i].pos) << "at " << i;
    EXPECT_EQ(keys[i].tie, want[i].tie) << "at " << i;
  }
}

TEST(RankingTest, DescendingScoreKeyOrdersLikeTheScores) {
  const double xs[] = {-std::numeric_limits<double>::infinity(), -1e12 - 5, -1e12, -3.5, -1e-300, 0.0, 1e-300,
                       2.0, 2.0000000000000004, 1e300, std::numeric_limits<double>::infinity()};
  for (double a : xs)
    for (double b : xs) EXPECT_EQ(descending_score_key(a) < descending_score_key(b), a > b) << a << " vs " << b;
  EXPECT_EQ(descending_score_key(-0.0), descending_score_key(0.0));  // equal as doubles: the tie key decides
}

TEST(RankingTest, SaturatedLastThenScoreThenTie) {
  const uint64_t sat = uint64_t{1} << 63;
  std::vector<RankKey> keys = {{5.0, sat | 1, 0}, {-2.0, 7, 1}, {-2.0, 3, 2}, {9.0, 4, 3}, {-0.0, 2, 4}, {0.0, 1, 5}, {7.0, sat | 0, 6}};
  sort_rank_keys(keys);
  const uint32_t want[] = {3, 5, 4, 2, 1, 6, 0};
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(keys[i].pos, want[i]) << "at " << i;
}

TEST(RankingTest, MatchesTheThreeWayComparisonOnRandomKeys) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 400; ++round) {
    const size_t n = rng() % 140;  // empty, one, and pools wider than 64
    // Few distinct scores in some rounds (ties decided by the tie key), continuous ones in others,
    // and in others scores a few ulps apart (RankOrder's cut keys equal, the whole keys not).
    const int mode = round % 3;
    const double base = -250.0 - static_cast<double>(rng() % 3);
    std::vector<RankKey> keys;
    for (size_t i = 0; i < n; ++i) {
      double score = mode == 0   ? static_cast<double>(rng() % 5) - 2.0
                     : mode == 1 ? std::ldexp(static_cast<double>(rng() % 1000000) - 5e5, -7)
                                 : base + std::ldexp(base, -52) * static_cast<double>(rng() % 200);
      if (rng() % 17 == 0) score = -1e12 - static_cast<double>(rng() % 100);  // misses its SLO
      if (score == 0 && rng() % 2) score = -0.0;
      const uint64_t saturated = rng() % 9 == 0 ? uint64_t{1} << 63 : 0;
      // Unique rotation position in the low bits, as rank_tie's; load bits above it.
      const uint64_t tie = saturated | ((rng() % 4) << 43) | ((rng() % 3) << 21) | i;
      keys.push_back({score, tie, static_cast<uint32_t>(i)});
    }
    expect_reference_order(keys);
  }
}

}  // namespace
}  // namespace sluice
