#include "core/metrics/histogram.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "core/metrics/series.h"

namespace sluice {
namespace {

TEST(BucketIndex, LeIsInclusiveAndTheLastBucketIsInf) {
  const BucketBounds b{0.1, 1};
  EXPECT_EQ(bucket_index(b, 0.05), 0u);
  EXPECT_EQ(bucket_index(b, 0.1), 0u);
  EXPECT_EQ(bucket_index(b, 0.5), 1u);
  EXPECT_EQ(bucket_index(b, 1), 1u);
  EXPECT_EQ(bucket_index(b, 7), 2u);
}

TEST(HistogramData, CountsSumAndCumulative) {
  const BucketBounds b{0.1, 1};
  HistogramData h(b);
  for (double v : {0.05, 0.1, 0.5, 7.0}) h.observe(v);
  EXPECT_EQ(h.count, 4u);
  EXPECT_DOUBLE_EQ(h.sum, 7.65);
  EXPECT_EQ(h.cumulative(0), 2u);
  EXPECT_EQ(h.cumulative(1), 3u);
  EXPECT_EQ(h.cumulative(2), 4u);
}

TEST(BucketTables, AscendingAndTheEnginesOwn) {
  for (const BucketBounds* b : {&duration_buckets(), &ttft_buckets(), &itl_buckets(), &e2e_buckets(), &pick_buckets()})
    EXPECT_TRUE(std::is_sorted(b->begin(), b->end()));
  EXPECT_EQ(ttft_buckets().back(), 2560);  // vLLM's tables (model-server-contract.md)
  EXPECT_EQ(itl_buckets().back(), 80);
  EXPECT_EQ(e2e_buckets().back(), 7680);
}

TEST(Histogram, SnapshotMatchesAPlainHistogram) {
  Histogram h(&ttft_buckets());
  HistogramData expect(ttft_buckets());
  for (int i = 0; i < 1000; ++i) {
    const double v = 0.0007 * i;
    h.observe(v);
    expect.observe(v);
  }
  const HistogramData got = h.snapshot();
  EXPECT_EQ(got.counts, expect.counts);
  EXPECT_EQ(got.count, 1000u);
  EXPECT_DOUBLE_EQ(got.sum, expect.sum);
}

// Every worker records into its own shard; the merged snapshot must lose nothing, including with
// more threads than shards (two threads then share a shard's atomics).
TEST(Histogram, ConcurrentObservesSumExactly) {
  for (const size_t threads : {size_t{4}, kMetricShards + 3}) {
    const BucketBounds b{1, 2, 3};
    Histogram h(&b);
    constexpr int kPerThread = 20000;
    std::vector<std::thread> ts;
    for (size_t t = 0; t < threads; ++t)
      ts.emplace_back([&h, t] {
        for (int i = 0; i < kPerThread; ++i) h.observe(double((i + t) % 4) + 0.5);  // 0.5, 1.5, 2.5, 3.5
      });
    for (auto& t : ts) t.join();
    const HistogramData d = h.snapshot();
    EXPECT_EQ(d.count, threads * kPerThread);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(d.counts[i], threads * kPerThread / 4) << i;
    // Each value is a multiple of 0.5 and every partial sum stays far below 2^52: exact in double.
    EXPECT_EQ(d.sum, double(threads * kPerThread / 4) * (0.5 + 1.5 + 2.5 + 3.5));
  }
}

TEST(Counter, ConcurrentIncrementsSumExactly) {
  Counter c;
  constexpr int kThreads = 6, kPerThread = 50000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&c] {
      for (int i = 0; i < kPerThread; ++i) c.inc();
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(c.value(), double(kThreads * kPerThread));
}

TEST(MetricShard, StableWithinAThreadAndInRange) {
  const size_t s = metric_shard();
  EXPECT_LT(s, kMetricShards);
  EXPECT_EQ(metric_shard(), s);
}

}  // namespace
}  // namespace sluice
