// The admission dispatcher (core/admission/dispatcher.h) on its own: a real AdmissionQueue and a
// real PoolRouter, time passed in.
#include "core/admission/dispatcher.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/picker/policy_factory.h"
#include "core/picker/pool_router.h"
#include "../picker/picker_test_util.h"

namespace sluice {
namespace {

PoolConfig pool_of(size_t endpoints, int cap, std::string name = "chat") {
  PoolConfig p = testing::pool_config(endpoints, "least_request", name);
  p.max_in_flight_per_endpoint = cap;
  return p;
}

struct Harness {
  explicit Harness(PoolConfig cfg, FairShareConfig fs = {.enabled = false})
      : config(std::move(cfg)), router(config, make_policy(config, 1)), dispatcher(fs) {}
  // Enqueues a request of `tenant` with cookie `c`.
  void arrive(uintptr_t c, TenantId tenant = 0, int priority = 0) {
    QueueRequest q;
    q.tenant = tenant;
    q.priority = priority;
    q.input_tokens = 100;
    q.cookie = c;
    ASSERT_TRUE(queue.enqueue(q, false, now, rng).ok());
    dispatcher.on_queued(c, config.name, tenant, 1.0, priority, now);
  }
  std::vector<uintptr_t> dispatch() {
    std::vector<uintptr_t> out;
    dispatcher.dispatch(queue, now, [this](std::string_view p) -> const PoolRouter* { return p == config.name ? &router : nullptr; },
                        [&](const Dispatcher::Popped& p) { out.push_back(p.cookie); });
    return out;
  }
  // The popped request takes an endpoint (what the request's own path does after waking).
  void place(uintptr_t c) {
    auto ranked = router.rank(req, now);
    ASSERT_FALSE(ranked.empty());
    guards[c] = router.dispatch(req, ranked.front(), now);
    dispatcher.on_placed(c);
  }
  void finish(uintptr_t c) {
    guards.erase(c);
    dispatcher.on_finished(c, now);
  }

  PoolConfig config;
  PoolRouter router;
  AdmissionQueue queue;
  Dispatcher dispatcher;
  AdmissionRng rng{7};
  Time now{std::chrono::seconds(1)};
  PickRequest req = [] {
    PickRequest r;
    r.model = "m";
    r.text = "hello";
    r.input_tokens = 2;
    r.max_output_tokens = 10;
    return r;
  }();
  std::map<uintptr_t, DispatchGuard> guards;
};

TEST(Dispatcher, ABurstLeavesTheQueueAtOnceUpToTheFreeSlots) {
  // 4 endpoints x 8 slots, idle: 30 arrivals all pop in one pass, before any is placed (issue 14:
  // one pop in flight per pool filled the queue faster than it drained).
  Harness h(pool_of(4, 8));
  for (uintptr_t c = 1; c <= 30; ++c) h.arrive(c);
  EXPECT_EQ(h.dispatch().size(), 30u);
  EXPECT_EQ(h.dispatcher.promised("chat"), 30);
  EXPECT_EQ(h.dispatcher.queued(), 0);
}

TEST(Dispatcher, PromisedSlotsHoldTheHardCap) {
  // 2 endpoints x 2 slots: 4 pop, the fifth waits until one of them finishes.
  Harness h(pool_of(2, 2));
  for (uintptr_t c = 1; c <= 6; ++c) h.arrive(c);
  auto first = h.dispatch();
  ASSERT_EQ(first.size(), 4u);
  EXPECT_TRUE(h.dispatch().empty()) << "promised but unplaced slots count as taken";
  for (auto c : first) h.place(c);
  EXPECT_TRUE(h.dispatch().empty()) << "placed requests hold the router's slots";
  EXPECT_EQ(h.router.occupancy().in_flight, 4);
  h.finish(first[0]);
  auto next = h.dispatch();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0], 5u) << "FIFO within one tenant";
  h.place(next[0]);
  for (const auto& ep : h.router.snapshot(h.now)) EXPECT_LE(ep.load.in_flight, 2);
}

TEST(Dispatcher, AnUnplacedPopThatEndsFreesItsPromise) {
  Harness h(pool_of(1, 1));
  h.arrive(1);
  h.arrive(2);
  ASSERT_EQ(h.dispatch().size(), 1u);
  h.dispatcher.on_finished(1, h.now);  // woke, but its client had left: never placed
  EXPECT_EQ(h.dispatcher.promised("chat"), 0);
  EXPECT_EQ(h.dispatch(), std::vector<uintptr_t>{2});
}

