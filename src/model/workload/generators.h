// Builders of the content generators named in workload.h. Each reads its parameters from `p`
// (which records the first error) and returns nullptr when a parameter is invalid.
#pragma once
#include <memory>
#include <string>

#include "model/workload/params.h"
#include "model/workload/workload.h"

namespace sluice::workload {

std::unique_ptr<ContentGenerator> make_shared_prefix(const std::string& preset, Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_multi_turn(Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_embeddings(Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_cost_mix(Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_lora_mix(Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_tenants(Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_replay(Params& p, uint64_t seed);
// hard_shapes.cpp
std::unique_ptr<ContentGenerator> make_hot_prefix(Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_agent_sessions(Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_tool_agent(Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_kv_pressure(Params& p, uint64_t seed);
std::unique_ptr<ContentGenerator> make_fan_out(Params& p, uint64_t seed);

// Index drawn from cumulative weights (last element = total).
size_t pick_weighted(const std::vector<double>& cumulative, std::mt19937_64& rng);
// Cumulative Zipf weights 1/(i+1)^s for n items.
std::vector<double> zipf_cumulative(size_t n, double s);

}  // namespace sluice::workload
