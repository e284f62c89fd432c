#include "core/admission/outcome.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(AdmissionOutcome, GoDurationFormat) {
  const std::pair<Duration, const char*> cases[] = {
      {Duration{0}, "0s"},
      {Duration{1}, "1ms"},  // rounded up: never tell a client to come back too early
      {milliseconds(20), "20ms"},
      {milliseconds(999), "999ms"},
      {seconds(1), "1s"},
      {milliseconds(1146), "1.146s"},
      {milliseconds(17280), "17.28s"},
      {std::chrono::minutes(6), "6m0s"},
      {milliseconds(61500), "1m1.5s"},
      {std::chrono::hours(1) + std::chrono::minutes(2) + milliseconds(3500), "1h2m3.5s"},
      {std::chrono::hours(24), "24h0m0s"},
  };
  for (const auto& [d, want] : cases) EXPECT_EQ(format_go_duration(d), want) << d.count();
}

TEST(AdmissionOutcome, JitterIsNeverEarlierAndSpreads) {
  AdmissionRng rng(42);
  Duration lo = Duration::max(), hi = Duration::min();
  for (int i = 0; i < 1000; ++i) {
    const Duration j = jittered(seconds(4), rng, JitterPolicy{0.25, milliseconds(10)});
    ASSERT_GE(j, seconds(4));
    ASSERT_LE(j, seconds(5));
    lo = std::min(lo, j);
    hi = std::max(hi, j);
  }
  EXPECT_GT(hi - lo, milliseconds(800));  // actually spread, not a constant
  // Tiny waits still get min_spread of jitter.
  const Duration j = jittered(Duration{0}, rng, JitterPolicy{0.25, milliseconds(10)});
  EXPECT_LE(j, milliseconds(10));
}

TEST(AdmissionOutcome, SameSeedSameJitter) {
  AdmissionRng a(9), b(9);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(jittered(seconds(1), a), jittered(seconds(1), b));
}

TEST(AdmissionOutcome, RetryHeaders) {
  Denial d;
  d.retry_after = milliseconds(1146);
  auto h = d.headers();
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0], (std::pair<std::string_view, std::string>{"retry-after", "2"}));
  EXPECT_EQ(h[1], (std::pair<std::string_view, std::string>{"retry-after-ms", "1146"}));
  d.retry_after = milliseconds(20);
  EXPECT_EQ(d.headers()[0].second, "1");  // at least one second
  Denial none;
  none.should_retry = false;
  h = none.headers();
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0], (std::pair<std::string_view, std::string>{"x-should-retry", "false"}));
}

TEST(AdmissionOutcome, QueueDenials) {
  AdmissionRng rng(1);
  const Denial full = queue_full_denial(seconds(1), rng);
  EXPECT_EQ(full.reason, RejectReason::queue_full);
  EXPECT_EQ(full.error.status, 429);
  EXPECT_GE(full.retry_after, seconds(1));
  const Denial shed = shed_denial(seconds(1), rng);
  EXPECT_EQ(shed.reason, RejectReason::shed);
  EXPECT_EQ(shed.error.status, 429);
  const Denial late = over_slo_denial(seconds(1), rng);
  EXPECT_EQ(late.reason, RejectReason::over_slo);
  EXPECT_EQ(late.error.status, 429);
  EXPECT_EQ(late.error.code, "over_slo");
  EXPECT_GE(late.retry_after, seconds(1));
  EXPECT_EQ(to_string(RejectReason::over_slo), "over_slo");
  const Denial timeout = queue_timeout_denial(seconds(30), seconds(1), rng);
  EXPECT_EQ(timeout.reason, RejectReason::queue_timeout);
  EXPECT_EQ(timeout.error.status, 503);
  EXPECT_NE(timeout.error.message.find("waited 30s"), std::string::npos) << timeout.error.message;
  const Denial missing = unauthorized_denial(true);
  EXPECT_EQ(missing.error.status, 401);
  EXPECT_EQ(missing.error.code, "missing_api_key");
  EXPECT_EQ(unauthorized_denial(false).error.code, "invalid_api_key");
}

}  // namespace
}  // namespace sluice
