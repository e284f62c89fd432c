#include "core/admission/shared_budget.h"

#include <gtest/gtest.h>

#include "core/admission/lease_policy.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::shared_ptr<const TenantRegistry> registry(RateLimits limits) {
  TenantsSpec s;
  TenantSpec t;
  t.name = "acme";
  t.limits = limits;
  s.tenants.push_back(t);
  s.anonymous_tenant = "acme";
  auto built = TenantRegistry::build(s);
  EXPECT_TRUE(built.registry) << built.error;
  return built.registry;
}

RateLimits out_only(int64_t otpm) {
  RateLimits l;
  l.output_tokens_per_min = otpm;
  return l;
}

// Plays Redis for one bucket: the script's reserve rule over a local GCRA.
ScriptReply serve(Gcra& g, const LeaseAsk& ask, Time now) {
  ScriptReply r;
  const int64_t need = ask.args[0].a, extra = ask.args[0].b;
  r.granted = g.time_until(need, now) == Duration::zero();
  r.worst = r.granted ? 0 : 1;
  int64_t grant = 0;
  if (r.granted) {
    grant = need + std::min(extra, g.remaining(now) - need);
    g.try_consume(grant, now);
  } else {
    r.retry_ms = std::chrono::duration_cast<milliseconds>(g.time_until(need, now)).count();
  }
  r.buckets.push_back({grant, g.remaining(now), 0});
  return r;
}

TEST(LeasePolicy, SliceShrinksWithTheRemainingAndIsCapped) {
  LeaseConfig cfg;  // share 0.25, max_slice 0.05
  EXPECT_EQ(lease_slice(100000, 100000, 1, cfg), 5000);   // capped at 5% of the bucket
  EXPECT_EQ(lease_slice(100000, 12000, 3, cfg), 1000);    // 0.25 x 12000 / 3
  EXPECT_EQ(lease_slice(100000, 3, 3, cfg), 0);           // near the limit: exact reservations
  EXPECT_EQ(lease_keep(100000, 100000, 1, seconds(2), cfg), 0);  // idle: give it all back
  EXPECT_EQ(lease_idle_bound(100000, 12000, 3, cfg), 6000);      // <= 2 x share x remaining
  cfg.share = 0;
  EXPECT_EQ(lease_slice(100000, 100000, 1, cfg), 0);
}

TEST(SharedBudget, FarFromTheLimitMostRequestsNeedNoRedisCall) {
  auto reg = registry(out_only(100000));
  SharedBudget sb(reg, {});
  Gcra redis(GcraSpec{100000, std::chrono::minutes(1), 100000});
  AdmissionRng rng(1);
  const Tenant& t = reg->tenant(0);
  int remote = 0;
  std::vector<SharedReservation> held;
  for (int i = 0; i < 100; ++i) {
    const Time now = Time(milliseconds(i));
    auto r = sb.reserve_local(t, "m", {0, 100}, now);
    if (r.ask) {
      ++remote;
      r = sb.complete(*r.ask, serve(redis, *r.ask, now), now, rng);
    }
    ASSERT_TRUE(r.ok());
    held.push_back(std::move(r.reservation));
  }
  EXPECT_LE(remote, 3);  // slice 5000 = 50 requests of 100 tokens per round trip
  EXPECT_EQ(sb.outstanding(), 100);
  // Settling with less than reserved refunds into the lease credit: the next requests stay local.
  for (auto& r : held) r.settle(Usage{0, 0, 10}, Time(milliseconds(200)));
  EXPECT_EQ(sb.outstanding(), 0);
  auto r = sb.reserve_local(t, "m", {0, 100}, Time(milliseconds(201)));
  EXPECT_FALSE(r.ask.has_value());
  EXPECT_TRUE(r.ok());
}

TEST(SharedBudget, NeverAdmitsMoreThanTheSharedBucketAcrossReplicas) {
  auto reg = registry(out_only(6000));
  Gcra redis(GcraSpec{6000, std::chrono::minutes(1), 6000});  // the one shared bucket
  std::vector<std::unique_ptr<SharedBudget>> replicas;
  for (int i = 0; i < 3; ++i) {
    replicas.push_back(std::make_unique<SharedBudget>(reg, SharedBudgetConfig{}));
    replicas.back()->set_replicas(3);
  }
  AdmissionRng rng(2);
  int64_t admitted = 0;
  std::vector<SharedReservation> running;
  for (int i = 0; i < 600; ++i) {  // 10 s, requests of 50 tokens round robin over 3 replicas
    const Time now = Time(milliseconds(i * 16));
    auto& sb = *replicas[i % 3];
    auto r = sb.reserve_local(reg->tenant(0), "m", {0, 50}, now);
    if (r.ask) r = sb.complete(*r.ask, serve(redis, *r.ask, now), now, rng);
    if (r.ok()) {
      admitted += 50;
      r.reservation.mark_dispatched();
      r.reservation.settle(Usage{0, 0, 50}, now);
    }
  }
  // The bucket allows 6000 + 6000/min x 9.6 s = 6960; held credit counts as admitted-capacity.
  EXPECT_LE(admitted, 6960);
  EXPECT_GE(admitted, 6000);
}

