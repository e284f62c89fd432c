#include "core/admission/admission_queue.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

QueueRequest req(TenantId t, int priority, int64_t input = 10, size_t bytes = 100, uintptr_t cookie = 0) {
  return QueueRequest{t, 1.0, priority, input, bytes, cookie};
}

class AdmissionQueueTest : public ::testing::Test {
 protected:
  AdmissionRng rng{7};
  AdmissionCounters counters;
};

TEST_F(AdmissionQueueTest, StrictPriorityBandsThenFcfsWithinTenant) {
  AdmissionQueue q({}, &counters);
  const std::tuple<TenantId, int, uintptr_t> arrivals[] = {
      {0, 0, 1}, {0, -1, 2}, {0, 5, 3}, {0, 0, 4}, {0, 5, 5}, {0, 1, 6},
  };
  for (auto [t, p, cookie] : arrivals) ASSERT_TRUE(q.enqueue(req(t, p, 10, 100, cookie), false, Time{0}, rng).ok());
  std::vector<uintptr_t> order;
  while (auto d = q.pop_next(Time{0})) order.push_back(d->cookie);
  EXPECT_EQ(order, (std::vector<uintptr_t>{3, 5, 6, 1, 4, 2}));
  EXPECT_EQ(counters.snapshot().dispatched, 6u);
  EXPECT_EQ(q.size(), 0u);
}

TEST_F(AdmissionQueueTest, VtcBetweenTenantsInABand) {
  AdmissionQueue q;
  // Heavy tenant 0 queued first with big prompts; light tenant 1 right after with small ones.
  for (uintptr_t i = 0; i < 3; ++i) ASSERT_TRUE(q.enqueue(req(0, 0, 1000, 100, 10 + i), true, Time{0}, rng).ok());
  for (uintptr_t i = 0; i < 3; ++i) ASSERT_TRUE(q.enqueue(req(1, 0, 100, 100, 20 + i), true, Time{0}, rng).ok());
  std::vector<uintptr_t> order;
  while (auto d = q.pop_next(Time{0})) order.push_back(d->cookie);
  // 0 (tie, id) -> counter 1000; then tenant 1 until it passes 1000 (its 3 requests = 300).
  EXPECT_EQ(order, (std::vector<uintptr_t>{10, 20, 21, 22, 11, 12}));
}

TEST_F(AdmissionQueueTest, OutputChargesSteerDispatch) {
  for (bool charge : {false, true}) {
    SCOPED_TRACE(charge);
    AdmissionQueue q;
    ASSERT_TRUE(q.enqueue(req(0, 0, 10, 100, 1), true, Time{0}, rng).ok());
    ASSERT_TRUE(q.enqueue(req(1, 0, 10, 100, 2), true, Time{0}, rng).ok());
    ASSERT_TRUE(q.enqueue(req(0, 0, 10, 100, 3), true, Time{0}, rng).ok());
    ASSERT_TRUE(q.enqueue(req(1, 0, 10, 100, 4), true, Time{0}, rng).ok());
    ASSERT_EQ(q.pop_next(Time{0})->cookie, 1u);
    if (charge) q.charge_output(0, 0, 500);  // tenant 0's running request streams a long answer
    std::vector<uintptr_t> order;
    while (auto d = q.pop_next(Time{0})) order.push_back(d->cookie);
    const std::vector<uintptr_t> want = charge ? std::vector<uintptr_t>{2, 4, 3} : std::vector<uintptr_t>{2, 3, 4};
    EXPECT_EQ(order, want);
    EXPECT_DOUBLE_EQ(q.vtc_counter(0, 0), charge ? 10 + 1000 + 10 : 20);
  }
}

