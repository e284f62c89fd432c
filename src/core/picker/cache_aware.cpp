#include "core/picker/cache_aware.h"

#include <algorithm>

#include "core/picker/ranking.h"

namespace sluice {

CacheAwareParams CacheAwareParams::from(PolicyParams& p) {
  CacheAwareParams c;
  c.balance_abs_threshold = p.get("balance_abs_threshold", c.balance_abs_threshold);
  c.balance_rel_threshold = p.get("balance_rel_threshold", c.balance_rel_threshold);
  c.cache_threshold = p.get("cache_threshold", c.cache_threshold);
  c.max_tree_size = std::max(64.0, p.get("max_tree_size", c.max_tree_size));
  return c;
}

CacheAwarePolicy::CacheAwarePolicy(CacheAwareParams params)
    : params_(params),
      prefix_(PrefixTrackerOptions{1u << 20, static_cast<int64_t>(params.max_tree_size / 64), false}) {}

void CacheAwarePolicy::rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time,
                            std::vector<Candidate>& out) {
  out.clear();
  if (endpoints.empty()) return;
  prefix_.sync(endpoints);
  auto matched = prefix_.match(req);
  int64_t min_load = INT64_MAX, max_load = INT64_MIN;
  for (const auto& v : endpoints) {
    min_load = std::min(min_load, v.load->in_flight);
    max_load = std::max(max_load, v.load->in_flight);
  }
  imbalanced_ = static_cast<double>(max_load - min_load) > params_.balance_abs_threshold &&
                static_cast<double>(max_load) > params_.balance_rel_threshold * static_cast<double>(min_load);
  const double len = static_cast<double>(req.text.size());
  best_ratio_ = 0;
  size_t best = SIZE_MAX, smallest = SIZE_MAX;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const auto& v = endpoints[i];
    const uint32_t m = v.index < matched.size() ? matched[v.index] : 0;
    const double ratio = len > 0 ? static_cast<double>(m) * static_cast<double>(prefix_.block_chars()) / len : 0;
    if (best == SIZE_MAX || ratio > best_ratio_ ||
        (ratio == best_ratio_ && v.load->in_flight < endpoints[best].load->in_flight)) {
      best = i;
      best_ratio_ = ratio;
    }
    if (smallest == SIZE_MAX || prefix_.index().entries(v.index) < prefix_.index().entries(endpoints[smallest].index))
      smallest = i;
    out.push_back({v.index, -static_cast<double>(v.load->in_flight),
                   candidate_tokens(v.index < matched.size() ? prefix_.cached_tokens(m, req.input_tokens) : 0), false});
  }
  if (!imbalanced_) {
    const size_t first = best_ratio_ > params_.cache_threshold ? best : smallest;
    out[first].score = 1e18;  // first; the rest by load
  }
  sort_candidates(out, endpoints, cursor_, pool_size_of(endpoints));
}

void CacheAwarePolicy::on_dispatch(const PickRequest& req, size_t endpoint, Time) {
  cursor_ = endpoint + 1;
  prefix_.learn(req, endpoint);
}

void CacheAwarePolicy::explain(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
                               std::vector<Explanation>& out) {
  std::vector<Candidate> ranked;
  rank(req, endpoints, now, ranked);
  auto matched = prefix_.match(req);
  out.clear();
  const double len = static_cast<double>(req.text.size());
  for (const auto& v : endpoints) {
    const uint32_t m = v.index < matched.size() ? matched[v.index] : 0;
    out.push_back({v.index,
                   {{"load", static_cast<double>(v.load->in_flight)},
                    {"match_ratio", len > 0 ? m * static_cast<double>(prefix_.block_chars()) / len : 0},
                    {"tree_blocks", static_cast<double>(prefix_.index().entries(v.index))},
                    {"imbalanced", imbalanced_ ? 1.0 : 0.0},
                    {"best_ratio", best_ratio_}}});
  }
}

}  // namespace sluice
