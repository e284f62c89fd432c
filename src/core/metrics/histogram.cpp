#include "core/metrics/histogram.h"

#include <algorithm>
#include <bit>

namespace sluice {

namespace detail {
size_t assign_metric_shard() {
  static std::atomic<size_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) % kMetricShards;
}
}  // namespace detail

const BucketBounds& duration_buckets() {
  static const BucketBounds b{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                              1, 2.5, 5, 10, 30, 60, 120, 300, 600};
  return b;
}

const BucketBounds& ttft_buckets() {
  static const BucketBounds b{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                              1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560};
  return b;
}

const BucketBounds& itl_buckets() {
  static const BucketBounds b{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                              1, 2.5, 5, 7.5, 10, 20, 40, 80};
  return b;
}

const BucketBounds& e2e_buckets() {
  static const BucketBounds b{0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60,
                              120, 240, 480, 960, 1920, 7680};
  return b;
}

const BucketBounds& overhead_buckets() {
  // Parse and pick are microseconds; a queue wait or an engine's first byte, seconds.
  static const BucketBounds b{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3,
                              2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 0.25, 1, 2.5, 10};
  return b;
}

const BucketBounds& pick_buckets() {
  static const BucketBounds b{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2};
  return b;
}

const BucketBounds& ratio_buckets() {
  static const BucketBounds b{0.25, 0.5, 0.67, 0.8, 0.9, 0.95, 1.0, 1.05, 1.1, 1.25, 1.5, 2, 3, 5, 10};
  return b;
}

size_t bucket_index(const BucketBounds& bounds, double v) {
  return static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
}

uint64_t HistogramData::cumulative(size_t i) const {
  uint64_t c = 0;
  for (size_t j = 0; j <= i && j < counts.size(); ++j) c += counts[j];
  return c;
}

Histogram::Histogram(const BucketBounds* bounds)
    : bounds_(bounds),
      stride_((bounds->size() + 2 + kWordsPerLine - 1) / kWordsPerLine * kWordsPerLine),
      lines_(std::make_unique<Line[]>(kMetricShards * stride_ / kWordsPerLine)) {}  // zeroed: 0 is also 0.0's bits

void Histogram::observe(double v) {
  const size_t s = metric_shard();
  word(s, 1 + bucket_index(*bounds_, v)).fetch_add(1, std::memory_order_relaxed);
  auto& sum = word(s, 0);
  uint64_t old = sum.load(std::memory_order_relaxed);
  while (!sum.compare_exchange_weak(old, std::bit_cast<uint64_t>(std::bit_cast<double>(old) + v),
                                    std::memory_order_relaxed)) {
  }
}

HistogramData Histogram::snapshot() const {
  HistogramData d(*bounds_);
  for (size_t s = 0; s < kMetricShards; ++s) {
    d.sum += std::bit_cast<double>(word(s, 0).load(std::memory_order_relaxed));
    for (size_t i = 0; i < d.counts.size(); ++i) d.counts[i] += word(s, 1 + i).load(std::memory_order_relaxed);
  }
  for (uint64_t c : d.counts) d.count += c;
  return d;
}

}  // namespace sluice
