#include "core/admission/concurrency.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(AdmissionConcurrency, SlotsAreBoundedAndReturnedByTheGuard) {
  TenantsSpec s;
  TenantSpec t;
  t.name = "acme";
  t.limits.max_concurrent = 2;
  TenantSpec u;
  u.name = "open";
  s.tenants = {t, u};
  auto reg = TenantRegistry::build(s).registry;
  ASSERT_TRUE(reg);
  AdmissionCounters counters;
  AdmissionRng rng(3);
  ConcurrencyLimiter limiter(reg, &counters);
  {
    SlotResult a = limiter.try_acquire(reg->tenant(0), rng);
    SlotResult b = limiter.try_acquire(reg->tenant(0), rng);
    ASSERT_TRUE(a.ok() && b.ok());
    SlotResult c = limiter.try_acquire(reg->tenant(0), rng);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.denial->error.status, 429);
    EXPECT_EQ(c.denial->reason, RejectReason::rate_limit);
    EXPECT_GE(c.denial->retry_after, std::chrono::seconds(1));
    EXPECT_NE(c.denial->error.message.find("concurrent requests: Limit 2, Used 2"), std::string::npos)
        << c.denial->error.message;
    EXPECT_EQ(limiter.in_flight(0), 2);
    // Another tenant is unaffected and unlimited.
    std::vector<ConcurrencySlot> many;
    for (int i = 0; i < 100; ++i) many.push_back(std::move(limiter.try_acquire(reg->tenant(1), rng).slot));
    EXPECT_EQ(limiter.in_flight(1), 100);
    ConcurrencySlot moved = std::move(a.slot);
    EXPECT_FALSE(a.slot.valid());
    moved.release();
    EXPECT_EQ(limiter.in_flight(0), 1);
    EXPECT_TRUE(limiter.try_acquire(reg->tenant(0), rng).ok());  // released again at once
  }
  EXPECT_EQ(limiter.total_in_flight(), 0);
  EXPECT_EQ(counters.snapshot().in_flight, 0);
}

}  // namespace
}  // namespace sluice
