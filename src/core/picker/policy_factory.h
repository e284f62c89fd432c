// Builds a policy by name for a pool. Names: round_robin, random, least_request (and, from the
// KV-aware picker: power_of_two, cache_aware, llmd_default, sluice). Unknown names are a config error.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/picker/policy.h"

namespace sluice {

std::unique_ptr<Policy> make_policy(const PoolConfig& pool, uint64_t seed);
std::vector<std::string> policy_names();

}  // namespace sluice