TEST(SharedBudget, SyncGivesIdleCreditBackAndChargesDebt) {
  auto reg = registry(out_only(100000));
  SharedBudget sb(reg, {});
  Gcra redis(GcraSpec{100000, std::chrono::minutes(1), 100000});
  AdmissionRng rng(3);
  const Tenant& t = reg->tenant(0);
  auto r = sb.reserve_local(t, "m", {0, 100}, Time(0));
  ASSERT_TRUE(r.ask);
  r = sb.complete(*r.ask, serve(redis, *r.ask, Time(0)), Time(0), rng);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(sb.held_units(), 5100);
  r.reservation.mark_dispatched();
  r.reservation.settle(Usage{0, 0, 5300}, Time(milliseconds(10)));  // 200 over what it reserved + the credit
  auto calls = sb.due_syncs(Time(milliseconds(20)));  // used recently: keeps its slice
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].args[0].a, 200);  // the debt is charged
  EXPECT_EQ(calls[0].args[0].b, 0);    // nothing held any more
  // Idle: everything goes back and held drops to 0.
  auto r2 = sb.reserve_local(t, "m", {0, 100}, Time(milliseconds(30)));
  ASSERT_TRUE(r2.ask);
  r2 = sb.complete(*r2.ask, serve(redis, *r2.ask, Time(milliseconds(30))), Time(milliseconds(30)), rng);
  r2.reservation.cancel(Time(milliseconds(40)));
  calls = sb.due_syncs(Time(seconds(5)));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_LT(calls[0].args[0].a, 0);    // refund
  EXPECT_EQ(calls[0].args[0].b, 0);
  EXPECT_EQ(sb.held_units(), 0);
  EXPECT_TRUE(sb.due_syncs(Time(seconds(6))).empty());  // nothing left to say
  // A call that never left gives its credit back to the lease; one that may have arrived does not.
  const int64_t given = -calls[0].args[0].a;
  sb.on_sync_failed(calls[0], false);
  EXPECT_EQ(sb.held_units(), given);
}

TEST(SharedBudget, FallbackEnforcesOneNthStartedFromTheLastSharedState) {
  auto reg = registry(out_only(9000));
  SharedBudget sb(reg, {});
  sb.set_replicas(3);
  AdmissionRng rng(4);
  Gcra redis(GcraSpec{9000, std::chrono::minutes(1), 9000});
  redis.try_consume(3000, Time(0));  // others spent a third
  auto r = sb.reserve_local(reg->tenant(0), "m", {0, 10}, Time(0));
  ASSERT_TRUE(r.ask);
  r = sb.complete(*r.ask, serve(redis, *r.ask, Time(0)), Time(0), rng);  // sees remaining ~6000
  r.reservation.cancel(Time(0));
  sb.set_degraded(true);
  int64_t admitted = 0;
  for (int i = 0; i < 400; ++i) {
    auto f = sb.reserve_fallback(reg->tenant(0), "m", {0, 10}, Time(0), rng);
    if (!f.ok()) {
      ASSERT_TRUE(f.denial);
      EXPECT_NE(f.denial->error.message.find("1/3 share"), std::string::npos);
      break;
    }
    admitted += 10;
    f.reservation.mark_dispatched();
    f.reservation.settle(Usage{0, 0, 10}, Time(0));
  }
  // Its share of what was left (~(6000 - its lease) / 3) plus its own unspent lease credit (~225).
  EXPECT_GE(admitted, 1700);
  EXPECT_LE(admitted, 2100);
  // Back: what the fallback admitted is charged to Redis at the next sync.
  sb.set_degraded(false);
  auto calls = sb.due_syncs(Time(milliseconds(10)));
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].charged[0], admitted);
}

TEST(SharedBudget, TooLargeIsRefusedWithoutRedisAndUnavailableIsAClear429) {
  auto reg = registry(out_only(1000));
  SharedBudget sb(reg, {});
  AdmissionRng rng(5);
  auto r = sb.reserve_local(reg->tenant(0), "m", {0, 1001}, Time(0));
  EXPECT_FALSE(r.ask);
  ASSERT_TRUE(r.denial);
  EXPECT_EQ(r.denial->reason, RejectReason::too_large);
  auto u = sb.unavailable(reg->tenant(0), "m", Time(0), rng);
  ASSERT_TRUE(u.denial);
  EXPECT_EQ(u.denial->error.status, 429);
  EXPECT_EQ(u.denial->error.code, "rate_limit_unavailable");
  EXPECT_GE(u.denial->retry_after, seconds(1));
}

TEST(SharedBudget, AbandonedAskReturnsThePinnedCredit) {
  auto reg = registry(out_only(100000));
  SharedBudget sb(reg, {});
  Gcra redis(GcraSpec{100000, std::chrono::minutes(1), 100000});
  AdmissionRng rng(6);
  auto r = sb.reserve_local(reg->tenant(0), "m", {0, 100}, Time(0));
  r = sb.complete(*r.ask, serve(redis, *r.ask, Time(0)), Time(0), rng);
  r.reservation.cancel(Time(0));
  const int64_t credit = sb.held_units();
  auto big = sb.reserve_local(reg->tenant(0), "m", {0, 9000}, Time(0));  // more than the credit
  ASSERT_TRUE(big.ask);
  EXPECT_EQ(big.ask->pinned[0], credit);
  EXPECT_EQ(big.ask->args[0].a, 9000 - credit);
  sb.abandon(*big.ask);
  EXPECT_EQ(sb.held_units(), credit);
}

}  // namespace
}  // namespace sluice
