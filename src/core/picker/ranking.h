// Deterministic ordering shared by the scoring policies: unsaturated before saturated, then higher
// score first; equal scores go to the
// endpoint with fewer assignments since its last scrape, then fewer requests in flight, then the
// first in rotation order after `cursor` (the last pick). No random tie-break: a burst that sees the
// same scores spreads instead of landing on one endpoint.
#pragma once
#include <algorithm>
#include <span>
#include <vector>

#include "core/picker/policy.h"

namespace sluice {

// `out[i]` must describe `endpoints[i]` on entry.
inline void sort_candidates(std::vector<Candidate>& out, std::span<const EndpointView> endpoints, size_t cursor,
                            size_t pool_size) {
  // One comparison per pair: the score, then a packed tie key (saturated | assigned | in flight | rotation).
  struct Key {
    double score;
    uint64_t tie;
    uint32_t pos;
  };
  thread_local std::vector<Key> keys;
  thread_local std::vector<Candidate> sorted;
  keys.clear();
  const size_t n = std::max<size_t>(pool_size, 1);
  auto clamp = [](int64_t v, int64_t hi) { return static_cast<uint64_t>(std::clamp<int64_t>(v, 0, hi)); };
  for (size_t i = 0; i < out.size(); ++i) {
    const auto& v = endpoints[i];
    const uint64_t tie = (uint64_t{out[i].saturated} << 63) | (clamp(v.load->assigned_since_scrape, (1 << 20) - 1) << 43) |
                         (clamp(v.load->in_flight, (1 << 22) - 1) << 21) |
                         clamp(static_cast<int64_t>((v.index + n - cursor % n) % n), (1 << 21) - 1);
    keys.push_back({out[i].score, tie, static_cast<uint32_t>(i)});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    const bool sa = a.tie >> 63, sb = b.tie >> 63;
    if (sa != sb) return sb;
    if (a.score != b.score) return a.score > b.score;
    return a.tie < b.tie;
  });
  sorted.clear();
  for (const Key& k : keys) sorted.push_back(out[k.pos]);
  out.swap(sorted);
}

// Largest endpoint index + 1 among the views (the pool size as far as the policy can tell).
inline size_t pool_size_of(std::span<const EndpointView> endpoints) {
  size_t n = 0;
  for (const auto& v : endpoints) n = std::max(n, v.index + 1);
  return n;
}

}  // namespace sluice
