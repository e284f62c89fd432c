#include <gtest/gtest.h>

#include "core/config.h"
#include "core/picker/policy_factory.h"
#include "core/picker/pool_router.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

PoolConfig pool_of(int endpoints) {
  PoolConfig p;
  p.name = "p";
  p.policy = "least_request";
  p.max_in_flight_per_endpoint = 4;
  p.saturation_max_waiting = 10;
  p.saturation_max_kv_usage = 0.9;
  p.scrape.stale_after = 500ms;
  for (int i = 0; i < endpoints; ++i) {
    EndpointConfig e;
    e.address = {"127.0.0.1", static_cast<uint16_t>(9000 + i)};
    e.name = e.address.str();
    p.endpoints.push_back(e);
  }
  return p;
}

// A request of 10 input tokens (what these tests place is its count, not its size).
PickRequest small_request() {
  PickRequest req;
  req.input_tokens = 10;
  return req;
}

EngineSignals signals(Time at, double waiting, double kv) {
  EngineSignals s;
  s.scraped_at = at;
  s.waiting = waiting;
  s.kv_usage = kv;
  return s;
}

TEST(PoolRouterSaturation, FreshSignalsOrTheHardCapSaturate) {
  auto cfg = pool_of(2);
  PoolRouter r(cfg, make_policy(cfg, 1));
  const Time t = 10s;
  // Never scraped: stale, so only the hard cap counts.
  EXPECT_FALSE(r.saturated(t));
  r.update_signals(0, signals(t, 12, 0.2));  // queue over the limit
  r.update_signals(1, signals(t, 0, 0.95));  // KV over the limit
  EXPECT_TRUE(r.saturated(t));
  r.update_signals(1, signals(t, 3, 0.5));
  EXPECT_FALSE(r.saturated(t));
  // Old signals are not trusted: an endpoint that looked saturated 1 s ago is not saturated now.
  r.update_signals(1, signals(t, 50, 0.99));
  EXPECT_TRUE(r.saturated(t));
  EXPECT_FALSE(r.saturated(t + 1s));
  // The hard cap saturates whatever the signals say.
  r.update_signals(0, signals(t + 1s, 0, 0));
  r.update_signals(1, signals(t + 1s, 0, 0));
  const PickRequest req = small_request();
  std::vector<DispatchGuard> held;
  for (int i = 0; i < 8; ++i) {
    auto ranked = r.rank(req, t + 1s);
    held.push_back(r.dispatch(req, ranked.front(), t + 1s));
  }
  EXPECT_TRUE(r.saturated(t + 1s));
  held.pop_back();  // one slot frees
  EXPECT_FALSE(r.saturated(t + 1s));
}

// `n` requests dispatched straight to `endpoint`, their guards kept in `held`.
void hold(PoolRouter& r, size_t endpoint, int n, Time t, std::vector<DispatchGuard>& held) {
  const PickRequest req = small_request();
  for (int i = 0; i < n; ++i) held.push_back(r.dispatch(req, Candidate{endpoint, 0, 0, false}, t));
}

// An endpoint at the hard cap ranks after one the policy found saturated: llmd_default counts stale
// (never scraped) endpoints as saturated and breaks ties at random, so with both in one tier the one
// at the cap came first in about half the rankings (and a request went over the cap).
TEST(PoolRouterSaturation, TheHardCapIsATierBelowThePolicysSaturation) {
  auto cfg = pool_of(2);
  cfg.policy = "llmd_default";
  PoolRouter r(cfg, make_policy(cfg, 7));
  const Time t = 10s;
  std::vector<DispatchGuard> held;
  hold(r, 0, 4, t, held);
  const PickRequest req = small_request();
  for (int k = 0; k < 50; ++k) {
    const auto ranked = r.rank(req, t);
    ASSERT_EQ(ranked.size(), 2u);
    EXPECT_EQ(ranked[0].endpoint, 1u) << "ranking " << k;
    EXPECT_TRUE(ranked[0].saturated);  // the policy's (stale)
    EXPECT_EQ(ranked[1].endpoint, 0u);
    EXPECT_TRUE(ranked[1].saturated);  // the cap's
  }
}

// Between a ranking and its dispatch another worker may fill the first-ranked endpoint: place()
// takes the next one below the cap, under one hold of the pool's lock.
TEST(PoolRouterSaturation, PlaceSkipsAnEndpointFilledSinceTheRanking) {
  auto cfg = pool_of(3);
  PoolRouter r(cfg, make_policy(cfg, 1));
  const Time t = 10s;
  std::vector<DispatchGuard> held;
  hold(r, 0, 3, t, held);
  const std::vector<Candidate> ranked{{0, 3, 0, false}, {1, 2, 0, false}, {2, 1, 0, false}};  // 0 first, 3 in flight
  hold(r, 0, 1, t, held);  // another worker takes 0's last slot
  EXPECT_TRUE(r.any_below_cap(ranked, 0));
  const PickRequest req = small_request();
  size_t i = 0;
  DispatchGuard g = r.place(req, ranked, i, t);
  ASSERT_TRUE(g);
  EXPECT_EQ(i, 1u);
  EXPECT_EQ(g.endpoint(), 1u);
  held.push_back(std::move(g));
  // Fill 1 and 2: nothing below the cap from 1 on.
  while (r.any_below_cap(ranked, 1)) {
    size_t j = 1;
    held.push_back(r.place(req, ranked, j, t));
  }
  EXPECT_EQ(r.occupancy().in_flight, 12);
  // Every one at the cap (only a retry's race gets here): ranked[1] as ranked, i unchanged.
  size_t k = 1;
  DispatchGuard over = r.place(req, ranked, k, t);
  ASSERT_TRUE(over);
  EXPECT_EQ(k, 1u);
  EXPECT_EQ(over.endpoint(), 1u);
  over.release();  // back to exactly the cap on 1
  EXPECT_FALSE(r.any_below_cap(ranked, 1));
  held.pop_back();  // a slot frees on the last one filled
  EXPECT_TRUE(r.any_below_cap(ranked, 1));
}

// A subset of the pool (an Endpoint Picker's subset hint) whose every endpoint is at the cap, with room
// elsewhere: AtCap::refuse places nothing (and counts nothing); below the cap it places as place().
TEST(PoolRouterSaturation, PlaceRefusesASubsetWhoseEveryEndpointIsAtTheCap) {
  auto cfg = pool_of(3);
  PoolRouter r(cfg, make_policy(cfg, 1));
  const Time t = 10s;
  std::vector<DispatchGuard> held;
  hold(r, 0, 4, t, held);
  hold(r, 1, 3, t, held);
  const std::vector<Candidate> subset{{0, 2, 0, false}, {1, 1, 0, false}};  // endpoint 2 left out
  const PickRequest req = small_request();
  size_t i = 0;
  DispatchGuard g = r.place(req, subset, i, t, PoolRouter::AtCap::refuse);
  ASSERT_TRUE(g);  // 1 has a slot
  EXPECT_EQ(i, 1u);
  EXPECT_EQ(g.endpoint(), 1u);
  held.push_back(std::move(g));
  size_t j = 0;
  EXPECT_FALSE(r.place(req, subset, j, t, PoolRouter::AtCap::refuse));
  EXPECT_EQ(j, 0u);
  EXPECT_EQ(r.occupancy().in_flight, 8);  // nothing placed
  EXPECT_EQ(r.in_flight_total(0), 4);
  EXPECT_EQ(r.in_flight_total(1), 4);
  EXPECT_FALSE(r.saturated(t));  // the pool has room (endpoint 2): admission would admit
}

}  // namespace
}  // namespace sluice
