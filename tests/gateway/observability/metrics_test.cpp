#include "gateway/observability/metrics.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace sluice {
namespace {

TEST(MetricsRegistry, RendersCountersWithEscapedLabels) {
  MetricsRegistry r;
  auto& c = r.counter("sluice_requests_total", "Finished requests.", {"pool", "model"});
  c.with({"chat", "a\"b"}).inc();
  c.with({"chat", "a\"b"}).inc(2);
  c.with({"embed", "x"}).inc();
  auto text = r.render();
  EXPECT_NE(text.find("# HELP sluice_requests_total Finished requests.\n# TYPE sluice_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_requests_total{pool=\"chat\",model=\"a\\\"b\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sluice_requests_total{pool=\"embed\",model=\"x\"} 1\n"), std::string::npos);
}

TEST(MetricsRegistry, HistogramBucketsAreCumulative) {
  MetricsRegistry r;
  auto& h = r.histogram("sluice_ttft_seconds", "TTFT.", {"pool"}, {0.1, 1});
  auto& s = h.with({"chat"});
  s.observe(0.05);
  s.observe(0.1);  // le is inclusive
  s.observe(0.5);
  s.observe(7);
  auto text = r.render();
  EXPECT_NE(text.find("sluice_ttft_seconds_bucket{pool=\"chat\",le=\"0.1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("sluice_ttft_seconds_bucket{pool=\"chat\",le=\"1\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_ttft_seconds_bucket{pool=\"chat\",le=\"+Inf\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_ttft_seconds_count{pool=\"chat\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("sluice_ttft_seconds_sum{pool=\"chat\"} 7.65\n"), std::string::npos);
}

TEST(MetricsRegistry, SeriesReferencesAreStableAndCollectorsAppend) {
  MetricsRegistry r;
  auto& g = r.gauge("sluice_queue_depth", "Queue.", {"pool"});
  Gauge* first = &g.with({"a"});
  for (int i = 0; i < 100; ++i) g.with({std::to_string(i)});
  EXPECT_EQ(first, &g.with({"a"}));
  first->set(4);
  r.add_collector([](std::string& out) { out += "extra_series 1\n"; });
  auto text = r.render();
  EXPECT_NE(text.find("sluice_queue_depth{pool=\"a\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("extra_series 1\n"), std::string::npos);
}

// Workers record into per-thread shards; the rendered text is the exact merge.
TEST(MetricsRegistry, ConcurrentObservesSumExactlyAtRender) {
  MetricsRegistry r;
  auto& itl = r.histogram("sluice_itl_seconds", "ITL.", {"pool"}, {0.01, 0.1});
  auto& tokens = r.counter("sluice_tokens_total", "Tokens.", {"pool"});
  Histogram& h = itl.with({"chat"});
  Counter& c = tokens.with({"chat"});
  constexpr int kThreads = 4, kPerThread = 25000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        h.observe(i % 2 ? 0.5 : 0.0078125);  // exact in binary: the merged sum is exact too
        c.inc();
      }
    });
  for (auto& t : ts) t.join();
  const auto text = r.render();
  constexpr int n = kThreads * kPerThread;
  EXPECT_NE(text.find(fmt::format("sluice_itl_seconds_bucket{{pool=\"chat\",le=\"0.01\"}} {}\n", n / 2)), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("sluice_itl_seconds_bucket{{pool=\"chat\",le=\"+Inf\"}} {}\n", n)), std::string::npos);
  EXPECT_NE(text.find(fmt::format("sluice_itl_seconds_count{{pool=\"chat\"}} {}\n", n)), std::string::npos);
  EXPECT_NE(text.find(fmt::format("sluice_itl_seconds_sum{{pool=\"chat\"}} {}\n", (n / 2) * 0.5078125)), std::string::npos);
  EXPECT_NE(text.find(fmt::format("sluice_tokens_total{{pool=\"chat\"}} {}\n", n)), std::string::npos);
}

}  // namespace
}  // namespace sluice
