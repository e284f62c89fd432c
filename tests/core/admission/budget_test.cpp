#include "core/admission/budget.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::shared_ptr<const TenantRegistry> registry(RateLimits limits, std::vector<ModelLimits> models = {}) {
  TenantsSpec s;
  TenantSpec t;
  t.name = "acme";
  t.key_sha256_hex = {sha256_hex("k")};
  t.limits = limits;
  t.model_limits = std::move(models);
  s.tenants = {t};
  auto built = TenantRegistry::build(s);
  EXPECT_TRUE(built.registry) << built.error;
  return built.registry;
}

RateLimits tpm(int64_t rpm, int64_t in, int64_t out) {
  RateLimits l;
  l.requests_per_min = rpm;
  l.input_tokens_per_min = in;
  l.output_tokens_per_min = out;
  return l;
}

std::string header(const HeaderList& h, std::string_view name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "<absent>";
}

class BudgetTest : public ::testing::Test {
 protected:
  AdmissionRng rng{1};
  AdmissionCounters counters;
};

TEST_F(BudgetTest, ReserveChargesEveryDimensionAndSettleRefundsUnused) {
  auto reg = registry(tpm(10, 10000, 5000));
  Budget budget(reg, &counters);
  const Tenant& t = reg->tenant(0);
  {
    ReserveResult r = budget.reserve(t, "m", {1000, 2000}, Time{0}, rng);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.status.requests.remaining, 9);
    EXPECT_EQ(r.status.tokens.remaining, 3000);  // output: the tighter token bucket
    EXPECT_EQ(budget.outstanding(), 1);
    r.reservation.mark_dispatched();
    r.reservation.settle(Usage{800, 0, 150}, Time{0});
    EXPECT_EQ(budget.outstanding(), 0);
  }
  const RateLimitStatus s = budget.status(t, "m", Time{0});
  EXPECT_EQ(s.requests.remaining, 9);   // the request itself stays charged
  EXPECT_EQ(s.tokens.remaining, 4850);  // output 5000 - 150; input 10000 - 800 = 9200
  EXPECT_EQ(counters.snapshot().admitted, 1u);
  EXPECT_EQ(counters.snapshot().outstanding_reservations, 0);
}

TEST_F(BudgetTest, SettleChargesExtraWhenUsageExceedsReservation) {
  auto reg = registry(tpm(100, 1000, 1000));
  Budget budget(reg);
  ReserveResult r = budget.reserve(reg->tenant(0), "m", {100, 100}, Time{0}, rng);
  ASSERT_TRUE(r.ok());
  r.reservation.settle(Usage{400, 0, 1100}, Time{0});  // input estimate was low; output overran
  const RateLimitStatus s = budget.status(reg->tenant(0), "m", Time{0});
  EXPECT_EQ(s.tokens.remaining, 0);  // output bucket in debt
  // The debt (100 tokens) plus one token must refill before a 1-token request fits.
  ReserveResult next = budget.reserve(reg->tenant(0), "m", {1, 1}, Time{0}, rng);
  ASSERT_FALSE(next.ok());
  EXPECT_EQ(next.denial->reason, RejectReason::rate_limit);
  EXPECT_GE(next.denial->retry_after, milliseconds(6060));  // 101 tokens at 1000/min
}

TEST_F(BudgetTest, CachedInputIsNotCharged) {
  auto reg = registry(tpm(100, 1000, 1000));
  Budget budget(reg);
  ReserveResult r = budget.reserve(reg->tenant(0), "m", {500, 10}, Time{0}, rng);
  r.reservation.settle(Usage{500, 400, 10}, Time{0});
  // The input bucket is now at 900 remaining; a 900-token request fits, 901 does not.
  EXPECT_TRUE(budget.reserve(reg->tenant(0), "m", {900, 0}, Time{0}, rng).ok());
}

