// Builds a policy by name for a pool. The names are listed once, in policy_factory.cpp's table
// (policy_names() reads it: config validation, error messages, `fleetsim --help`); unknown names
// are a config error.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/picker/policy.h"

namespace sluice {

std::unique_ptr<Policy> make_policy(const PoolConfig& pool, uint64_t seed);
// The config loader's check (so `sluice validate` refuses what `serve` would): the pool's policy is
// built once with its policy_params, and a misspelt or out-of-range parameter throws ConfigError
// naming the YAML key (`<path>.policy_params.<name>: ...`).
void check_policy_params(const PoolConfig& pool, const std::string& path);
std::vector<std::string> policy_names();

}  // namespace sluice
