// cache_aware: the SGLang model gateway's cache-aware policy, as a baseline (routing-anchors.md).
//   load = the gateway's own requests in flight per endpoint (released when the stream ends).
//   imbalanced when (max_load - min_load) > balance_abs_threshold AND max_load > balance_rel_threshold
//   x min_load: rank by load, least loaded first.
//   otherwise: longest prefix match per endpoint; if the best matched fraction of the request's
//   characters > cache_threshold, the best-matching endpoint first (ties: lower load); else the
//   endpoint with the smallest tree first. The rest follow by load. Ties rotate from the last pick.
// The per-worker radix tree of characters is approximated by the block index (prefix_index.h):
// matches are counted in whole 64-character blocks (block_size 16 x 4 chars) instead of characters,
// and the tree's LRU eviction to max_tree_size characters every 120 s becomes a per-endpoint LRU
// bounded to max_tree_size / 64 blocks, evicted on insert. The request text is inserted into the
// chosen endpoint's tree at dispatch, as SGLang does.
// Defaults: balance_abs_threshold 64, balance_rel_threshold 1.5, cache_threshold 0.3,
// max_tree_size 67108864 (2^26 characters per endpoint).
#pragma once
#include "core/picker/policy.h"
#include "core/picker/policy_params.h"
#include "core/picker/prefix_tracker.h"

namespace sluice {

struct CacheAwareParams {
  double balance_abs_threshold = 64, balance_rel_threshold = 1.5, cache_threshold = 0.3;
  double max_tree_size = 67108864;
  static CacheAwareParams from(PolicyParams& p);
};

class CacheAwarePolicy final : public Policy {
 public:
  explicit CacheAwarePolicy(CacheAwareParams params);
  std::string_view name() const override { return "cache_aware"; }
  void rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
            std::vector<Candidate>& out) override;
  void on_dispatch(const PickRequest& req, size_t endpoint, Time now) override;
  void on_endpoints_reset(size_t count) override { prefix_.reset(count); }
  void explain(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
               std::vector<Explanation>& out) override;

  PrefixTracker* prefix_tracker() override { return &prefix_; }
  const PrefixTracker* prefix_tracker() const override { return &prefix_; }

 private:
  CacheAwareParams params_;
  PrefixTracker prefix_;
  size_t cursor_ = 0;
  // Last decision, for explain().
  bool imbalanced_ = false;
  double best_ratio_ = 0;
};

}  // namespace sluice