TEST_F(BudgetTest, RateLimitedWithOpenAiBodyAndRefillRetryAfter) {
  auto reg = registry(tpm(1000, 60000, 60000));  // 1000 tokens per second
  Budget budget(reg, &counters);
  const Tenant& t = reg->tenant(0);
  ReserveResult a = budget.reserve(t, "m", {59000, 0}, Time{0}, rng);
  ASSERT_TRUE(a.ok());
  ReserveResult b = budget.reserve(t, "m", {3000, 0}, Time{0}, rng);
  ASSERT_FALSE(b.ok());
  ASSERT_TRUE(b.denial);
  const Denial& d = *b.denial;
  EXPECT_EQ(d.reason, RejectReason::rate_limit);
  EXPECT_EQ(d.error.status, 429);
  EXPECT_EQ(d.error.type, "tokens");
  EXPECT_EQ(d.error.code, "rate_limit_exceeded");
  // 2000 tokens missing at 1000/s: 2 s, jittered upward by at most 25%.
  EXPECT_GE(d.retry_after, seconds(2));
  EXPECT_LE(d.retry_after, milliseconds(2500));
  EXPECT_NE(d.error.message.find("Rate limit reached for acme on input tokens per min (ITPM): Limit "
                                 "60000, Used 59000, Requested 3000. Please try again in "),
            std::string::npos)
      << d.error.message;
  EXPECT_NE(d.error.message.find(format_go_duration(d.retry_after)), std::string::npos);
  EXPECT_EQ(header(d.headers(), "retry-after"), "3");
  // Refused requests charge nothing: the requests bucket still has 999.
  EXPECT_EQ(budget.status(t, "m", Time{0}).requests.remaining, 999);
  // Waiting the (un-jittered) refill time is enough.
  EXPECT_TRUE(budget.reserve(t, "m", {3000, 0}, Time{seconds(2)}, rng).ok());
  EXPECT_EQ(counters.snapshot().rejected_for(RejectReason::rate_limit), 1u);
}

TEST_F(BudgetTest, RequestLargerThanABucketIsRefusedAtOnce) {
  struct Case {
    const char* name;
    TokenCost cost;
    const char* label;
  };
  const Case cases[] = {
      {"input", {10001, 1}, "input tokens per min (ITPM): Limit 10000, Requested 10001"},
      {"output", {1, 5001}, "output tokens per min (OTPM): Limit 5000, Requested 5001"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto reg = registry(tpm(10, 10000, 5000));
    Budget budget(reg, &counters);
    ReserveResult r = budget.reserve(reg->tenant(0), "m", c.cost, Time{0}, rng);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.denial->reason, RejectReason::too_large);
    EXPECT_FALSE(r.denial->should_retry);
    EXPECT_EQ(r.denial->retry_after, Duration{0});
    EXPECT_EQ(header(r.denial->headers(), "x-should-retry"), "false");
    EXPECT_NE(r.denial->error.message.find("Request too large for acme on"), std::string::npos);
    EXPECT_NE(r.denial->error.message.find(c.label), std::string::npos) << r.denial->error.message;
    // Even when the bucket is empty, too-large wins over rate-limited (never worth retrying).
  }
  EXPECT_EQ(counters.snapshot().rejected_for(RejectReason::too_large), 2u);
}

TEST_F(BudgetTest, AllOrNothingAcrossDimensions) {
  auto reg = registry(tpm(100, 1000, 100));
  Budget budget(reg);
  const Tenant& t = reg->tenant(0);
  ReserveResult first = budget.reserve(t, "m", {0, 90}, Time{0}, rng);
  ASSERT_TRUE(first.ok());
  // Input has room (1000) but output only 10: nothing at all may be charged.
  ReserveResult r = budget.reserve(t, "m", {500, 50}, Time{0}, rng);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.denial->error.type, "tokens");
  EXPECT_NE(r.denial->error.message.find("OTPM"), std::string::npos);
  EXPECT_TRUE(budget.reserve(t, "m", {1000, 0}, Time{0}, rng).ok());  // input untouched
}

TEST_F(BudgetTest, ParallelRequestsCannotAllPassACap) {
  // The known failure: 5 concurrent 300k-token requests against a 1M cap; 4 got through.
  RateLimits l;
  l.tokens_per_day = 1'000'000;
  auto reg = registry(l);
  Budget budget(reg);
  std::vector<Reservation> held;
  int granted = 0;
  for (int i = 0; i < 5; ++i) {
    ReserveResult r = budget.reserve(reg->tenant(0), "m", {290'000, 10'000}, Time{0}, rng);
    if (r.ok()) {
      ++granted;
      held.push_back(std::move(r.reservation));
    }
  }
  EXPECT_EQ(granted, 3);
}

TEST_F(BudgetTest, DestructorRefundsEverythingWhenNeverDispatched) {
  auto reg = registry(tpm(10, 1000, 1000));
  Budget budget(reg, &counters);
  { ReserveResult r = budget.reserve(reg->tenant(0), "m", {600, 600}, Time{0}, rng); }
  const RateLimitStatus s = budget.status(reg->tenant(0), "m", Time{0});
  EXPECT_EQ(s.requests.remaining, 10);
  EXPECT_EQ(s.tokens.remaining, 1000);
  EXPECT_EQ(budget.outstanding(), 0);
}

