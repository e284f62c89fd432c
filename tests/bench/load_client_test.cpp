#include <gtest/gtest.h>

#include "bench/load_client.h"

namespace sluice::bench {
namespace {

TEST(BenchUrl, Parses) {
  auto t = std::get<HttpTarget>(http_target("http://127.0.0.1:8080"));
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(t.port, 8080);
  EXPECT_EQ(t.path_prefix, "");
  auto p = std::get<HttpTarget>(http_target("http://gw.local/api/"));
  EXPECT_EQ(p.host, "gw.local");
  EXPECT_EQ(p.port, 80);
  EXPECT_EQ(p.path_prefix, "/api");
  auto v6 = std::get<HttpTarget>(http_target("http://[::1]:9000/"));
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.port, 9000);
  EXPECT_EQ(v6.path_prefix, "");
}

TEST(BenchUrl, Errors) {
  EXPECT_TRUE(std::holds_alternative<std::string>(http_target("https://x")));
  EXPECT_TRUE(std::holds_alternative<std::string>(http_target("http://:80")));
  EXPECT_TRUE(std::holds_alternative<std::string>(http_target("http://x:0")));
  EXPECT_TRUE(std::holds_alternative<std::string>(http_target("http://x:99999")));
  EXPECT_TRUE(std::holds_alternative<std::string>(http_target("http://x:8a")));
  EXPECT_TRUE(std::holds_alternative<std::string>(http_target("127.0.0.1:8080")));
}

TEST(BenchLoad, UnreachableTargetRecordsFailures) {
  // Port 1 on loopback: connection refused for every request, none hangs.
  auto t = std::get<HttpTarget>(http_target("http://127.0.0.1:1"));
  workload::ArrivalSpec a;
  a.rate = 1000;
  auto wl = std::get<0>(workload::make_workload("shared_prefix:small", a, workload::WorkloadLimits{5, {}}, 1));
  LoadOptions opt;
  opt.target = t;
  opt.timeout = std::chrono::seconds(5);
  auto r = run_load(*wl, opt);
  ASSERT_EQ(r.records.size(), 5u);
  for (const auto& rec : r.records) {
    EXPECT_EQ(rec.status, 0);
    EXPECT_FALSE(rec.ttft);
  }
}

}  // namespace
}  // namespace sluice::bench
