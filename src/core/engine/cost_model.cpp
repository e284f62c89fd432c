#include "core/engine/cost_model.h"

#include <algorithm>
#include <cmath>

namespace sluice::engine {

double CostModel::step_ms(const StepShape& s) const {
  return p_.c0_ms + std::max(p_.w_ms, p_.beta_ms * static_cast<double>(s.num_tokens)) +
         p_.delta_ms * static_cast<double>(s.num_seqs) +
         p_.gamma_ms * static_cast<double>(s.kv_read_tokens) + p_.eps_ms * s.prefill_pairs +
         lora_load_ms_ * s.num_lora_loads;
}

Duration CostModel::step_duration(const StepShape& s, std::mt19937_64& rng) const {
  double ms = step_ms(s);
  if (p_.jitter_sigma > 0.0) {
    // Log-normal with mean 1: exp(N(-sigma^2/2, sigma)).
    std::normal_distribution<double> normal(-p_.jitter_sigma * p_.jitter_sigma / 2.0, p_.jitter_sigma);
    ms *= std::exp(normal(rng));
  }
  return from_millis(ms);
}

namespace {

std::vector<EngineProfile> all_profiles() {
  std::vector<EngineProfile> out;
  {
    EngineProfile p;
    p.name = std::string(kDefaultProfile);
    out.push_back(p);
  }
  {
    EngineProfile p;
    p.name = "llama-3-70b-tp4";
    p.cost.c0_ms = 2.5;
    p.cost.w_ms = 14.5 * 1.15;      // weight floor plus ~15% all-reduce
    p.cost.beta_ms = 0.054 * 1.15;
    p.cost.delta_ms = 0.02;
    p.cost.gamma_ms = 6e-5;         // 320 KiB/token over 4 GPUs
    p.cost.eps_ms = 2e-6;
    p.num_blocks = 28000;
    out.push_back(p);
  }
  {
    EngineProfile p;
    p.name = "embedding";
    p.cost.c0_ms = 1.0;
    p.cost.w_ms = 1.0;
    p.cost.beta_ms = 0.004;
    p.cost.delta_ms = 0.0;
    p.cost.gamma_ms = 0.0;
    p.cost.eps_ms = 0.0;
    p.num_blocks = 4096;
    p.max_num_seqs = 256;
    p.max_model_len = 8192;
    p.embedding = true;
    out.push_back(p);
  }
  return out;
}

}  // namespace

std::optional<EngineProfile> find_profile(std::string_view name) {
  for (auto& p : all_profiles())
    if (p.name == name) return p;
  return std::nullopt;
}

std::vector<std::string> profile_names() {
  std::vector<std::string> out;
  for (auto& p : all_profiles()) out.push_back(p.name);
  return out;
}

}  // namespace sluice::engine