TEST_F(BudgetTest, DestructorChargesWhatWasDeliveredWhenCut) {
  auto reg = registry(tpm(10, 1000, 1000));
  Budget budget(reg);
  {
    ReserveResult r = budget.reserve(reg->tenant(0), "m", {200, 800}, Time{0}, rng);
    r.reservation.mark_dispatched();
    r.reservation.add_delivered(30);
    r.reservation.add_delivered(20);
  }  // client disconnected mid-stream
  ReserveResult rest = budget.reserve(reg->tenant(0), "m", {800, 950}, Time{0}, rng);
  EXPECT_TRUE(rest.ok());
  EXPECT_FALSE(budget.reserve(reg->tenant(0), "m", {1, 1}, Time{0}, rng).ok());
}

TEST_F(BudgetTest, SettleIsIdempotentAndMoveTransfersOwnership) {
  auto reg = registry(tpm(10, 1000, 1000));
  Budget budget(reg);
  ReserveResult r = budget.reserve(reg->tenant(0), "m", {100, 100}, Time{0}, rng);
  Reservation moved = std::move(r.reservation);
  EXPECT_FALSE(r.reservation.valid());
  EXPECT_TRUE(moved.valid());
  moved.cancel(Time{0});
  moved.settle(Usage{1000, 0, 1000}, Time{0});  // ignored
  moved.release();                              // ignored
  EXPECT_EQ(budget.status(reg->tenant(0), "m", Time{0}).tokens.remaining, 1000);
  EXPECT_EQ(budget.outstanding(), 0);
}

TEST_F(BudgetTest, ModelScopeIsCheckedInAdditionToTenant) {
  auto reg = registry(tpm(100, 100000, 100000), {ModelLimits{"big", tpm(2, 50000, 50000)}});
  Budget budget(reg);
  const Tenant& t = reg->tenant(0);
  Reservation a = std::move(budget.reserve(t, "big", {10, 10}, Time{0}, rng).reservation);
  Reservation b = std::move(budget.reserve(t, "big", {10, 10}, Time{0}, rng).reservation);
  ASSERT_TRUE(a.valid() && b.valid());
  ReserveResult c = budget.reserve(t, "big", {10, 10}, Time{0}, rng);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.denial->error.message.find("acme for model big on requests per min"), std::string::npos)
      << c.denial->error.message;
  EXPECT_EQ(c.denial->error.type, "requests");
  ReserveResult small = budget.reserve(t, "small", {10, 10}, Time{0}, rng);
  EXPECT_TRUE(small.ok());
  // Tenant-wide buckets saw the model's requests too (the refused one charged nothing).
  EXPECT_EQ(budget.status(t, "small", Time{0}).requests.remaining, 97);
  EXPECT_EQ(budget.status(t, "big", Time{0}).requests.remaining, 0);
}

TEST_F(BudgetTest, RateLimitHeaders) {
  auto reg = registry(tpm(60, 6000, 6000));
  Budget budget(reg);
  ReserveResult r = budget.reserve(reg->tenant(0), "m", {600, 100}, Time{0}, rng);
  ASSERT_TRUE(r.ok());
  const auto h = r.status.headers();
  EXPECT_EQ(header(h, "x-ratelimit-limit-requests"), "60");
  EXPECT_EQ(header(h, "x-ratelimit-remaining-requests"), "59");
  EXPECT_EQ(header(h, "x-ratelimit-reset-requests"), "1s");
  EXPECT_EQ(header(h, "x-ratelimit-limit-tokens"), "6000");
  EXPECT_EQ(header(h, "x-ratelimit-remaining-tokens"), "5400");
  EXPECT_EQ(header(h, "x-ratelimit-reset-tokens"), "6s");
  // No limits configured: no headers at all.
  auto open = registry({});
  Budget unlimited(open);
  ReserveResult u = unlimited.reserve(open->tenant(0), "m", {1'000'000, 1'000'000}, Time{0}, rng);
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE(u.status.headers().empty());
}

TEST(OutputBound, LargestRequestedOrInjectedDefault) {
  EXPECT_EQ(output_bound_for(738, 256).tokens, 738);
  EXPECT_FALSE(output_bound_for(738, 256).inject_max_tokens);
  EXPECT_EQ(output_bound_for(std::nullopt, 256).tokens, 256);
  EXPECT_TRUE(output_bound_for(std::nullopt, 256).inject_max_tokens);
  EXPECT_TRUE(output_bound_for(0, 256).inject_max_tokens);
}

}  // namespace
}  // namespace sluice
