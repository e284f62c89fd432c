// sluice: the default policy. One currency: the estimated time to first token of this request on
// each endpoint, in milliseconds; the lowest wins.
//
//   Q  = tokens queued ahead on the endpoint = own in-flight prefill tokens (gateway accounting,
//        exact and never stale) + external waiting x mean prompt, where external waiting =
//        scraped waiting - own requests not yet past first token (requests from other clients;
//        0 when the scrape is stale)
//   U  = uncached input tokens = input - predicted cached tokens (prefix index, or the oracle)
//   D  = sequences decoding = max(scraped running, own decoding) (own decoding when stale)
//   steps = max(1, ceil((Q + U) / chunk))      chunked prefill, chunk = max_num_batched_tokens
//   compute_ms = max(steps x W, beta x (Q + U + steps x D)) + steps x (C0 + delta x D)
//                (the cost model's step time summed over the steps until this prefill finishes:
//                 wait behind the queue, decode interference, then our own uncached prefill)
//   kv_ms = risk^2 x (kv_risk_ms + beta x (input + Q)),  risk = clamp((u' - kv_risk_start) / (1 - kv_risk_start))
//           where u' = KV usage (staleness rule) + this request's uncached input + output bound over
//           the capacity: the expected cost of a preemption and recompute
//   adapter_ms = 0 if the adapter is running, adapter_load_ms if it must load into a free slot or is
//           waiting, adapter_wait_ms if every slot holds another adapter
//   burst_ms = burst_ms x assignments since the last fresh scrape (a small spreading penalty)
//   ttft_ms = compute_ms + kv_ms + adapter_ms + burst_ms
//   cost_ms = ttft_ms + prefill_weight x beta x U x (1 + waiting);  score = -cost_ms
//   The last term is the GPU time this request's uncached prefill takes from the requests that will
//   queue behind it on that endpoint; by Little's law about as many as wait there now (`waiting`,
//   staleness rule). Without it the choice is greedy for this request alone and scatters a prefix
//   group over idle replicas (each paying the cold prefill again and crowding the others' KV),
//   which loses to plain cache affinity at light load and collapses the hit rate under overload.
// saturated: waiting (staleness rule) >= queue_limit or KV usage >= kv_limit; saturated endpoints
// rank after all others, so one is never chosen for its cached prefix while an unsaturated endpoint
// exists. Among saturated endpoints (all of them: the admission layer's case) the cost still counts
// the cache: dropping affinity there scatters prefixes exactly when the pool can least afford it. Ties: fewer assignments since scrape, fewer in flight, then rotation.
// Embedding requests or pools: no prefix reuse, U = input: least load in time.
//
// Defaults (engine-cost-model.md, Llama-3-8B on H100): c0_ms 2, w_ms 5.5, beta_ms 0.022,
// delta_ms 0.02, chunk_tokens 8192, kv_risk_start 0.8, kv_risk_ms 50, kv_limit 0.97,
// queue_limit 64, burst_ms 0.5, prefill_weight 2 (best overall in the small fleet sweep of fleet_sanity_test.cpp; 1 favours spreading a hot prefix, 3 pure affinity), adapter_load_ms 30, adapter_wait_ms 200, max_output_tokens 2048
// (output bound counted for KV when the request gives none), mean_prompt_tokens 512 (initial mean
// prompt for external waiting), max_prefix_blocks 8192. All are policy_params of the same name.
#pragma once
#include <functional>
#include <vector>

#include "core/config.h"
#include "core/picker/policy.h"
#include "core/picker/policy_params.h"
#include "core/picker/prefix_tracker.h"

namespace sluice {

struct SluiceParams {
  double c0_ms = 2.0, w_ms = 5.5, beta_ms = 0.022, delta_ms = 0.02;
  double chunk_tokens = 8192;
  double kv_risk_start = 0.8, kv_risk_ms = 50, kv_limit = 0.97;
  double queue_limit = 64;
  double burst_ms = 0.5;
  double prefill_weight = 2.0;
  double adapter_load_ms = 30, adapter_wait_ms = 200;
  double max_output_tokens = 2048;
  double mean_prompt_tokens = 512;
  double max_prefix_blocks = 8192;
  static SluiceParams from(PolicyParams& p);
};

// True cached tokens of `req` on pool endpoint `endpoint` (the oracle hook).
using CachedTokensOracle = std::function<int64_t(size_t endpoint, const PickRequest& req)>;

class SluicePolicy : public Policy {
 public:
  SluicePolicy(SluiceParams params, PoolKind kind);
  std::string_view name() const override { return "sluice"; }
  void rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
            std::vector<Candidate>& out) override;
  void on_dispatch(const PickRequest& req, size_t endpoint, Time now) override;
  void on_endpoints_reset(size_t count) override { prefix_.reset(count); }
  void explain(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
               std::vector<Explanation>& out) override;

  const SluiceParams& params() const { return params_; }
  const PrefixTracker& prefix() const { return prefix_; }

 protected:
  // Set by OraclePolicy: replaces the prefix index's prediction.
  CachedTokensOracle oracle_;

  PrefixTracker* prefix_tracker() override { return &prefix_; }
  const PrefixTracker* prefix_tracker() const override { return &prefix_; }

 private:
  struct Eval {
    int64_t cached = 0, uncached = 0;
    double queue_tokens = 0, external_waiting = 0, decoding = 0;
    double compute_ms = 0, kv_ms = 0, adapter_ms = 0, burst_ms = 0, ttft_ms = 0, cost_ms = 0;
    double kv_usage = 0;
    bool fresh = false, saturated = false;
  };
  void evaluate(const PickRequest& req, std::span<const EndpointView> endpoints);
  bool embedding(const PickRequest& req) const { return kind_ == PoolKind::embedding || req.kind == ApiKind::embedding; }

  SluiceParams params_;
  PoolKind kind_;
  PrefixTracker prefix_;
  double mean_prompt_;
  size_t cursor_ = 0;
  std::vector<Eval> evals_;
};

}  // namespace sluice
