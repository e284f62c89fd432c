#include "core/picker/llmd_default.h"

#include <algorithm>

#include "core/picker/scorers/queue_depth.h"

namespace sluice {

LlmdParams LlmdParams::from(PolicyParams& p) {
  LlmdParams l;
  l.queue_weight = p.get("queue_weight", l.queue_weight);
  l.kv_weight = p.get("kv_weight", l.kv_weight);
  l.prefix_weight = p.get("prefix_weight", l.prefix_weight);
  l.queue_threshold = std::max(1e-9, p.get("queue_threshold", l.queue_threshold));
  l.kv_threshold = std::max(1e-9, p.get("kv_threshold", l.kv_threshold));
  l.stale_is_saturated = p.get("stale_is_saturated", 1) != 0;
  l.max_prefix_blocks = std::max(1.0, p.get("max_prefix_blocks", l.max_prefix_blocks));
  return l;
}

LlmdDefaultPolicy::LlmdDefaultPolicy(LlmdParams params, uint64_t seed)
    : params_(params),
      prefix_(PrefixTrackerOptions{static_cast<size_t>(params.max_prefix_blocks), PrefixIndex::kDefaultCapacityBlocks, true}),
      rng_(seed) {}

void LlmdDefaultPolicy::evaluate(const PickRequest& req, std::span<const EndpointView> endpoints) {
  prefix_.sync(endpoints);
  auto matched = prefix_.match(req);
  const double blocks = static_cast<double>(prefix_.request_blocks());
  const size_t n = endpoints.size();
  queues_.assign(n, 0);
  queue_scores_.assign(n, 1);
  kv_.assign(n, 0);
  prefix_scores_.assign(n, 0);
  saturated_.assign(n, false);
  cached_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const EngineSignals* s = endpoints[i].signals;
    const bool present = s && s->present;
    queues_[i] = present ? s->waiting : 0;
    kv_[i] = present ? std::clamp(s->kv_usage, 0.0, 1.0) : 0;
    const size_t idx = endpoints[i].index;
    prefix_scores_[i] = blocks > 0 && idx < matched.size() ? matched[idx] / blocks : 0;
    cached_[i] = idx < matched.size() ? prefix_.cached_tokens(matched[idx], req.input_tokens) : 0;
    saturated_[i] = (params_.stale_is_saturated && endpoints[i].stale) ||
                    std::max(queues_[i] / params_.queue_threshold, kv_[i] / params_.kv_threshold) >= 1.0;
  }
  queue_depth_scores(queues_, queue_scores_);
}

void LlmdDefaultPolicy::rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time,
                             std::vector<Candidate>& out) {
  evaluate(req, endpoints);
  struct Keyed {
    Candidate c;
    uint64_t tie;
  };
  std::vector<Keyed> k;
  k.reserve(endpoints.size());
  for (size_t i = 0; i < endpoints.size(); ++i) {
    double score = params_.queue_weight * queue_scores_[i] + params_.kv_weight * (1.0 - kv_[i]) +
                   params_.prefix_weight * prefix_scores_[i];
    k.push_back({{endpoints[i].index, score, candidate_tokens(cached_[i]), saturated_[i]}, rng_()});
  }
  std::sort(k.begin(), k.end(), [](const Keyed& a, const Keyed& b) {
    if (a.c.saturated != b.c.saturated) return !a.c.saturated;
    if (a.c.score != b.c.score) return a.c.score > b.c.score;
    return a.tie < b.tie;
  });
  out.clear();
  for (const auto& x : k) out.push_back(x.c);
}

void LlmdDefaultPolicy::explain(const PickRequest& req, std::span<const EndpointView> endpoints, Time,
                                std::vector<Explanation>& out) {
  evaluate(req, endpoints);
  out.clear();
  for (size_t i = 0; i < endpoints.size(); ++i)
    out.push_back({endpoints[i].index,
                   {{"queue", queue_scores_[i]},
                    {"kv", 1.0 - kv_[i]},
                    {"prefix", prefix_scores_[i]},
                    {"saturated", saturated_[i] ? 1.0 : 0.0}}});
}

}  // namespace sluice
