// Deterministic ordering shared by the scoring policies: unsaturated before saturated, then higher
// score first; equal scores go to the
// endpoint with fewer assignments since its last scrape, then fewer requests in flight, then the
// first in rotation order after `cursor` (the last pick). No random tie-break: a burst that sees the
// same scores spreads instead of landing on one endpoint.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

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

// Unsaturated first, then higher score, then the smaller tie key.
inline void sort_rank_keys(std::vector<RankKey>& keys) {
  std::sort(keys.begin(), keys.end(), [](const RankKey& a, const RankKey& b) {
    const bool sa = a.tie >> 63, sb = b.tie >> 63;
    if (sa != sb) return sb;
    if (a.score != b.score) return a.score > b.score;
    return a.tie < b.tie;
  });
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
