#include "core/picker/prefix_demand.h"

#include <gtest/gtest.h>

#include <cmath>

namespace sluice {
namespace {

Time ms(double x) { return std::chrono::duration_cast<Time>(std::chrono::duration<double, std::milli>(x)); }

TEST(PrefixDemand, RateIsTheDecayedCountBeforeThisRequest) {
  PrefixDemand d;
  EXPECT_EQ(d.rate(42, ms(0)), 0.0);
  d.note(42, ms(0));
  // One dispatch so far: 1 / tau.
  EXPECT_NEAR(d.rate(42, ms(0)), 1.0 / PrefixDemand::kTauMs, 1e-12);
  // It decays with time constant tau.
  EXPECT_NEAR(d.rate(42, ms(2000)), std::exp(-1.0) / PrefixDemand::kTauMs, 1e-12);
  d.note(42, ms(2000));
  EXPECT_NEAR(d.rate(42, ms(2000)), (std::exp(-1.0) + 1.0) / PrefixDemand::kTauMs, 1e-12);
  EXPECT_EQ(d.rate(43, ms(2000)), 0.0);
}

TEST(PrefixDemand, APoissonStreamReadsItsRate) {
  PrefixDemand d;
  // 20 requests per second, evenly spaced, for 20 s (10 tau): the count settles at lambda x tau.
  for (int i = 0; i < 400; ++i) d.note(7, ms(50.0 * i));
  EXPECT_NEAR(d.rate(7, ms(50.0 * 399)) * 1000, 20.0, 1.0);
}

TEST(PrefixDemand, AHotKeySurvivesAStreamOfOneOffKeys) {
  PrefixDemand d;
  for (int i = 0; i < 100; ++i) d.note(1, ms(10.0 * i));
  const double hot = d.rate(1, ms(1000));
  // 100,000 distinct one-off keys: every set is hit ~200 times, but the second way always holds
  // the lower count, so the hot key keeps its way.
  for (uint64_t k = 2; k < 100002; ++k) d.note(k * 0x9E3779B97F4A7C15ull, ms(1000));
  EXPECT_NEAR(d.rate(1, ms(1000)), hot, 1e-12);
  d.clear();
  EXPECT_EQ(d.rate(1, ms(1000)), 0.0);
}

// top(): the most asked-for keys first, with their decayed rates; a key decayed under half a
// request is left out.
TEST(PrefixDemand, TopListsTheMostAskedForKeysFirst) {
  PrefixDemand d;
  for (int i = 0; i < 30; ++i) d.note(11, ms(10.0 * i));
  for (int i = 0; i < 10; ++i) d.note(22, ms(10.0 * i));
  d.note(33, ms(0));
  const Time now = ms(300);
  const auto top = d.top(now, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].first, 11u);
  EXPECT_EQ(top[1].first, 22u);
  EXPECT_NEAR(top[0].second, d.rate(11, now), 1e-15);
  EXPECT_NEAR(top[1].second, d.rate(22, now), 1e-15);
  EXPECT_EQ(d.top(now, 10).size(), 3u);
  // 2 s later key 33's single request has decayed to 0.37 of one: gone; 22's ten are still 3.5.
  const auto later = d.top(ms(2300), 10);
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[1].first, 22u);
  EXPECT_TRUE(PrefixDemand{}.top(now, 3).empty());
}

}  // namespace
}  // namespace sluice
