#include "core/picker/shed_refusal.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/picker/peer_report.h"
#include "core/picker/policy_factory.h"
#include "picker_test_util.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// The refusal every driver makes: a pool whose two endpoints each hold ~40k tokens of prefill
// queued (own accounting), past a 150 ms TTFT SLO, refuses a 1,000-token request of priority 0
// with 429 over_slo and the policy's Retry-After (jittered upward: never earlier than told), serves
// it at priority 1, and a refusal counts in the Retry-After of the next one.
TEST(ShedRefusal, RefusesWithThePolicysRetryAfterAndReportsTheRefusal) {
  auto cfg = testing::pool_config(2, "sluice");
  cfg.policy_params = {{"ttft_slo_ms", 150}, {"itl_slo_ms", 50}};
  PoolRouter router(cfg, make_policy(cfg, 1));
  const Time t = 10s;
  std::vector<std::string> texts(20);
  std::vector<DispatchGuard> held;
  for (int i = 0; i < 20; ++i) {
    texts[i].assign(16000, char('a' + i));
    const PickRequest big = testing::chat(texts[i], 4000, 20);
    auto ranked = router.rank(big, t);
    held.push_back(router.dispatch(big, ranked.front(), t));
  }
  const std::string text(4000, 'z');
  const PickRequest req = testing::chat(text, 1000, 20);
  AdmissionRng rng{3};
  auto ranked = router.rank(req, t);
  ASSERT_TRUE(ranked.front().shed);
  EXPECT_FALSE(shed_refusal(router, ranked, 1, t, rng).has_value());  // critical: served late
  EXPECT_EQ(router.rank(req, t).front().retry_after_ms, ranked.front().retry_after_ms);  // nothing reported
  const auto d = shed_refusal(router, ranked, 0, t, rng);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->error.status, 429);
  EXPECT_EQ(d->error.code, "over_slo");
  EXPECT_EQ(d->reason, RejectReason::over_slo);
  EXPECT_GE(d->retry_after, shed_retry_base(ranked));
  EXPECT_LE(d->retry_after, shed_retry_base(ranked) * 5 / 4 + 10ms);
  const auto next = router.rank(req, t);
  // (whole ms, rounded up: within 1 ms of the exact sum)
  EXPECT_NEAR(next.front().retry_after_ms - ranked.front().retry_after_ms, ranked.front().shed_work_ms / 2.0, 1.0);
  // Nothing is refused where the policy does not advise it.
  held.clear();
  EXPECT_FALSE(shed_refusal(router, router.rank(req, t), 0, t, rng).has_value());
}


// Gateway replicas that share load (peer_load.h) share the shed backlog: a refusal on replica A is
// reported (shed_work_total_ms) and joins B's backlog, so B's next refusal is told to come back after
// it, by as much as A's own next refusal is. Before the report arrives B tells the old Retry-After.
TEST(ShedRefusal, APeersRefusalsJoinTheBacklog) {
  auto cfg = testing::pool_config(2, "sluice");
  cfg.policy_params = {{"ttft_slo_ms", 150}, {"itl_slo_ms", 50}};
  PoolRouter a(cfg, make_policy(cfg, 1)), b(cfg, make_policy(cfg, 1));
  a.share_load("a", {});
  b.share_load("b", {});
  const Time t = 10s;
  std::vector<std::string> texts(20);
  std::vector<DispatchGuard> held;
  for (int i = 0; i < 20; ++i) {  // the same load on both replicas' own accounting
    texts[i].assign(16000, char('a' + i));
    const PickRequest big = testing::chat(texts[i], 4000, 20);
    for (PoolRouter* r : {&a, &b}) held.push_back(r->dispatch(big, r->rank(big, t).front(), t));
  }
  const std::string text(4000, 'z');
  const PickRequest req = testing::chat(text, 1000, 20);
  AdmissionRng rng{3};
  PeerPoolReport report;
  a.peer_report(t, report);
  ASSERT_EQ(b.apply_peer("a", 1, 1, report, t), PeerLoad::Applied::ok);  // first heard: its history
  const auto before = b.rank(req, t);
  ASSERT_TRUE(before.front().shed);
  const auto ranked = a.rank(req, t);
  ASSERT_TRUE(shed_refusal(a, ranked, 0, t, rng).has_value());
  EXPECT_EQ(b.rank(req, t).front().retry_after_ms, before.front().retry_after_ms);  // not yet heard
  EXPECT_TRUE(a.peer_report(t, report));  // changed: the refusal
  EXPECT_EQ(report.shed_work_total_ms, ranked.front().shed_work_ms);
  PeerMessage m{"a", 1, 2, {report}};
  PeerMessage wire;
  ASSERT_TRUE(decode_peer_message(encode_peer_message(m), wire));
  ASSERT_EQ(b.apply_peer("a", 1, 2, wire.pools[0], t), PeerLoad::Applied::ok);
  const auto after = b.rank(req, t);
  EXPECT_NEAR(after.front().retry_after_ms - before.front().retry_after_ms, ranked.front().shed_work_ms / 2.0, 1.0);
  // As much as A adds to its own (B's base is higher: it also counts A's in-flight load).
  EXPECT_NEAR(after.front().retry_after_ms - before.front().retry_after_ms,
              a.rank(req, t).front().retry_after_ms - ranked.front().retry_after_ms, 1.0);
}

}  // namespace
}  // namespace sluice
