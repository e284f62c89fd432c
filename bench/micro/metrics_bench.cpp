// Cost of recording one observation on the per-token path (issue 12: nothing on it takes a lock or
// writes a cache line shared across workers). Every streamed token observes the gateway's ITL
// histogram; every finished request increments counters. "SingleAtomic" is the gateway's previous
// design kept here for comparison (one shared atomic per bucket, one for the sum, one for the
// count: three contended RMWs per observe when workers stream at once); "Sharded" is
// core/metrics (a per-thread shard: one bucket RMW and one sum CAS, on a line no other worker
// writes). Run with two threads to see the contention the sharding removes:
//
//   build-release/sluice_microbench --benchmark_filter='Observe|Inc' --benchmark_repetitions=3 \
//       --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "core/metrics/histogram.h"
#include "core/metrics/series.h"

namespace sluice {
namespace {

// The gateway's Histogram and Counter before sharding, verbatim in behaviour.
class SingleAtomicHistogram {
 public:
  explicit SingleAtomicHistogram(const std::vector<double>* bounds)
      : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds->size() + 1]) {
    for (size_t i = 0; i <= bounds_->size(); ++i) buckets_[i].store(0);
  }
  void observe(double v) {
    size_t i = std::lower_bound(bounds_->begin(), bounds_->end(), v) - bounds_->begin();
    buckets_[i].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
    count_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t count() const { return count_.load(); }

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

class SingleAtomicCounter {
 public:
  void inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Inter-token gaps spread over the low ITL buckets, as a stream at 20-80 ms per token gives.
double itl_sample(uint64_t i) { return 0.02 + 0.0001 * double(i % 600); }

template <class H>
void observe_loop(benchmark::State& state, H& h) {
  uint64_t i = uint64_t(state.thread_index()) * 7919;
  for (auto _ : state) {
    h.observe(itl_sample(i++));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_ObserveSingleAtomic(benchmark::State& state) {
  static SingleAtomicHistogram h(&itl_buckets());
  observe_loop(state, h);
}
BENCHMARK(BM_ObserveSingleAtomic)->Threads(1)->Threads(2)->UseRealTime();

void BM_ObserveSharded(benchmark::State& state) {
  static Histogram h(&itl_buckets());
  observe_loop(state, h);
}
BENCHMARK(BM_ObserveSharded)->Threads(1)->Threads(2)->UseRealTime();

void BM_IncSingleAtomic(benchmark::State& state) {
  static SingleAtomicCounter c;
  for (auto _ : state) c.inc();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_IncSingleAtomic)->Threads(1)->Threads(2)->UseRealTime();

void BM_IncSharded(benchmark::State& state) {
  static Counter c;
  for (auto _ : state) c.inc();
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_IncSharded)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace sluice
