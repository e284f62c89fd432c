// llmd_default: the llm-d / Gateway API Inference Extension default scheduling profile, as a
// baseline (routing-anchors.md).
//   filter:  saturation: max(waiting / queue_threshold, kv_usage / kv_threshold) >= 1 marks an
//            endpoint saturated (ranked last); metrics that are stale also count as saturated
//            (stale_is_saturated 1, llm-d's published behaviour; set 0 to disable)
//   scorers: queue  = (maxQ - q) / (maxQ - minQ) over candidates, 1 when all equal (q = scraped waiting)
//            kv     = 1 - scraped KV usage
//            prefix = matched blocks / request blocks (approximate index, <= 256 blocks per request,
//                     per-endpoint LRU sized to the engine's KV capacity, 31,250 blocks by default)
//   score = queue_weight x queue + kv_weight x kv + prefix_weight x prefix
//   picker: max score, RANDOM tie-break (seeded) - llm-d's own; its known failure is that a burst seeing
//           the same stale scores lands on one endpoint.
// llm-d reads the last scraped values whatever their age (0 before the first scrape).
// Defaults: queue_weight 2, kv_weight 2, prefix_weight 3, queue_threshold 5, kv_threshold 0.8,
// stale_is_saturated 1, max_prefix_blocks 256.
#pragma once
#include <random>

#include "core/picker/policy.h"
#include "core/picker/policy_params.h"
#include "core/picker/prefix_tracker.h"

namespace sluice {

struct LlmdParams {
  double queue_weight = 2, kv_weight = 2, prefix_weight = 3;
  double queue_threshold = 5, kv_threshold = 0.8;
  bool stale_is_saturated = true;
  double max_prefix_blocks = 256;
  static LlmdParams from(PolicyParams& p);
};

class LlmdDefaultPolicy final : public Policy {
 public:
  LlmdDefaultPolicy(LlmdParams params, uint64_t seed);
  std::string_view name() const override { return "llmd_default"; }
  void rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
            std::vector<Candidate>& out) override;
  void on_dispatch(const PickRequest& req, size_t endpoint, Time now) override { prefix_.learn(req, endpoint); }
  void on_endpoints_reset(size_t count) override { prefix_.reset(count); }
  void explain(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
               std::vector<Explanation>& out) override;

  PrefixTracker* prefix_tracker() override { return &prefix_; }
  const PrefixTracker* prefix_tracker() const override { return &prefix_; }

 private:
  void evaluate(const PickRequest& req, std::span<const EndpointView> endpoints);

  LlmdParams params_;
  PrefixTracker prefix_;
  std::mt19937_64 rng_;
  std::vector<double> queues_, queue_scores_, kv_, prefix_scores_;
  std::vector<bool> saturated_;
  std::vector<int64_t> cached_;
};

}  // namespace sluice
