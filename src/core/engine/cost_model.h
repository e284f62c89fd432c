// The step-time cost model of one vLLM replica (../shared/reference/engine-cost-model.md).
//
//   step_ms = C0 + max(W, beta * N_tok) + delta * B_run + gamma * KV_read
//             + eps * sum_i c_i * (p_i + c_i / 2)                       (+ LoRA loads)
//
// N_tok: tokens scheduled in the step (prefill chunk tokens + one per decoding request);
// B_run: sequences in the batch; KV_read: context tokens read by the decoding sequences;
// c_i / p_i: prefill chunk of request i and its tokens already computed.
// Optional log-normal jitter (mean 1, sigma `jitter_sigma`) multiplies the step time; it draws
// from a generator the caller owns, so a seeded engine is reproducible.
//
// Profiles (all parameters overridable after lookup):
//   llama-3-8b-h100 (default): C0 2, W 5.5, beta 0.022, delta 0.02, gamma 5e-5, eps 1.5e-6 ms;
//                              27,000 blocks, max_num_seqs 1024, max_num_batched_tokens 8192.
//   llama-3-70b-tp4: W 14.5 and beta 0.054 plus 15% all-reduce; 28,000 blocks.
//   embedding:       one forward pass, no decode, no KV reuse; C0 1, W 1, beta 0.004.
#pragma once
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"

namespace sluice::engine {

struct CostParams {
  double c0_ms = 2.0;        // scheduler and launch overhead
  double w_ms = 5.5;         // weight-read floor (memory bound)
  double beta_ms = 0.022;    // per scheduled token
  double delta_ms = 0.02;    // per running sequence
  double gamma_ms = 5e-5;    // per KV token read by decode attention
  // The reference table prints 1.5e-9 "ms", but its long-prompt figures (100k tokens: 4.5-7.5 s of
  // attention = eps * N^2 / 2) need 1.5e-9 s = 1.5e-6 ms; we follow the figures.
  double eps_ms = 1.5e-6;    // per prefill attention token pair
  double jitter_sigma = 0.0; // log-normal jitter of step time; 0 = none (reference: 0.05-0.10)

  // Every term of the step time times `factor` (a slower or faster GPU running the same model: the
  // mixed fleets of `sluice fleetsim` and `sluice sim`, --slow-replicas / --slow-factor).
  CostParams scaled(double factor) const {
    CostParams c = *this;
    for (double* term : {&c.c0_ms, &c.w_ms, &c.beta_ms, &c.delta_ms, &c.gamma_ms, &c.eps_ms}) *term *= factor;
    return c;
  }
};

// What a step did, in the cost model's terms.
struct StepShape {
  int64_t num_tokens = 0;      // N_tok
  int64_t num_seqs = 0;        // B_run
  int64_t kv_read_tokens = 0;  // KV_read
  double prefill_pairs = 0.0;  // sum_i c_i * (p_i + c_i / 2)
  int num_lora_loads = 0;
};

class CostModel {
 public:
  explicit CostModel(CostParams p = {}, double lora_load_ms = 0.0) : p_(p), lora_load_ms_(lora_load_ms) {}

  // Deterministic step time, without jitter.
  double step_ms(const StepShape& s) const;
  // Step time with jitter drawn from `rng` when jitter_sigma > 0.
  Duration step_duration(const StepShape& s, std::mt19937_64& rng) const;

  const CostParams& params() const { return p_; }
  double lora_load_ms() const { return lora_load_ms_; }

 private:
  CostParams p_;
  double lora_load_ms_;
};

// The configuration an engine profile gives by default.
struct EngineProfile {
  std::string name;
  CostParams cost;
  int64_t num_blocks = 27000;
  int64_t max_num_seqs = 1024;
  int64_t max_num_batched_tokens = 8192;
  int64_t max_model_len = 131072;
  bool embedding = false;   // pooling model: prefill only, no decode, no KV reuse
};

std::optional<EngineProfile> find_profile(std::string_view name);
std::vector<std::string> profile_names();
inline constexpr std::string_view kDefaultProfile = "llama-3-8b-h100";

}  // namespace sluice::engine
