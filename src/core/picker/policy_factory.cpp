#include "core/picker/policy_factory.h"

#include "core/picker/cache_aware.h"
#include "core/picker/least_request.h"
#include "core/picker/llmd_default.h"
#include "core/picker/policy_params.h"
#include "core/picker/power_of_two.h"
#include "core/picker/random.h"
#include "core/picker/round_robin.h"
#include "core/picker/sluice_policy.h"

namespace sluice {

namespace {

// The one list of policies: name -> how to build it from the pool's config and parameters.
struct PolicyEntry {
  const char* name;
  std::unique_ptr<Policy> (*make)(const PoolConfig& pool, PolicyParams& params, uint64_t seed);
};

const PolicyEntry kPolicies[] = {
    {"round_robin", [](const PoolConfig&, PolicyParams&, uint64_t) -> std::unique_ptr<Policy> {
       return std::make_unique<RoundRobinPolicy>();
     }},
    {"random", [](const PoolConfig&, PolicyParams&, uint64_t seed) -> std::unique_ptr<Policy> {
       return std::make_unique<RandomPolicy>(seed);
     }},
    {"least_request", [](const PoolConfig&, PolicyParams&, uint64_t) -> std::unique_ptr<Policy> {
       return std::make_unique<LeastRequestPolicy>();
     }},
    {"power_of_two", [](const PoolConfig&, PolicyParams&, uint64_t seed) -> std::unique_ptr<Policy> {
       return std::make_unique<PowerOfTwoPolicy>(seed);
     }},
    {"cache_aware", [](const PoolConfig&, PolicyParams& params, uint64_t) -> std::unique_ptr<Policy> {
       return std::make_unique<CacheAwarePolicy>(CacheAwareParams::from(params));
     }},
    {"llmd_default", [](const PoolConfig&, PolicyParams& params, uint64_t seed) -> std::unique_ptr<Policy> {
       return std::make_unique<LlmdDefaultPolicy>(LlmdParams::from(params), seed);
     }},
    {"sluice", [](const PoolConfig& pool, PolicyParams& params, uint64_t) -> std::unique_ptr<Policy> {
       return std::make_unique<SluicePolicy>(SluiceParams::from(params), pool.kind);
     }},
};

}  // namespace

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& p : kPolicies) names.emplace_back(p.name);
  return names;
}

void check_policy_params(const PoolConfig& pool, const std::string& path) {
  PolicyParams params(pool);
  for (const auto& entry : kPolicies) {
    if (pool.policy != entry.name) continue;
    try {
      (void)entry.make(pool, params, 0);
    } catch (const ConfigError& e) {  // a parameter's own range check
      throw ConfigError(path + ".policy_params: " + e.what());
    }
    if (auto k = params.first_unknown())
      throw ConfigError(path + ".policy_params." + *k + ": unknown parameter for policy '" + pool.policy +
                        "' (known: " + params.known_list() + ")");
    return;
  }
}

std::unique_ptr<Policy> make_policy(const PoolConfig& pool, uint64_t seed) {
  PolicyParams params(pool);
  for (const auto& entry : kPolicies) {
    if (pool.policy != entry.name) continue;
    auto p = entry.make(pool, params, seed);
    params.reject_unknown(pool.policy);
    return p;
  }
  std::string known;
  for (const auto& p : kPolicies) known += (known.empty() ? "" : ", ") + std::string(p.name);
  throw ConfigError("pool '" + pool.name + "': unknown policy '" + pool.policy + "' (known: " + known + ")");
}

}  // namespace sluice
