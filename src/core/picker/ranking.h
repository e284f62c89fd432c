// Deterministic ordering shared by the scoring policies: unsaturated before saturated, then higher
// score first; equal scores go to the
// endpoint with fewer assignments since its last scrape, then fewer requests in flight, then the
// first in rotation order after `cursor` (the last pick). No random tie-break: a burst that sees the
// same scores spreads instead of landing on one endpoint.
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include <boost/sort/pdqsort/pdqsort.hpp>

#include "core/picker/policy.h"

namespace sluice {

// The sort key of one candidate: the score, then a packed tie key (saturated | assigned | in flight |
// rotation), and its position on entry. One comparison per pair.
struct RankKey {
  double score;
  uint64_t tie;
  uint32_t pos;
};

// The rotation order after `cursor` in a pool of `pool_size` (one division per decision).
struct RankRotation {
  size_t n, c;
  RankRotation(size_t cursor, size_t pool_size) : n(std::max<size_t>(pool_size, 1)), c(cursor % n) {}
  // == (index + n - cursor % n) % n; no division when index < n (always, with pool_size_of).
  size_t of(size_t index) const {
    const size_t idx = index < n ? index : index % n;
    return idx >= c ? idx - c : idx + n - c;
  }
};

inline uint64_t rank_tie(bool saturated, const EndpointView& v, const RankRotation& rotation) {
  auto clamp = [](int64_t x, int64_t hi) { return static_cast<uint64_t>(std::clamp<int64_t>(x, 0, hi)); };
  return (uint64_t{saturated} << 63) | (clamp(v.load->assigned_since_scrape, (1 << 20) - 1) << 43) |
         (clamp(v.load->in_flight, (1 << 22) - 1) << 21) |
         clamp(static_cast<int64_t>(rotation.of(v.index)), (1 << 21) - 1);
}

// The order of a score as an unsigned integer, highest score smallest (-0.0 taken as +0.0, which
// compare equal as doubles).
inline uint64_t descending_score_key(double score) {
  const uint64_t u = std::bit_cast<uint64_t>(score == 0.0 ? 0.0 : score);
  return (u >> 63) ? u : ~(u | (uint64_t{1} << 63));
}

// Unsaturated first, then higher score, then the smaller tie key. The tie key holds the rotation
// position, unique per endpoint, so the order is total and any correct sort gives the same result.
// Each part (unsaturated, saturated) is sorted through a 128-bit key, (score order, tie key),
// compared without branches (Boost.Sort's branchless pattern-defeating quicksort): with 64
// endpoints std::sort on the three-way comparison cost ~1.5 us of a ~6 us decision, its branches
// mispredicting on scores in random order; this sort ~0.7 us (sluice_microbench
// PickerSluiceDecision64x16kHit, pinned to one core).
//
// Use: reset(n), add() each of the n candidates, then sort(): the positions given to add(), best
// first. A policy that builds its keys here reads the order straight off the items, without a
// RankKey array in between (SluicePolicy::rank).
class RankOrder {
 public:
  struct Item {
    unsigned __int128 key;
    uint32_t pos;
  };
  void reset(size_t n) {
    items_.resize(n);
    unsaturated_ = 0;
    saturated_ = n;
  }
  // Unsaturated from the front, saturated from the back (their order is restored by the sort).
  void add(double score, uint64_t tie, uint32_t pos) {
    const Item item{(static_cast<unsigned __int128>(descending_score_key(score)) << 64) | tie, pos};
    if (tie >> 63) items_[--saturated_] = item;
    else items_[unsaturated_++] = item;
  }
  std::span<const Item> sort() {
    const auto less = [](const Item& a, const Item& b) { return a.key < b.key; };
    const auto mid = items_.begin() + static_cast<std::ptrdiff_t>(unsaturated_);
    boost::sort::pdqsort_branchless(items_.begin(), mid, less);
    boost::sort::pdqsort_branchless(mid, items_.end(), less);
    return items_;
  }

 private:
  std::vector<Item> items_;
  size_t unsaturated_ = 0, saturated_ = 0;
};

inline void sort_rank_keys(std::vector<RankKey>& keys) {
  thread_local RankOrder order;
  thread_local std::vector<RankKey> sorted;
  order.reset(keys.size());
  for (uint32_t i = 0; i < keys.size(); ++i) order.add(keys[i].score, keys[i].tie, i);
  sorted.clear();
  for (const RankOrder::Item& item : order.sort()) sorted.push_back(keys[item.pos]);
  keys.swap(sorted);
}

// `out[i]` must describe `endpoints[i]` on entry.
inline void sort_candidates(std::vector<Candidate>& out, std::span<const EndpointView> endpoints, size_t cursor,
                            size_t pool_size) {
  thread_local std::vector<RankKey> keys;
  thread_local std::vector<Candidate> sorted;
  keys.clear();
  const RankRotation rotation(cursor, pool_size);
  for (size_t i = 0; i < out.size(); ++i)
    keys.push_back({out[i].score, rank_tie(out[i].saturated, endpoints[i], rotation), static_cast<uint32_t>(i)});
  sort_rank_keys(keys);
  sorted.clear();
  for (const RankKey& k : keys) sorted.push_back(out[k.pos]);
  out.swap(sorted);
}

// Largest endpoint index + 1 among the views (the pool size as far as the policy can tell).
inline size_t pool_size_of(std::span<const EndpointView> endpoints) {
  size_t n = 0;
  for (const auto& v : endpoints) n = std::max(n, v.index + 1);
  return n;
}

}  // namespace sluice
