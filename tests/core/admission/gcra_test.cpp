#include "core/admission/gcra.h"

#include <gtest/gtest.h>

#include <random>

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

TEST(Gcra, FullBucketAllowsBurstThenRefillsAtRate) {
  Gcra g(GcraSpec{60, minutes(1), 0});  // 1 per second, bucket 60
  EXPECT_EQ(g.remaining(Time{0}), 60);
  EXPECT_TRUE(g.try_consume(60, Time{0}));
  EXPECT_EQ(g.remaining(Time{0}), 0);
  EXPECT_FALSE(g.try_consume(1, Time{0}));
  EXPECT_EQ(g.time_until(1, Time{0}), seconds(1));
  EXPECT_EQ(g.time_until(5, Time{0}), seconds(5));
  EXPECT_EQ(g.time_until_full(Time{0}), seconds(60));
  EXPECT_FALSE(g.try_consume(1, Time{seconds(1)} - Duration(1)));
  EXPECT_TRUE(g.try_consume(1, Time{seconds(1)}));
  EXPECT_EQ(g.remaining(Time{seconds(30)}), 29);
}

struct StepCase {
  const char* name;
  int64_t limit;
  int64_t burst;
  int64_t first;       // consumed at t=0
  Duration at;         // then asked at this time
  int64_t want_remaining;
  Duration want_wait_for_10;
};

TEST(Gcra, RemainingAndWaitTable) {
  const StepCase cases[] = {
      {"half used", 600, 0, 300, Duration{0}, 300, Duration{0}},
      {"all used", 600, 0, 600, Duration{0}, 0, seconds(1)},  // 10 units = 1 s at 10/s
      {"all used, 0.5s later", 600, 0, 600, milliseconds(500), 5, milliseconds(500)},
      {"refilled", 600, 0, 600, minutes(2), 600, Duration{0}},
      {"small burst", 600, 20, 20, Duration{0}, 0, seconds(1)},
      {"burst smaller than ask", 600, 5, 0, Duration{0}, 5, Gcra::kNever},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Gcra g(GcraSpec{c.limit, minutes(1), c.burst});
    ASSERT_TRUE(g.try_consume(c.first, Time{0}));
    EXPECT_EQ(g.remaining(Time{c.at}), c.want_remaining);
    EXPECT_EQ(g.time_until(10, Time{c.at}), c.want_wait_for_10);
  }
}

TEST(Gcra, NonIntegralIntervalIsExact) {
  // 7 per minute: the emission interval is not a whole number of nanoseconds.
  Gcra g(GcraSpec{7, minutes(1), 0});
  ASSERT_TRUE(g.try_consume(1, Time{0}));
  EXPECT_EQ(g.remaining(Time{0}), 6);
  EXPECT_TRUE(g.try_consume(6, Time{0}));
  EXPECT_FALSE(g.try_consume(1, Time{0}));
  // 1/7 minute = 8.571428571...s, rounded up to the nanosecond.
  EXPECT_EQ(g.time_until(1, Time{0}), Duration(8'571'428'572));
}

TEST(Gcra, RefundRestoresExactlyAndNeverOverfills) {
  Gcra g(GcraSpec{1000, minutes(1), 0});
  ASSERT_TRUE(g.try_consume(700, Time{0}));
  g.refund(300, Time{0});
  EXPECT_EQ(g.remaining(Time{0}), 600);
  g.refund(400, Time{0});
  EXPECT_EQ(g.remaining(Time{0}), 1000);
  g.refund(5000, Time{0});  // more than was taken: still a full bucket, not 6000
  EXPECT_EQ(g.remaining(Time{0}), 1000);
  EXPECT_TRUE(g.try_consume(1000, Time{0}));
  EXPECT_FALSE(g.try_consume(1, Time{0}));
}

TEST(Gcra, ForceConsumeGoesIntoDebt) {
  Gcra g(GcraSpec{60, minutes(1), 0});
  ASSERT_TRUE(g.try_consume(60, Time{0}));
  g.force_consume(30, Time{0});  // used 30 more than it had
  EXPECT_EQ(g.remaining(Time{0}), 0);
  EXPECT_EQ(g.time_until(1, Time{0}), seconds(31));
  EXPECT_EQ(g.remaining(Time{seconds(40)}), 10);
}

TEST(Gcra, WaitingTheRetryAfterAlwaysSucceedsAndOneNanosecondLessNever) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t limit = std::uniform_int_distribution<int64_t>(1, 100000)(rng);
    Gcra g(GcraSpec{limit, minutes(1), 0});
    Time now{std::uniform_int_distribution<int64_t>(0, 1'000'000'000'000)(rng)};
    g.force_consume(std::uniform_int_distribution<int64_t>(0, 2 * limit)(rng), now);
    const int64_t n = std::uniform_int_distribution<int64_t>(1, limit)(rng);
    const Duration wait = g.time_until(n, now);
    ASSERT_NE(wait, Gcra::kNever);
    if (wait > Duration::zero()) {
      Gcra copy = g;
      ASSERT_FALSE(copy.try_consume(n, now + wait - Duration(1))) << "limit " << limit << " n " << n;
    }
    ASSERT_TRUE(g.try_consume(n, now + wait)) << "limit " << limit << " n " << n;
  }
}

TEST(Gcra, LongRunRateNeverExceedsLimit) {
  Gcra g(GcraSpec{100, minutes(1), 10});
  int64_t granted = 0;
  for (Time t{0}; t < Time{minutes(10)}; t += milliseconds(7))
    if (g.try_consume(1, t)) ++granted;
  // 10 minutes at 100/min plus one bucket: at most 1010.
  EXPECT_LE(granted, 1010);
  EXPECT_GE(granted, 1000);
}

TEST(Gcra, DailyBucketLargeNumbersDoNotOverflow) {
  Gcra g(GcraSpec{50'000'000'000, std::chrono::hours(24), 0});
  EXPECT_TRUE(g.try_consume(50'000'000'000, Time{std::chrono::hours(24 * 365 * 50)}));
  EXPECT_EQ(g.remaining(Time{std::chrono::hours(24 * 365 * 50)}), 0);
  EXPECT_EQ(g.time_until_full(Time{std::chrono::hours(24 * 365 * 50)}), std::chrono::hours(24));
}

}  // namespace
}  // namespace sluice
