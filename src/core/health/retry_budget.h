// A pool-wide retry budget (after Finagle's RetryBudget), so a failing fleet is not hammered by
// retries: within a sliding window (default 10 s, kept as 10 one-second buckets so memory is
// constant), retries may be at most `ratio` (default 0.2) of requests plus `min_per_second`
// (default 3) per second, so a quiet pool can still retry. Not thread-safe: the gateway keeps one per
// pool under the pool's lock.
#pragma once
#include <array>
#include <cstdint>

#include "core/time.h"

namespace sluice {

struct RetryBudgetConfig {
  double ratio = 0.2;
  double min_per_second = 3;
};

class RetryBudget {
 public:
  static constexpr int kBuckets = 10;  // one second each

  explicit RetryBudget(RetryBudgetConfig cfg = {}) : cfg_(cfg) {}

  void on_request(Time now) { bucket(now).requests += 1; }

  // True (and the retry is counted) when the budget allows one more retry now.
  bool try_retry(Time now) {
    bucket(now);  // expire old buckets
    int64_t requests = 0, retries = 0;
    for (const auto& b : buckets_) {
      requests += b.requests;
      retries += b.retries;
    }
    const double allowed = cfg_.ratio * static_cast<double>(requests) + cfg_.min_per_second * kBuckets;
    if (static_cast<double>(retries + 1) > allowed) return false;
    bucket(now).retries += 1;
    return true;
  }

 private:
  struct Bucket {
    int64_t second = -1;
    int64_t requests = 0;
    int64_t retries = 0;
  };
  Bucket& bucket(Time now) {
    const int64_t sec = std::chrono::duration_cast<std::chrono::seconds>(now).count();
    for (auto& b : buckets_)
      if (b.second >= 0 && sec - b.second >= kBuckets) b = Bucket{};
    auto& b = buckets_[static_cast<size_t>(sec % kBuckets)];
    if (b.second != sec) b = Bucket{sec, 0, 0};
    return b;
  }
  RetryBudgetConfig cfg_;
  std::array<Bucket, kBuckets> buckets_{};
};

}  // namespace sluice
