// The one fixed-bucket histogram of the tree: its bucket tables, its values (HistogramData) and a
// sharded recorder for hot paths (Histogram). The gateway records into Histograms and renders
// their snapshots; the engine simulator, single-threaded, records into HistogramData directly.
// Both render through PromWriter::histogram (core/prom_writer.h).
//
// Buckets are Prometheus's: a value v goes into the first bucket whose upper bound is >= v (le is
// inclusive), the last bucket is +Inf; counts are kept per bucket and made cumulative on output.
//
// Histogram: kMetricShards shards (see series.h), each a cache-line-aligned block holding its sum
// and its per-bucket counts. observe() touches only its thread's shard: one relaxed fetch_add on
// the bucket and one relaxed compare-exchange on the sum (uncontended unless more threads than
// shards). snapshot() merges the shards; the count is the sum of the buckets, so a scrape that
// races observes may see a sum a few observations behind its buckets, never a count that
// disagrees with the +Inf bucket.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/metrics/series.h"

namespace sluice {

using BucketBounds = std::vector<double>;  // upper bounds, ascending; +Inf is implicit

// The bucket tables (seconds). TTFT, ITL and e2e are vLLM's (model-server-contract.md), so the
// gateway's series and the simulated engines' line up bucket for bucket.
const BucketBounds& duration_buckets();  // gateway request duration: 0.5 ms .. 600 s
const BucketBounds& ttft_buckets();
const BucketBounds& itl_buckets();
const BucketBounds& e2e_buckets();   // engine e2e and queue time
const BucketBounds& pick_buckets();
const BucketBounds& ratio_buckets();  // a measured value over its estimate: 0.25 .. 10, finest near 1  // picker decision time: 1 us .. 10 ms
const BucketBounds& overhead_buckets();  // the gateway's own cost by phase: 1 us .. 10 s

// Index of the bucket `v` falls in: bounds.size() is +Inf.
size_t bucket_index(const BucketBounds& bounds, double v);

struct HistogramData {
  const BucketBounds* bounds = nullptr;  // not owned: a table above or a metric family's bounds
  std::vector<uint64_t> counts;          // per bucket, NOT cumulative; size bounds->size() + 1
  double sum = 0.0;
  uint64_t count = 0;

  HistogramData() = default;
  explicit HistogramData(const BucketBounds& b) : bounds(&b), counts(b.size() + 1, 0) {}

  void observe(double v) {
    ++counts[bucket_index(*bounds, v)];
    sum += v;
    ++count;
  }
  // Cumulative count for bucket i (le = (*bounds)[i]); i == bounds->size() is +Inf.
  uint64_t cumulative(size_t i) const;
};

class Histogram {
 public:
  explicit Histogram(const BucketBounds* bounds);  // `bounds` must outlive the histogram
  void observe(double v);
  HistogramData snapshot() const;
  const BucketBounds& bounds() const { return *bounds_; }

 private:
  struct alignas(kCacheLine) Line {
    std::atomic<uint64_t> word[kCacheLine / sizeof(uint64_t)];
  };
  static constexpr size_t kWordsPerLine = kCacheLine / sizeof(uint64_t);
  // Shard s occupies words [s * stride_, (s + 1) * stride_): word 0 the sum (double bits), words
  // 1..bounds.size()+1 the bucket counts; stride_ is a whole number of cache lines.
  std::atomic<uint64_t>& word(size_t shard, size_t i) const {
    const size_t w = shard * stride_ + i;
    return lines_[w / kWordsPerLine].word[w % kWordsPerLine];
  }

  const BucketBounds* bounds_;
  size_t stride_;
  std::unique_ptr<Line[]> lines_;
};

}  // namespace sluice
