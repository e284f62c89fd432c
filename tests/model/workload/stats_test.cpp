#include <gtest/gtest.h>

#include <simdjson.h>

#include "model/workload/stats.h"

namespace sluice::workload {
namespace {

RequestRecord rec(double arrival, double ttft, double e2e, int64_t out, int status = 200,
                  std::string tenant = "default") {
  RequestRecord r;
  r.tenant = std::move(tenant);
  r.status = status;
  r.arrival = from_seconds(arrival);
  if (ttft >= 0) r.ttft = from_seconds(ttft);
  r.e2e = from_seconds(e2e);
  r.input_tokens = 100;
  r.output_tokens = out;
  return r;
}

TEST(Stats, Percentiles) {
  std::vector<double> v;
  for (int i = 1; i <= 101; ++i) v.push_back(i);
  EXPECT_DOUBLE_EQ(percentile(v, 0.5), 51);
  EXPECT_DOUBLE_EQ(percentile(v, 0.9), 91);
  EXPECT_DOUBLE_EQ(percentile(v, 0.99), 100);
  EXPECT_DOUBLE_EQ(percentile({1, 2}, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(percentile({}, 0.5), 0);
  auto d = distribution_of({3, 1, 2});
  EXPECT_EQ(d.n, 3u);
  EXPECT_DOUBLE_EQ(d.mean, 2);
  EXPECT_DOUBLE_EQ(d.p50, 2);
  EXPECT_DOUBLE_EQ(d.max, 3);
}

TEST(Stats, ThroughputItlAndGoodput) {
  std::vector<RequestRecord> rs = {
      rec(0, 0.2, 1.2, 11),           // itl 0.1 s -> misses the 50 ms ITL SLO
      rec(1, 0.1, 0.6, 11),           // itl 0.05 -> meets
      rec(2, 1.5, 2.0, 11),           // ttft 1.5 -> misses
      rec(3, 0.1, 0.1, 1),            // single token: ITL not checked -> meets
      rec(3.5, -1, 0.5, 0, 429),      // rejected
      rec(3.5, -1, 0.5, 0, 0),        // connection error
  };
  auto f = summarize(rs, SloSpec{});
  EXPECT_EQ(f.requests, 6u);
  EXPECT_EQ(f.ok, 4u);
  EXPECT_DOUBLE_EQ(f.span_s, 4.0);  // first arrival 0 .. last completion 2 + 2.0 = 3.5 + 0.5 = 4
  EXPECT_EQ(f.by_status.at(429), 1u);
  EXPECT_EQ(f.by_status.at(0), 1u);
  EXPECT_EQ(f.by_status.at(200), 4u);
  EXPECT_NEAR(f.reject_rate, 2.0 / 6, 1e-12);
  EXPECT_EQ(f.itl.n, 3u);
  EXPECT_NEAR(f.itl.p50, 0.05, 1e-9);  // itls 0.1, 0.05, 0.05
  EXPECT_NEAR(f.itl.p90, 0.09, 1e-9);
  EXPECT_NEAR(f.itl.mean, (0.1 + 0.05 + 0.05) / 3, 1e-9);
  EXPECT_EQ(f.ttft.n, 4u);
  EXPECT_NEAR(f.slo_attainment, 2.0 / 6, 1e-12);
  EXPECT_NEAR(f.goodput_rps, 2.0 / f.span_s, 1e-12);
  EXPECT_NEAR(f.output_tokens_per_s, 34.0 / f.span_s, 1e-12);
  EXPECT_NEAR(f.requests_per_s, 4.0 / f.span_s, 1e-12);
}

TEST(Stats, ConfigurableSlo) {
  std::vector<RequestRecord> rs = {rec(0, 1.5, 2.0, 11)};
  SloSpec loose;
  loose.ttft = from_seconds(2);
  EXPECT_EQ(summarize(rs, SloSpec{}).slo_attainment, 0.0);
  EXPECT_EQ(summarize(rs, loose).slo_attainment, 1.0);
}

TEST(Stats, PerTenant) {
  std::vector<RequestRecord> rs = {rec(0, 0.1, 1, 10, 200, "a"), rec(0, 0.3, 1, 10, 200, "a"),
                                   rec(0, 2.0, 3, 10, 200, "b"), rec(0, -1, 0.1, 0, 429, "b")};
  auto f = summarize(rs, SloSpec{});
  ASSERT_EQ(f.tenants.size(), 2u);
  EXPECT_EQ(f.tenants["a"].ok, 2u);
  EXPECT_EQ(f.tenants["b"].requests, 2u);
  EXPECT_EQ(f.tenants["b"].ok, 1u);
  EXPECT_NEAR(f.tenants["a"].ttft.p50, 0.2, 1e-9);
  EXPECT_NEAR(f.tenants["b"].goodput_rps, 0.0, 1e-12);
  EXPECT_NE(tenant_table(f).find("a"), std::string::npos);
}

TEST(Stats, JsonIsValidAndTableHasRows) {
  std::vector<RequestRecord> rs = {rec(0, 0.1, 1, 10, 200, "t\"x"), rec(1, -1, 0.1, 0, 503)};
  auto f = summarize(rs, SloSpec{});
  f.labels = {{"policy", "sluice"}, {"rate", "4"}};
  f.prefix_hit_rate = 0.75;
  auto json = to_json(f);
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  ASSERT_EQ(p.parse(json).get(doc), simdjson::SUCCESS) << json;
  EXPECT_EQ(std::string_view(doc["labels"]["policy"]), "sluice");
  EXPECT_DOUBLE_EQ(double(doc["prefix_hit_rate"]), 0.75);
  EXPECT_EQ(int64_t(doc["by_status"]["503"]), 1);
  EXPECT_DOUBLE_EQ(double(doc["ttft_s"]["p50"]), 0.1);
  std::vector<Figures> rows = {f, f};
  auto table = to_table(rows);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 3);
  EXPECT_NE(table.find("policy"), std::string::npos);
  EXPECT_NE(table.find("75.0%"), std::string::npos);
}

TEST(Stats, Empty) {
  auto f = summarize({}, SloSpec{});
  EXPECT_EQ(f.requests, 0u);
  EXPECT_EQ(f.ttft.n, 0u);
}

}  // namespace
}  // namespace sluice::workload
