#include "core/picker/sluice_policy.h"

#include <algorithm>
#include <cmath>

#include "core/picker/ranking.h"
#include "core/picker/scorers/adapter_locality.h"
#include "core/picker/scorers/load_estimate.h"

namespace sluice {

SluiceParams SluiceParams::from(PolicyParams& p) {
  SluiceParams s;
  s.c0_ms = p.get("c0_ms", s.c0_ms);
  s.w_ms = p.get("w_ms", s.w_ms);
  s.beta_ms = p.get("beta_ms", s.beta_ms);
  s.delta_ms = p.get("delta_ms", s.delta_ms);
  s.chunk_tokens = std::max(1.0, p.get("chunk_tokens", s.chunk_tokens));
  s.kv_risk_start = std::clamp(p.get("kv_risk_start", s.kv_risk_start), 0.0, 0.99);
  s.kv_risk_ms = p.get("kv_risk_ms", s.kv_risk_ms);
  s.kv_limit = p.get("kv_limit", s.kv_limit);
  s.queue_limit = p.get("queue_limit", s.queue_limit);
  s.burst_ms = p.get("burst_ms", s.burst_ms);
  s.prefill_weight = std::max(0.0, p.get("prefill_weight", s.prefill_weight));
  s.adapter_load_ms = p.get("adapter_load_ms", s.adapter_load_ms);
  s.adapter_wait_ms = p.get("adapter_wait_ms", s.adapter_wait_ms);
  s.max_output_tokens = p.get("max_output_tokens", s.max_output_tokens);
  s.mean_prompt_tokens = p.get("mean_prompt_tokens", s.mean_prompt_tokens);
  s.max_prefix_blocks = std::max(1.0, p.get("max_prefix_blocks", s.max_prefix_blocks));
  return s;
}

SluicePolicy::SluicePolicy(SluiceParams params, PoolKind kind)
    : params_(params),
      kind_(kind),
      prefix_(PrefixTrackerOptions{static_cast<size_t>(params.max_prefix_blocks), PrefixIndex::kDefaultCapacityBlocks, true}),
      mean_prompt_(params.mean_prompt_tokens) {}

void SluicePolicy::evaluate(const PickRequest& req, std::span<const EndpointView> endpoints) {
  const SluiceParams& p = params_;
  const bool embed = embedding(req);
  std::span<const uint32_t> matched;
  if (!embed && !oracle_) {
    prefix_.sync(endpoints);
    matched = prefix_.match(req);
  }
  const double input = static_cast<double>(std::max<int64_t>(0, req.input_tokens));
  const double output = embed ? 0.0 : (req.max_output_tokens > 0 ? std::min<double>(req.max_output_tokens, p.max_output_tokens) : p.max_output_tokens);
  evals_.assign(endpoints.size(), Eval{});
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const EndpointView& v = endpoints[i];
    const EndpointLoad& l = *v.load;
    const LoadEstimate est = estimate_load(v);
    Eval& e = evals_[i];
    e.fresh = est.fresh;
    e.kv_usage = est.kv_usage;
    e.saturated = est.waiting >= p.queue_limit || est.kv_usage >= p.kv_limit;
    if (!embed) {
      if (oracle_) e.cached = std::clamp<int64_t>(oracle_(v.index, req), 0, req.input_tokens);
      else if (v.index < matched.size()) e.cached = prefix_.cached_tokens(matched[v.index], req.input_tokens);
    }
    e.uncached = static_cast<int64_t>(input) - e.cached;
    const double own_decoding = static_cast<double>(std::max<int64_t>(0, l.in_flight - l.prefill_requests));
    e.external_waiting = est.fresh ? std::max(0.0, v.signals->waiting - static_cast<double>(std::max<int64_t>(0, l.prefill_requests))) : 0.0;
    e.queue_tokens = static_cast<double>(std::max<int64_t>(0, l.prefill_tokens)) + e.external_waiting * mean_prompt_;
    e.decoding = est.fresh ? std::max(est.running, own_decoding) : own_decoding;
    const double tokens = e.queue_tokens + static_cast<double>(e.uncached);
    const double steps = std::max(1.0, std::ceil(tokens / p.chunk_tokens));
    e.compute_ms = std::max(steps * p.w_ms, p.beta_ms * (tokens + steps * e.decoding)) + steps * (p.c0_ms + p.delta_ms * e.decoding);
    const double after = est.kv_usage + (static_cast<double>(e.uncached) + output) / est.capacity_tokens;
    const double risk = std::clamp((after - p.kv_risk_start) / (1.0 - p.kv_risk_start), 0.0, 1.0);
    e.kv_ms = risk * risk * (p.kv_risk_ms + p.beta_ms * (input + e.queue_tokens));
    if (!req.adapter.empty()) {
      const double a = adapter_locality_score(v, req.adapter);
      e.adapter_ms = a >= 1.0 ? 0.0 : (a >= 0.6 ? p.adapter_load_ms : p.adapter_wait_ms);
    }
    e.burst_ms = est.fresh ? p.burst_ms * static_cast<double>(std::max<int64_t>(0, l.assigned_since_scrape)) : 0.0;
    e.ttft_ms = e.compute_ms + e.kv_ms + e.adapter_ms + e.burst_ms;
    e.cost_ms = e.ttft_ms + p.prefill_weight * p.beta_ms * static_cast<double>(e.uncached) * (1.0 + est.waiting);
  }
}

void SluicePolicy::rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time,
                        std::vector<Candidate>& out) {
  evaluate(req, endpoints);
  out.clear();
  for (size_t i = 0; i < endpoints.size(); ++i)
    out.push_back({endpoints[i].index, -evals_[i].cost_ms, evals_[i].cached, evals_[i].saturated});
  sort_candidates(out, endpoints, cursor_, pool_size_of(endpoints));  // saturated last
}

void SluicePolicy::on_dispatch(const PickRequest& req, size_t endpoint, Time) {
  cursor_ = endpoint + 1;
  if (embedding(req)) return;
  if (req.input_tokens > 0) mean_prompt_ = 0.95 * mean_prompt_ + 0.05 * static_cast<double>(req.input_tokens);
  if (!oracle_) prefix_.learn(req, endpoint);
}

void SluicePolicy::explain(const PickRequest& req, std::span<const EndpointView> endpoints, Time,
                           std::vector<Explanation>& out) {
  evaluate(req, endpoints);
  out.clear();
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const Eval& e = evals_[i];
    out.push_back({endpoints[i].index,
                   {{"cost_ms", e.cost_ms},
                    {"ttft_ms", e.ttft_ms},
                    {"compute_ms", e.compute_ms},
                    {"kv_risk_ms", e.kv_ms},
                    {"adapter_ms", e.adapter_ms},
                    {"burst_ms", e.burst_ms},
                    {"queue_tokens", e.queue_tokens},
                    {"external_waiting", e.external_waiting},
                    {"decoding", e.decoding},
                    {"cached_tokens", static_cast<double>(e.cached)},
                    {"uncached_tokens", static_cast<double>(e.uncached)},
                    {"kv_usage", e.kv_usage},
                    {"fresh", e.fresh ? 1.0 : 0.0}}});
  }
}

}  // namespace sluice
