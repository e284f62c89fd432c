// PoolHealth (eligibility = active-healthy and not ejected, fed to PoolRouter::set_healthy) and
// the upstream Retry-After reader.
#include <gtest/gtest.h>

#include "core/config.h"
#include "core/picker/policy_factory.h"
#include "core/picker/pool_router.h"
#include "gateway/signals/pool_health.h"
#include "gateway/http/retry_after.h"

namespace sluice {
namespace {

PoolConfig three_endpoints() {
  PoolConfig p;
  p.name = "p";
  p.policy = "least_request";
  for (uint16_t port : {8001, 8002, 8003}) {
    EndpointConfig e;
    e.address = {"127.0.0.1", port};
    e.name = e.address.str();
    p.endpoints.push_back(e);
  }
  p.outlier.consecutive_failures = 3;
  p.outlier.base_ejection = std::chrono::seconds(10);
  p.retry.budget_ratio = 0.2;
  p.retry.budget_min_per_second = 0;
  return p;
}

Time at(int s) { return std::chrono::seconds(s); }

TEST(PoolHealth, ActiveChecksTakeEndpointOutAndBack) {
  PoolConfig cfg = three_endpoints();
  PoolRouter router(cfg, make_policy(cfg, 1));
  PoolHealth h(router);
  h.on_probe(1, false, at(1));
  h.on_probe(1, false, at(2));
  EXPECT_TRUE(router.healthy(1));
  h.on_probe(1, false, at(3));
  EXPECT_FALSE(router.healthy(1));
  h.on_probe(1, true, at(4));
  EXPECT_FALSE(router.healthy(1));
  h.on_probe(1, true, at(5));
  EXPECT_TRUE(router.healthy(1));
}

TEST(PoolHealth, ServerErrorsEjectClientErrorsNever) {
  PoolConfig cfg = three_endpoints();
  PoolRouter router(cfg, make_policy(cfg, 1));
  PoolHealth h(router);
  for (int i = 0; i < 50; ++i) h.on_attempt(0, AttemptResult::client_error, at(1));
  EXPECT_TRUE(router.healthy(0));
  h.on_attempt(0, AttemptResult::server_error, at(1));
  h.on_attempt(0, AttemptResult::connect_error, at(1));
  EXPECT_TRUE(router.healthy(0));
  h.on_attempt(0, AttemptResult::timeout, at(1));
  EXPECT_FALSE(router.healthy(0));
  EXPECT_TRUE(h.ejected(0, at(2)));
  EXPECT_TRUE(h.active_healthy(0));
  h.refresh(at(5));
  EXPECT_FALSE(router.healthy(0));
  h.refresh(at(12));  // 10 s ejection over
  EXPECT_TRUE(router.healthy(0));
}

TEST(PoolHealth, EjectedAndActiveUnhealthyBothNeededBack) {
  PoolConfig cfg = three_endpoints();
  PoolRouter router(cfg, make_policy(cfg, 1));
  PoolHealth h(router);
  for (int i = 0; i < 3; ++i) h.on_attempt(2, AttemptResult::server_error, at(1));
  for (int i = 0; i < 3; ++i) h.on_probe(2, false, at(2));
  EXPECT_FALSE(router.healthy(2));
  h.refresh(at(20));  // ejection over, but the active check still says down
  EXPECT_FALSE(router.healthy(2));
  h.on_probe(2, true, at(21));
  h.on_probe(2, true, at(22));
  EXPECT_TRUE(router.healthy(2));
}

TEST(PoolHealth, RetryBudgetIsAFractionOfRequests) {
  PoolConfig cfg = three_endpoints();
  PoolRouter router(cfg, make_policy(cfg, 1));
  PoolHealth h(router);
  for (int i = 0; i < 100; ++i) h.on_request(at(1));
  int allowed = 0;
  for (int i = 0; i < 100; ++i) allowed += h.try_retry(at(1)) ? 1 : 0;
  EXPECT_EQ(allowed, 20);
}

TEST(RetryAfter, Parses) {
  EXPECT_FALSE(parse_retry_after("", "").has_value());
  EXPECT_EQ(*parse_retry_after("", "2"), std::chrono::seconds(2));
  EXPECT_EQ(*parse_retry_after("250", "2"), std::chrono::milliseconds(250));
  EXPECT_EQ(*parse_retry_after("", " 0.5 "), std::chrono::milliseconds(500));
  EXPECT_EQ(*parse_retry_after("", "Wed, 21 Oct 2015 07:28:00 GMT"), Duration::max());
  EXPECT_EQ(*parse_retry_after("-5", ""), Duration::max());
}

}  // namespace
}  // namespace sluice
