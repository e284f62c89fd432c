#include "core/admission/admission.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

using std::chrono::seconds;

std::shared_ptr<const TenantRegistry> registry() {
  TenantsSpec s;
  TenantSpec a;
  a.name = "acme";
  a.key_sha256_hex = {sha256_hex("sk-acme")};
  a.priority = 1;
  a.limits.requests_per_min = 100;
  a.limits.input_tokens_per_min = 10000;
  a.limits.output_tokens_per_min = 10000;
  a.limits.max_concurrent = 2;
  s.tenants = {a};
  return TenantRegistry::build(s).registry;
}

std::string header(const HeaderList& h, std::string_view name) {
  for (const auto& [k, v] : h)
    if (k == name) return v;
  return "<absent>";
}

class AdmissionTest : public ::testing::Test {
 protected:
  AdmissionRng rng{8};
};

TEST_F(AdmissionTest, OneRequestStartToFinish) {
  AdmissionConfig cfg;
  cfg.default_max_output_tokens = 1000;
  Admission adm(registry(), cfg);
  AuthResult auth = adm.authenticate("Bearer sk-acme");
  ASSERT_TRUE(auth.ok());
  AdmissionResult r = adm.admit(*auth.tenant, {"m", 500, std::nullopt, std::nullopt, 2000, 77}, false, Time{0}, rng);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.request.output_bound().inject_max_tokens);
  EXPECT_EQ(r.request.output_bound().tokens, 1000);
  EXPECT_EQ(r.request.priority(), 1);
  EXPECT_EQ(header(r.rate_limit_headers, "x-ratelimit-remaining-tokens"), "9000");  // output: 10000 - 1000
  EXPECT_EQ(adm.queue().size(), 1u);
  auto d = adm.pop_next(Time{0});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->cookie, 77u);
  r.request.on_dispatched();
  r.request.on_output(40);
  r.request.on_output(60);
  EXPECT_EQ(r.request.reservation().delivered_output(), 100);
  EXPECT_DOUBLE_EQ(adm.queue().vtc_counter(1, 0), 500 + 2 * 100);
  r.request.settle(Usage{480, 0, 100}, Time{0});
  const auto snap = adm.counters().snapshot();
  EXPECT_EQ(snap.admitted, 1u);
  EXPECT_EQ(snap.dispatched, 1u);
  EXPECT_EQ(snap.outstanding_reservations, 0);
  EXPECT_EQ(snap.in_flight, 0);
  const RateLimitStatus s = adm.budget().status(*auth.tenant, "m", Time{0});
  EXPECT_EQ(s.tokens.remaining, 9520);  // input 10000 - 480 (output 9900)
}

TEST_F(AdmissionTest, RefusalsReleaseEverythingTakenBefore) {
  AdmissionConfig cfg;
  cfg.queue.max_requests = 1;
  Admission adm(registry(), cfg);
  const Tenant& t = adm.tenants().tenant(0);
  AdmissionResult first = adm.admit(t, {"m", 10, 10, std::nullopt, 10, 1}, true, Time{0}, rng);
  ASSERT_TRUE(first.ok());
  // Queue full: the second request's slot and reservation are given back at once.
  AdmissionResult full = adm.admit(t, {"m", 10, 10, std::nullopt, 10, 2}, true, Time{0}, rng);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.denial->reason, RejectReason::queue_full);
  EXPECT_EQ(adm.limiter().in_flight(0), 1);
  EXPECT_EQ(adm.budget().outstanding(), 1);
  // Too large: refused before queueing, nothing held.
  AdmissionResult big = adm.admit(t, {"m", 20000, 10, std::nullopt, 10, 3}, false, Time{0}, rng);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.denial->reason, RejectReason::too_large);
  EXPECT_NE(header(big.rate_limit_headers, "x-ratelimit-limit-requests"), "<absent>");
  // Sheddable per-request priority while saturated.
  AdmissionResult shed = adm.admit(t, {"m", 10, 10, -1, 10, 4}, true, Time{0}, rng);
  ASSERT_FALSE(shed.ok());
  EXPECT_EQ(shed.denial->reason, RejectReason::shed);
  // Concurrency: two held (one queued, one more now), the third refused.
  AdmissionResult second = adm.admit(t, {"m", 10, 10, std::nullopt, 10, 5}, false, Time{0}, rng);
  ASSERT_FALSE(second.ok());  // queue still full (max 1)
  ASSERT_TRUE(adm.pop_next(Time{0}));
  first.request.on_dispatched();
  AdmissionResult third = adm.admit(t, {"m", 10, 10, std::nullopt, 10, 6}, false, Time{0}, rng);
  ASSERT_TRUE(third.ok());
  AdmissionResult fourth = adm.admit(t, {"m", 10, 10, std::nullopt, 10, 7}, false, Time{0}, rng);
  ASSERT_FALSE(fourth.ok());
  EXPECT_EQ(fourth.denial->reason, RejectReason::rate_limit);
  EXPECT_NE(fourth.denial->error.message.find("concurrent"), std::string::npos);
  first.request.release();
  third.request.release();
  EXPECT_EQ(adm.limiter().total_in_flight(), 0);
  EXPECT_EQ(adm.budget().outstanding(), 0);
  EXPECT_EQ(adm.queue().size(), 0u);
}

