// PrefixDemand: how often each cached prefix is asked for, so the default policy can price what a
// copy of a prefix onto one more endpoint is worth to the requests that will come for it.
//
// A prefix is named by the chained hash of its deepest block that some endpoint holds (the prefix
// index's hashes chain every block before it: core/prefix/prefix_index.h), so "this request's
// cached prefix" is one 64-bit key. Per key, an exponentially decayed count of the dispatches that
// came for it, time constant tau = 2 s (the policy's other rates are smoothed over the same ~2 s):
//   count <- count x exp(-dt / tau) + 1   at each dispatch,
// and rate = count x exp(-dt / tau) / tau requests per ms (a Poisson stream of rate lambda holds
// lambda x tau in such a count). rate() reads the count before the current request adds to it:
// the demand that came before this one, which is what the next requests are forecast from. A key
// seen once so far reads 1 / tau.
//
// Storage: 2-way set-associative, 2 x 512 sets of {key, count, last}: 24 KiB, no allocation after
// construction. A new key takes the way whose decayed count is lower, so a hot prefix survives
// a stream of one-off prefixes (agent turns, unique prompts) that would evict it from a
// direct-mapped table. Forgetting a cold key only loses its count, never correctness.
// Time is passed in (pure core: no clock of its own).
#pragma once
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/time.h"

namespace sluice {

class PrefixDemand {
 public:
  static constexpr double kTauMs = 2000.0;
  static constexpr size_t kSets = 512;

  // The decayed demand for `key` before this request: requests per ms (0 for a key not held).
  double rate(uint64_t key, Time now) const;
  // A request for `key` was dispatched at `now`.
  void note(uint64_t key, Time now);
  void clear();
  // The n most asked-for keys at `now`, most first, with their rates (requests per ms); keys whose
  // decayed count is under half a request are left out. For a metrics scrape: it reads all 1,024
  // ways into one vector and sorts its first n.
  std::vector<std::pair<uint64_t, double>> top(Time now, size_t n) const;

 private:
  struct Way {
    uint64_t key = 0;
    double count = 0;
    Time last{};
  };
  static double decayed(const Way& w, Time now);
  size_t set_of(uint64_t key) const { return static_cast<size_t>((key ^ (key >> 29)) % kSets); }
  std::array<std::array<Way, 2>, kSets> sets_{};
};

}  // namespace sluice
