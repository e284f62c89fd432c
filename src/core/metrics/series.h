// Counters and gauges for hot paths shared by every worker thread.
//
// A Counter is sharded: kMetricShards cache-line-aligned cells, each thread adding into the cell
// of its shard (a thread-local index handed out on first use), and the cells are summed only when
// the value is read (at scrape time). Threads normally own a shard alone, so an increment is one
// uncontended relaxed RMW on a line no other worker writes; more threads than shards share cells,
// still exactly (the RMW is atomic), only a little slower. A Gauge is one atomic: `set` has
// last-writer-wins meaning, which shards cannot express, and no gauge is written per token.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>

namespace sluice {

inline constexpr size_t kMetricShards = 16;
inline constexpr size_t kCacheLine = 64;

namespace detail {
size_t assign_metric_shard();  // round-robin over [0, kMetricShards)
}

// This thread's shard, in [0, kMetricShards).
inline size_t metric_shard() {
  constexpr size_t unassigned = ~size_t{0};
  thread_local size_t shard = unassigned;  // constant-initialised: no guard on the fast path
  if (shard == unassigned) [[unlikely]] shard = detail::assign_metric_shard();
  return shard;
}

class Counter {
 public:
  void inc(double v = 1) { cells_[metric_shard()].v.fetch_add(v, std::memory_order_relaxed); }
  // The sum over shards: exact once writers are quiescent, a lower bound while they run.
  double value() const {
    double sum = 0;
    for (const auto& c : cells_) sum += c.v.load(std::memory_order_relaxed);
    return sum;
  }

 private:
  struct alignas(kCacheLine) Cell {
    std::atomic<double> v{0};
  };
  std::array<Cell, kMetricShards> cells_;
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

}  // namespace sluice