TEST_F(AdmissionTest, QueuedRequestDroppedLeavesQueueAndIsRefunded) {
  Admission adm(registry());
  const Tenant& t = adm.tenants().tenant(0);
  const RateLimitStatus before = adm.budget().status(t, "m", Time{0});
  {
    AdmissionResult r = adm.admit(t, {"m", 3000, 3000, std::nullopt, 10, 1}, true, Time{0}, rng);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(adm.queue().size(), 1u);
  }
  EXPECT_EQ(adm.queue().size(), 0u);
  const RateLimitStatus after = adm.budget().status(t, "m", Time{0});
  EXPECT_EQ(after.tokens.remaining, before.tokens.remaining);
  EXPECT_EQ(after.requests.remaining, before.requests.remaining);
  EXPECT_EQ(adm.counters().snapshot().cancelled_queued, 1u);
  EXPECT_EQ(adm.counters().snapshot().in_flight, 0);
}

TEST_F(AdmissionTest, ExpiredRequestGets503AndItsHolderReleases) {
  AdmissionConfig cfg;
  cfg.queue.default_ttl = seconds(5);
  Admission adm(registry(), cfg);
  const Tenant& t = adm.tenants().tenant(0);
  AdmissionResult r = adm.admit(t, {"m", 10, 10, std::nullopt, 10, 9}, true, Time{0}, rng);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.deadline, Time{seconds(5)});
  EXPECT_EQ(adm.next_deadline(), Time{seconds(5)});
  auto gone = adm.expire(Time{seconds(6)}, rng);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].cookie, 9u);
  EXPECT_EQ(gone[0].denial.error.status, 503);
  r.request.release();  // the waiter answers 503 and drops its request
  EXPECT_EQ(adm.counters().snapshot().outstanding_reservations, 0);
  EXPECT_EQ(adm.counters().snapshot().cancelled_queued, 0u);  // it had expired, not cancelled
}

// Issue 14 item 5: a max_concurrent refusal is a 429 like the others, with x-ratelimit-*.
TEST_F(AdmissionTest, MaxConcurrentRefusalCarriesRateLimitHeaders) {
  Admission adm(registry(), AdmissionConfig{});
  const Tenant& t = *adm.authenticate("Bearer sk-acme").tenant;
  AdmissionResult a = adm.admit(t, {"m", 10, 10, std::nullopt, 100, 1}, false, Time{0}, rng);
  AdmissionResult b = adm.admit(t, {"m", 10, 10, std::nullopt, 100, 2}, false, Time{0}, rng);
  ASSERT_TRUE(a.ok() && b.ok());
  AdmissionResult c = adm.admit(t, {"m", 10, 10, std::nullopt, 100, 3}, false, Time{0}, rng);
  ASSERT_FALSE(c.ok());
  ASSERT_TRUE(c.denial);
  EXPECT_EQ(c.denial->error.status, 429);
  EXPECT_EQ(header(c.rate_limit_headers, "x-ratelimit-limit-requests"), "100");
  EXPECT_EQ(header(c.rate_limit_headers, "x-ratelimit-remaining-requests"), "98");
  EXPECT_NE(header(c.rate_limit_headers, "x-ratelimit-reset-tokens"), "<absent>");
}

}  // namespace
}  // namespace sluice
