#include <gtest/gtest.h>

#include "core/health/active_health.h"
#include "core/health/outlier_detector.h"
#include "core/health/retry_budget.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

TEST(OutlierDetector, EjectsAfterConsecutiveServerErrorsOnly) {
  OutlierDetector d(4, OutlierConfig{.consecutive_failures = 3});
  Time t{};
  // Client errors never count, successes reset the streak.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(d.record(0, AttemptResult::client_error, t));
  EXPECT_FALSE(d.record(0, AttemptResult::server_error, t));
  EXPECT_FALSE(d.record(0, AttemptResult::server_error, t));
  EXPECT_FALSE(d.record(0, AttemptResult::success, t));
  EXPECT_FALSE(d.record(0, AttemptResult::server_error, t));
  EXPECT_FALSE(d.record(0, AttemptResult::connect_error, t));
  EXPECT_TRUE(d.record(0, AttemptResult::timeout, t));
  EXPECT_TRUE(d.ejected(0, t + 29s));
  EXPECT_FALSE(d.ejected(0, t + 30s));
}

TEST(OutlierDetector, EjectionTimeGrowsAndIsCapped) {
  OutlierDetector d(2, OutlierConfig{.consecutive_failures = 1, .base_ejection = 30s, .max_ejection = 70s});
  Time t{};
  ASSERT_TRUE(d.record(1, AttemptResult::server_error, t));
  t += 30s;
  ASSERT_FALSE(d.ejected(1, t));
  ASSERT_TRUE(d.record(1, AttemptResult::server_error, t));  // second ejection: 60 s
  EXPECT_TRUE(d.ejected(1, t + 59s));
  EXPECT_FALSE(d.ejected(1, t + 60s));
  t += 60s;
  ASSERT_TRUE(d.record(1, AttemptResult::server_error, t));  // third: 90 s capped to 70 s
  EXPECT_TRUE(d.ejected(1, t + 69s));
  EXPECT_FALSE(d.ejected(1, t + 70s));
  EXPECT_EQ(d.times_ejected(1), 3);
  // A long healthy period forgives past ejections.
  EXPECT_FALSE(d.ejected(1, t + 70s + 200s));
  EXPECT_EQ(d.times_ejected(1), 0);
}

TEST(OutlierDetector, NeverEjectsMoreThanTheMaximumFraction) {
  OutlierDetector d(4, OutlierConfig{.consecutive_failures = 1, .max_ejected_fraction = 0.5});
  Time t{};
  EXPECT_TRUE(d.record(0, AttemptResult::server_error, t));
  EXPECT_TRUE(d.record(1, AttemptResult::server_error, t));
  EXPECT_FALSE(d.record(2, AttemptResult::server_error, t));
  EXPECT_FALSE(d.ejected(2, t));
  EXPECT_EQ(d.ejected_count(t), 2u);
  // A two-endpoint pool with a tiny fraction can still eject one.
  OutlierDetector small(2, OutlierConfig{.consecutive_failures = 1, .max_ejected_fraction = 0.1});
  EXPECT_TRUE(small.record(0, AttemptResult::server_error, t));
  EXPECT_FALSE(small.record(1, AttemptResult::server_error, t));
}

TEST(ActiveHealth, ThresholdsDownAndUp) {
  ActiveHealth h(1, {.unhealthy_threshold = 3, .healthy_threshold = 2});
  EXPECT_TRUE(h.healthy(0));
  EXPECT_FALSE(h.record(0, false));
  EXPECT_FALSE(h.record(0, false));
  EXPECT_FALSE(h.record(0, true));  // resets the failure streak
  EXPECT_FALSE(h.record(0, false));
  EXPECT_FALSE(h.record(0, false));
  EXPECT_TRUE(h.record(0, false));
  EXPECT_FALSE(h.healthy(0));
  EXPECT_FALSE(h.record(0, true));
  EXPECT_FALSE(h.record(0, false));
  EXPECT_FALSE(h.record(0, true));
  EXPECT_TRUE(h.record(0, true));
  EXPECT_TRUE(h.healthy(0));
}

TEST(RetryBudget, LimitsRetriesToAFractionPlusAFloor) {
  RetryBudget b({.ratio = 0.2, .min_per_second = 0.5});  // floor: 5 per 10 s window
  Time t = 100s;
  for (int i = 0; i < 100; ++i) b.on_request(t);
  int allowed = 0;
  for (int i = 0; i < 100; ++i) allowed += b.try_retry(t) ? 1 : 0;
  EXPECT_EQ(allowed, 25);  // 0.2 * 100 + 5
  // After the window passes, old requests no longer fund retries: only the floor remains.
  t += 11s;
  allowed = 0;
  for (int i = 0; i < 100; ++i) allowed += b.try_retry(t) ? 1 : 0;
  EXPECT_EQ(allowed, 5);
}

}  // namespace
}  // namespace sluice
