#include <gtest/gtest.h>

#include "bench/load_client.h"

namespace sluice::bench {
namespace {

TEST(BenchUrl, Parses) {
  auto t = std::get<HttpTarget>(parse_http_url("http://127.0.0.1:8080"));
  EXPECT_EQ(t.host, "127.0.0.1");
  EXPECT_EQ(t.port, 8080);
  EXPECT_EQ(t.path_prefix, "");
  auto p = std::get<HttpTarget>(parse_http_url("http://gw.local/api/"));
  EXPECT_EQ(p.host, "gw.local");
  EXPECT_EQ(p.port, 80);
  EXPECT_EQ(p.path_prefix, "/api");
}

TEST(BenchUrl, Errors) {
  EXPECT_TRUE(std::holds_alternative<std::string>(parse_http_url("https://x")));
  EXPECT_TRUE(std::holds_alternative<std::string>(parse_http_url("http://:80")));
  EXPECT_TRUE(std::holds_alternative<std::string>(parse_http_url("http://x:0")));
  EXPECT_TRUE(std::holds_alternative<std::string>(parse_http_url("http://x:99999")));
  EXPECT_TRUE(std::holds_alternative<std::string>(parse_http_url("http://x:8a")));
}

TEST(BenchLoad, UnreachableTargetRecordsFailures) {
  // Port 1 on loopback: connection refused for every request, none hangs.
  auto t = std::get<HttpTarget>(parse_http_url("http://127.0.0.1:1"));
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
