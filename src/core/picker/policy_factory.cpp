#include "core/picker/policy_factory.h"

#include "core/picker/least_request.h"
#include "core/picker/random.h"
#include "core/picker/round_robin.h"

namespace sluice {

std::vector<std::string> policy_names() { return {"round_robin", "random", "least_request"}; }

std::unique_ptr<Policy> make_policy(const PoolConfig& pool, uint64_t seed) {
  const auto& n = pool.policy;
  if (n == "round_robin") return std::make_unique<RoundRobinPolicy>();
  if (n == "random") return std::make_unique<RandomPolicy>(seed);
  if (n == "least_request") return std::make_unique<LeastRequestPolicy>();
  std::string known;
  for (const auto& p : policy_names()) known += (known.empty() ? "" : ", ") + p;
  throw ConfigError("pool '" + pool.name + "': unknown policy '" + n + "' (known: " + known + ")");
}

}  // namespace sluice