TEST(Dispatcher, LeavingTheQueueIsForgotten) {
  Harness h(pool_of(1, 1));
  h.arrive(1);
  h.arrive(2);
  ASSERT_EQ(h.dispatch().size(), 1u);
  h.place(1);
  h.dispatcher.on_left_queue(2, h.now);
  int64_t depth = 0;
  h.dispatcher.for_each_depth([&](std::string_view, int, int64_t n) { depth += n; });
  EXPECT_EQ(depth, 0);
  EXPECT_EQ(h.dispatcher.queued(), 0);
  h.finish(1);
  EXPECT_TRUE(h.dispatch().empty()) << "entry 2 left the dispatcher; the queue pops it as stale, not to the driver";
}

TEST(Dispatcher, AFullPoolDoesNotBlockAnotherPool) {
  Harness h(pool_of(1, 1, "a"));
  PoolConfig bcfg = pool_of(1, 1, "b");
  PoolRouter b(bcfg, make_policy(bcfg, 2));
  const Dispatcher::RouterOf routers = [&](std::string_view p) -> const PoolRouter* {
    return p == "a" ? &h.router : p == "b" ? &b : nullptr;
  };
  auto arrive = [&](uintptr_t c, const char* pool) {
    QueueRequest q;
    q.cookie = c;
    ASSERT_TRUE(h.queue.enqueue(q, false, h.now, h.rng).ok());
    h.dispatcher.on_queued(c, pool, 0, 1.0, 0, h.now);
  };
  arrive(1, "a");
  arrive(2, "a");
  arrive(3, "b");
  std::vector<uintptr_t> popped;
  h.dispatcher.dispatch(h.queue, h.now, routers, [&](const Dispatcher::Popped& p) { popped.push_back(p.cookie); });
  EXPECT_EQ(popped, (std::vector<uintptr_t>{1, 3}));
}

TEST(Dispatcher, UnhealthyEndpointsGiveNoRoomButAPoolWithNoneAnswersAtOnce) {
  Harness h(pool_of(2, 1));
  h.router.set_healthy(0, false);
  h.arrive(1);
  h.arrive(2);
  auto first = h.dispatch();
  ASSERT_EQ(first.size(), 1u) << "one healthy endpoint x 1 slot";
  h.place(first[0]);
  EXPECT_TRUE(h.dispatch().empty());
  h.router.set_healthy(1, false);  // nothing healthy: waiting cannot help, the request is answered
  EXPECT_EQ(h.dispatch(), std::vector<uintptr_t>{2});
}

TEST(Dispatcher, FairShareKeepsASlotForAQuietTenant) {
  // 1 endpoint x 4 slots, fair shares on: a noisy tenant (0) fills what it may; a quiet tenant (1)
  // that was recently active keeps its reserve, and its request takes it at once.
  Harness h(pool_of(1, 4), FairShareConfig{});
  h.arrive(100, 1);  // the quiet tenant was here a moment ago
  ASSERT_EQ(h.dispatch().size(), 1u);
  h.place(100);
  h.finish(100);
  for (uintptr_t c = 1; c <= 8; ++c) h.arrive(c, 0);
  auto noisy = h.dispatch();
  for (auto c : noisy) h.place(c);
  EXPECT_EQ(noisy.size(), 3u) << "one of 4 slots kept for the quiet tenant's recent demand";
  h.arrive(200, 1);
  EXPECT_EQ(h.dispatch(), std::vector<uintptr_t>{200});
}

TEST(Dispatcher, APoolWithNoHealthyEndpointAnswersAtOnceWithFairShares) {
  // Fair shares of zero slots are zero: without this rule the request waited its whole TTL
  // (seen live: an endpoint failing its health checks, 30 s queue_timeout instead of 503).
  Harness h(pool_of(1, 4), FairShareConfig{});
  h.router.set_healthy(0, false);
  h.arrive(1, 3);
  EXPECT_EQ(h.dispatch(), std::vector<uintptr_t>{1});
}

TEST(Dispatcher, PoolHasRoomCountsTheLargerInFlight) {
  Harness h(pool_of(1, 2));
  EXPECT_TRUE(pool_has_room(h.router, 0, 0, h.now));
  EXPECT_TRUE(pool_has_room(h.router, 1, 0, h.now));
  EXPECT_FALSE(pool_has_room(h.router, 2, 0, h.now));
  EXPECT_FALSE(pool_has_room(h.router, 0, 2, h.now)) << "a share still counting two finishing requests";
}

}  // namespace
}  // namespace sluice
