#include "gateway/http/body_budget.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(BodyBudget, ChargesGrowAndReleaseOnDestruction) {
  BodyBudget b;
  {
    BodyCharge one(b), two(b);
    EXPECT_TRUE(one.grow_to(600, 1000));
    EXPECT_TRUE(one.grow_to(500, 1000));  // shrinking keeps the charge
    EXPECT_EQ(b.buffered(), 600u);
    EXPECT_FALSE(two.grow_to(401, 1000));  // past the limit: refused, nothing charged
    EXPECT_EQ(two.held(), 0u);
    EXPECT_TRUE(two.grow_to(400, 1000));
    EXPECT_EQ(b.buffered(), 1000u);
  }
  EXPECT_EQ(b.buffered(), 0u);
  EXPECT_EQ(b.peak(), 1000u);
}

TEST(BodyBudget, TrimDueOnceAfterAFall) {
  BodyBudget b;
  EXPECT_FALSE(b.trim_due(100));
  {
    BodyCharge c(b);
    ASSERT_TRUE(c.grow_to(500, 1000));
    EXPECT_FALSE(b.trim_due(100));  // still held
  }
  EXPECT_TRUE(b.trim_due(100));
  EXPECT_FALSE(b.trim_due(100));  // once per peak
}

}  // namespace
}  // namespace sluice
