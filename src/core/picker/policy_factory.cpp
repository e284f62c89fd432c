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

std::vector<std::string> policy_names() {
  return {"round_robin", "random", "least_request", "power_of_two", "cache_aware", "llmd_default", "sluice"};
}

std::unique_ptr<Policy> make_policy(const PoolConfig& pool, uint64_t seed) {
  const auto& n = pool.policy;
  PolicyParams params(pool);
  std::unique_ptr<Policy> p;
  if (n == "round_robin") p = std::make_unique<RoundRobinPolicy>();
  else if (n == "random") p = std::make_unique<RandomPolicy>(seed);
  else if (n == "least_request") p = std::make_unique<LeastRequestPolicy>();
  else if (n == "power_of_two") p = std::make_unique<PowerOfTwoPolicy>(seed);
  else if (n == "cache_aware") p = std::make_unique<CacheAwarePolicy>(CacheAwareParams::from(params));
  else if (n == "llmd_default") p = std::make_unique<LlmdDefaultPolicy>(LlmdParams::from(params), seed);
  else if (n == "sluice") p = std::make_unique<SluicePolicy>(SluiceParams::from(params), pool.kind);
  if (p) {
    params.reject_unknown(n);
    return p;
  }
  std::string known;
  for (const auto& p : policy_names()) known += (known.empty() ? "" : ", ") + p;
  throw ConfigError("pool '" + pool.name + "': unknown policy '" + n + "' (known: " + known + ")");
}

}  // namespace sluice
