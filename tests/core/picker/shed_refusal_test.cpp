#include "core/picker/shed_refusal.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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

}  // namespace
}  // namespace sluice
