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
  PickRequest req;
  req.input_tokens = 10;
  std::vector<DispatchGuard> held;
  for (int i = 0; i < 8; ++i) {
    auto ranked = r.rank(req, t + 1s);
    held.push_back(r.dispatch(req, ranked.front(), t + 1s));
  }
  EXPECT_TRUE(r.saturated(t + 1s));
  held.pop_back();  // one slot frees
  EXPECT_FALSE(r.saturated(t + 1s));
}

}  // namespace
}  // namespace sluice
