#include <gtest/gtest.h>

#include <set>

#include "core/picker/cache_aware.h"
#include "core/picker/llmd_default.h"
#include "core/picker/policy_factory.h"
#include "core/picker/power_of_two.h"
#include "picker_test_util.h"

namespace sluice {
namespace {

using testing::FakePool;

TEST(LlmdDefault, WeightedScoresTable) {
  struct Case {
    const char* name;
    void (*setup)(FakePool&);
    bool prefix_on_1;
    size_t want_first;
  } cases[] = {
      {"prefix weight 3 beats equal load", [](FakePool&) {}, true, 1},
      {"queue 2 + kv 2 beat a full prefix match", [](FakePool& p) {
         p.signals[1].waiting = 4; p.signals[1].kv_usage = 0.79; }, true, 0},
      {"lower queue wins without prefix", [](FakePool& p) { p.signals[0].waiting = 2; }, false, 1},
      {"saturated by queue", [](FakePool& p) { p.signals[1].waiting = 5; }, true, 0},
      {"saturated by kv", [](FakePool& p) { p.signals[1].kv_usage = 0.8; }, true, 0},
      {"stale counts as saturated", [](FakePool& p) { p.stale[1] = true; }, true, 0},
  };
  for (const auto& c : cases) {
    LlmdDefaultPolicy p({}, 1);
    FakePool pool(2);
    std::string t(6400, 'p');
    auto req = testing::chat(t);
    if (c.prefix_on_1) p.on_dispatch(req, 1, Time{});
    c.setup(pool);
    auto out = testing::rank(p, pool, req);
    EXPECT_EQ(out[0].endpoint, c.want_first) << c.name;
  }
}

TEST(CacheAware, ModesTable) {
  std::string shared(6400, 'c');
  std::string other(6400, 'd');
  // Balanced, best match above the threshold: the best match.
  {
    CacheAwarePolicy p({});
    FakePool pool(3);
    p.on_dispatch(testing::chat(shared), 2, Time{});
    pool.loads[2].in_flight = 10;
    EXPECT_EQ(testing::rank(p, pool, testing::chat(shared))[0].endpoint, 2u);
  }
  // Imbalanced (70 - 0 > 64 and 70 > 1.5 x 0): least loaded, whatever the match.
  {
    CacheAwarePolicy p({});
    FakePool pool(3);
    p.on_dispatch(testing::chat(shared), 2, Time{});
    pool.loads[2].in_flight = 70;
    pool.loads[0].in_flight = 5;
    EXPECT_EQ(testing::rank(p, pool, testing::chat(shared))[0].endpoint, 1u);
  }
  // No match above the threshold: the smallest tree.
  {
    CacheAwarePolicy p({});
    FakePool pool(3);
    p.on_dispatch(testing::chat(shared), 0, Time{});
    p.on_dispatch(testing::chat(other), 1, Time{});
    EXPECT_EQ(testing::rank(p, pool, testing::chat(std::string(6400, 'e')))[0].endpoint, 2u);
  }
}

TEST(PowerOfTwo, LighterOfTwoFirstAndEveryEndpointRanked) {
  PowerOfTwoPolicy a(42), b(42);
  FakePool pool(8);
  for (size_t i = 0; i < 8; ++i) pool.loads[i].in_flight = static_cast<int64_t>(i);
  for (int i = 0; i < 50; ++i) {
    auto x = testing::rank(a, pool, testing::chat("x"));
    auto y = testing::rank(b, pool, testing::chat("x"));
    ASSERT_EQ(x.size(), 8u);
    EXPECT_EQ(x[0].endpoint, y[0].endpoint);  // deterministic per seed
    EXPECT_LT(pool.loads[x[0].endpoint].in_flight, pool.loads[x[1].endpoint].in_flight);
    std::set<size_t> all;
    for (auto& c : x) all.insert(c.endpoint);
    EXPECT_EQ(all.size(), 8u);
  }
}

TEST(PolicyFactory, EveryNameBuildsAndUnknownParamsAreRejected) {
  PoolConfig pool;
  pool.name = "p";
  for (const auto& n : policy_names()) {
    pool.policy = n;
    auto p = make_policy(pool, 1);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->name(), n);
  }
  pool.policy = "sluice";
  pool.policy_params = {{"beta_ms", 0.05}};
  EXPECT_NO_THROW(make_policy(pool, 1));
  pool.policy_params = {{"beta_msx", 0.05}};
  EXPECT_THROW(make_policy(pool, 1), ConfigError);
  pool.policy = "round_robin";
  pool.policy_params = {{"queue_weight", 1}};
  EXPECT_THROW(make_policy(pool, 1), ConfigError);
  pool.policy = "llmd_default";
  EXPECT_NO_THROW(make_policy(pool, 1));
  pool.policy = "nope";
  EXPECT_THROW(make_policy(pool, 1), ConfigError);
}

}  // namespace
}  // namespace sluice