TEST_F(AdmissionQueueTest, NewlyBackloggedTenantIsLiftedNotCredited) {
  AdmissionQueue q;
  // Tenant 0 is served alone for a while; tenant 1 was idle and must not bank that time.
  for (uintptr_t i = 0; i < 5; ++i) ASSERT_TRUE(q.enqueue(req(0, 0, 100, 100, i), true, Time{0}, rng).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(q.pop_next(Time{0}).has_value());  // counter 300
  ASSERT_TRUE(q.enqueue(req(1, 0, 100, 100, 10), true, Time{0}, rng).ok());
  ASSERT_TRUE(q.enqueue(req(1, 0, 100, 100, 11), true, Time{0}, rng).ok());
  EXPECT_DOUBLE_EQ(q.vtc_counter(0, 1), 300);
  std::vector<uintptr_t> order;
  while (auto d = q.pop_next(Time{0})) order.push_back(d->cookie);
  // Alternation (ties go to the smaller id), not three of tenant 1 in a row.
  EXPECT_EQ(order, (std::vector<uintptr_t>{3, 10, 4, 11}));
}

TEST_F(AdmissionQueueTest, SheddableRefusedOnlyWhenSaturated) {
  AdmissionQueue q({}, &counters);
  EnqueueResult shed = q.enqueue(req(0, -1), true, Time{0}, rng);
  ASSERT_FALSE(shed.ok());
  EXPECT_EQ(shed.denial->reason, RejectReason::shed);
  EXPECT_EQ(shed.denial->error.status, 429);
  EXPECT_GE(shed.denial->retry_after, seconds(1));
  EXPECT_TRUE(q.enqueue(req(0, -1), false, Time{0}, rng).ok());
  EXPECT_TRUE(q.enqueue(req(0, 0), true, Time{0}, rng).ok());  // priority 0 is not sheddable
  EXPECT_EQ(counters.snapshot().rejected_for(RejectReason::shed), 1u);
}

TEST_F(AdmissionQueueTest, BoundedInRequestsAndBytes) {
  struct Case {
    const char* name;
    size_t max_requests, max_bytes;
    std::vector<size_t> sizes;
    std::vector<bool> admitted;
  };
  const Case cases[] = {
      {"requests", 3, 1 << 20, {10, 10, 10, 10, 10}, {true, true, true, false, false}},
      {"bytes", 100, 1000, {400, 400, 400, 100, 101}, {true, true, false, true, false}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    QueueConfig cfg;
    cfg.max_requests = c.max_requests;
    cfg.max_bytes = c.max_bytes;
    AdmissionCounters local;
    AdmissionQueue q(cfg, &local);
    for (size_t i = 0; i < c.sizes.size(); ++i) {
      EnqueueResult r = q.enqueue(req(0, 0, 1, c.sizes[i]), true, Time{0}, rng);
      EXPECT_EQ(r.ok(), c.admitted[i]) << i;
      if (!r.ok()) {
        EXPECT_EQ(r.denial->reason, RejectReason::queue_full);
        EXPECT_EQ(r.denial->error.status, 429);
      }
    }
    EXPECT_LE(q.bytes(), c.max_bytes);
    EXPECT_LE(q.size(), c.max_requests);
    EXPECT_EQ(local.snapshot().rejected_for(RejectReason::queue_full), 2u);
    // Space frees when an entry leaves.
    ASSERT_TRUE(q.pop_next(Time{0}).has_value());
    EXPECT_TRUE(q.enqueue(req(0, 0, 1, 10), true, Time{0}, rng).ok());
  }
}

TEST_F(AdmissionQueueTest, TtlPerPriorityExpiresWith503) {
  QueueConfig cfg;
  cfg.default_ttl = seconds(10);
  cfg.ttl_by_priority = {{5, seconds(2)}};
  AdmissionQueue q(cfg, &counters);
  EnqueueResult hi = q.enqueue(req(0, 5, 10, 100, 1), true, Time{0}, rng);
  EnqueueResult lo = q.enqueue(req(1, 0, 10, 100, 2), true, Time{0}, rng);
  ASSERT_TRUE(hi.ok() && lo.ok());
  EXPECT_EQ(hi.deadline, Time{seconds(2)});
  EXPECT_EQ(lo.deadline, Time{seconds(10)});
  EXPECT_EQ(q.next_deadline(), Time{seconds(2)});
  EXPECT_TRUE(q.expire(Time{seconds(2)} - Duration(1), rng).empty());
  auto gone = q.expire(Time{seconds(3)}, rng);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].cookie, 1u);
  EXPECT_EQ(gone[0].waited, seconds(3));
  EXPECT_EQ(gone[0].denial.reason, RejectReason::queue_timeout);
  EXPECT_EQ(gone[0].denial.error.status, 503);
  EXPECT_GE(gone[0].denial.retry_after, seconds(1));
  EXPECT_EQ(q.size(), 1u);
  // pop_next never hands out an expired entry; it is reported by the next expire().
  EXPECT_FALSE(q.pop_next(Time{seconds(11)}).has_value());
  EXPECT_EQ(q.next_deadline(), Time::min());
  gone = q.expire(Time{seconds(11)}, rng);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].cookie, 2u);
  EXPECT_EQ(q.size(), 0u);
  EXPECT_FALSE(q.next_deadline().has_value());
  EXPECT_EQ(counters.snapshot().rejected_for(RejectReason::queue_timeout), 2u);
}

TEST_F(AdmissionQueueTest, RemoveAndPlacementGuard) {
  AdmissionQueue q({}, &counters);
  EnqueueResult a = q.enqueue(req(0, 0, 10, 100, 1), true, Time{0}, rng);
  EnqueueResult b = q.enqueue(req(0, 0, 10, 100, 2), true, Time{0}, rng);
  {
    QueuePlacement pa(q, a.ticket);
    QueuePlacement pb(q, b.ticket);
    EXPECT_EQ(q.size(), 2u);
    auto d = q.pop_next(Time{0});
    ASSERT_EQ(d->ticket, a.ticket);
    pa.disarm();
  }  // b's client left while queued
  EXPECT_EQ(q.size(), 0u);
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_FALSE(q.remove(b.ticket));  // already gone
  EXPECT_EQ(counters.snapshot().cancelled_queued, 1u);
  EXPECT_FALSE(q.pop_next(Time{0}).has_value());
}

TEST_F(AdmissionQueueTest, BandDepths) {
  AdmissionQueue q;
  ASSERT_TRUE(q.enqueue(req(0, 0, 1, 10), true, Time{0}, rng).ok());
  ASSERT_TRUE(q.enqueue(req(1, 0, 1, 20), true, Time{0}, rng).ok());
  ASSERT_TRUE(q.enqueue(req(0, 3, 1, 5), true, Time{0}, rng).ok());
  auto depths = q.band_depths();
  ASSERT_EQ(depths.size(), 2u);
  EXPECT_EQ(depths[0].priority, 3);
  EXPECT_EQ(depths[0].requests, 1u);
  EXPECT_EQ(depths[1].priority, 0);
  EXPECT_EQ(depths[1].requests, 2u);
  EXPECT_EQ(depths[1].bytes, 30u);
}

TEST(EffectivePriority, RequestsCanOnlyLower) {
  EXPECT_EQ(effective_priority(3, std::nullopt), 3);
  EXPECT_EQ(effective_priority(3, 1), 1);
  EXPECT_EQ(effective_priority(3, 9), 3);
  EXPECT_EQ(effective_priority(0, -2), -2);
  EXPECT_EQ(effective_priority(0, INT64_MIN), INT32_MIN);
}

}  // namespace
}  // namespace sluice
