// Deterministic ordering shared by the scoring policies: higher score first; equal scores go to the
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
  struct Key {
    double score;
    int64_t assigned, in_flight;
    size_t rotation;
    Candidate c;
  };
  std::vector<Key> keys;
  keys.reserve(out.size());
  const size_t n = std::max<size_t>(pool_size, 1);
  for (size_t i = 0; i < out.size(); ++i) {
    const auto& v = endpoints[i];
    keys.push_back({out[i].score, v.load->assigned_since_scrape, v.load->in_flight, (v.index + n - cursor % n) % n, out[i]});
  }
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.assigned != b.assigned) return a.assigned < b.assigned;
    if (a.in_flight != b.in_flight) return a.in_flight < b.in_flight;
    return a.rotation < b.rotation;
  });
  for (size_t i = 0; i < keys.size(); ++i) out[i] = keys[i].c;
}

// Largest endpoint index + 1 among the views (the pool size as far as the policy can tell).
inline size_t pool_size_of(std::span<const EndpointView> endpoints) {
  size_t n = 0;
  for (const auto& v : endpoints) n = std::max(n, v.index + 1);
  return n;
}

}  // namespace sluice
