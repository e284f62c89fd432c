// Fixed-bucket histograms with vLLM's bucket bounds (model-server-contract.md). Pure data: the
// server renders them in Prometheus text, the fleet simulator reads them directly.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace sluice::engine {

struct Histogram {
  std::vector<double> bounds;    // upper bounds, ascending; +Inf is implicit
  std::vector<uint64_t> counts;  // per bucket, NOT cumulative; size bounds.size() + 1
  double sum = 0.0;
  uint64_t count = 0;

  Histogram() = default;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}

  void observe(double v) {
    const auto it = std::lower_bound(bounds.begin(), bounds.end(), v);  // v <= bound goes in that bucket
    ++counts[static_cast<size_t>(it - bounds.begin())];
    sum += v;
    ++count;
  }
  // Cumulative count for bucket i (le = bounds[i]); i == bounds.size() is +Inf.
  uint64_t cumulative(size_t i) const {
    uint64_t c = 0;
    for (size_t j = 0; j <= i && j < counts.size(); ++j) c += counts[j];
    return c;
  }
};

inline std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
          1,     2.5,   5,    7.5,  10,   20,   40,   80,  160, 640, 2560};
}
inline std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80};
}
inline std::vector<double> e2e_buckets() {
  return {0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680};
}

}  // namespace sluice::engine
