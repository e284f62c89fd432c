#include "core/openai/response_locator.h"

#include <gtest/gtest.h>

#include "core/admission/admission.h"

namespace sluice {
namespace {

using std::chrono::seconds;

TEST(ResponseLocator, RemembersAndFinds) {
  ResponseLocator loc;
  loc.remember("resp_a", {"chat", "127.0.0.1:8001"}, Time{0});
  loc.remember("resp_b", {"chat", "127.0.0.1:8002"}, Time{0});
  auto a = loc.find("resp_a", seconds(1));
  ASSERT_TRUE(a);
  EXPECT_EQ(a->pool, "chat");
  EXPECT_EQ(a->address, "127.0.0.1:8001");
  EXPECT_EQ(loc.find("resp_b", seconds(1))->address, "127.0.0.1:8002");
  EXPECT_FALSE(loc.find("resp_c", seconds(1)));
}

TEST(ResponseLocator, EntriesExpireAfterTheTtl) {
  ResponseLocator loc({.capacity = 10, .ttl = seconds(10)});
  loc.remember("old", {"p", "a:1"}, Time{0});
  loc.remember("new", {"p", "a:2"}, seconds(5));
  EXPECT_TRUE(loc.find("old", seconds(9)));
  EXPECT_FALSE(loc.find("old", seconds(10)));
  EXPECT_TRUE(loc.find("new", seconds(14)));
  EXPECT_FALSE(loc.find("new", seconds(15)));
  EXPECT_EQ(loc.size(), 0u);
}

TEST(ResponseLocator, BoundedOldestFirst) {
  ResponseLocator loc({.capacity = 3, .ttl = seconds(100)});
  for (int i = 0; i < 5; ++i) loc.remember("r" + std::to_string(i), {"p", "a:" + std::to_string(i)}, seconds(i));
  EXPECT_EQ(loc.size(), 3u);
  EXPECT_EQ(loc.evicted(), 2u);
  EXPECT_FALSE(loc.find("r0", seconds(5)));
  EXPECT_FALSE(loc.find("r1", seconds(5)));
  EXPECT_EQ(loc.find("r4", seconds(5))->address, "a:4");
}

TEST(ResponseLocator, RelearningMovesAnEntryAndRefreshesIt) {
  ResponseLocator loc({.capacity = 2, .ttl = seconds(10)});
  loc.remember("x", {"p", "a:1"}, Time{0});
  loc.remember("y", {"p", "a:2"}, seconds(1));
  loc.remember("x", {"p", "a:3"}, seconds(2));  // x is now the newest
  loc.remember("z", {"p", "a:4"}, seconds(3));  // evicts y, not x
  EXPECT_EQ(loc.find("x", seconds(3))->address, "a:3");
  EXPECT_FALSE(loc.find("y", seconds(3)));
  EXPECT_TRUE(loc.find("x", seconds(11)));  // learned again at 2 s
  EXPECT_EQ(loc.size(), 2u);
}

TEST(ResponseLocator, ZeroCapacityKeepsNothing) {
  ResponseLocator loc({.capacity = 0, .ttl = seconds(10)});
  loc.remember("x", {"p", "a:1"}, Time{0});
  EXPECT_FALSE(loc.find("x", Time{0}));
}

// n > 1: the reservation covers n completions of the bound (an admission detail the Responses
// and n work relies on; here beside the other API-surface tests).
TEST(AdmissionCompletions, ReservesNTimesTheBound) {
  TenantsSpec s;
  TenantSpec a;
  a.name = "acme";
  a.key_sha256_hex = {sha256_hex("sk-acme")};
  a.limits.output_tokens_per_min = 1000;
  s.tenants = {a};
  Admission adm(TenantRegistry::build(s).registry);
  AdmissionRng rng{1};
  const Tenant& t = *adm.authenticate("Bearer sk-acme").tenant;
  AdmissionRequest one{"m", 10, 100, std::nullopt, 10, 1};
  AdmissionRequest four{"m", 10, 100, std::nullopt, 10, 2, 4};
  AdmissionResult r1 = adm.admit(t, one, false, Time{0}, rng);
  ASSERT_TRUE(r1.ok());
  AdmissionResult r4 = adm.admit(t, four, false, Time{0}, rng);
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(r4.request.output_bound().tokens, 100);  // injected per completion
  // 1000 - 100 - 4 x 100 left: 500; a fifth x 100 at n = 6 no longer fits.
  AdmissionRequest six{"m", 10, 100, std::nullopt, 10, 3, 6};
  AdmissionResult r6 = adm.admit(t, six, false, Time{0}, rng);
  EXPECT_FALSE(r6.ok());
}

}  // namespace
}  // namespace sluice
