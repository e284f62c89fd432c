// Reads a pool's policy_params (PoolConfig::policy_params) with defaults, remembering which names
// were asked for, so the factory can reject a misspelt parameter instead of silently ignoring it.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>

#include "core/config.h"

namespace sluice {

class PolicyParams {
 public:
  PolicyParams(const PoolConfig& pool) : pool_(pool.name), params_(pool.policy_params) {}
  PolicyParams(std::map<std::string, double> params) : params_(std::move(params)) {}

  double get(const std::string& name, double fallback) {
    known_.insert(name);
    auto it = params_.find(name);
    return it == params_.end() ? fallback : it->second;
  }
  // Throws ConfigError naming the first parameter no get() asked for.
  void reject_unknown(std::string_view policy) const {
    if (auto k = first_unknown()) {
      std::string list;
      for (const auto& n : known_) list += (list.empty() ? "" : ", ") + n;
      throw ConfigError("pool '" + pool_ + "': policy_params." + *k + ": unknown parameter for policy '" +
                        std::string(policy) + "' (known: " + (list.empty() ? "none" : list) + ")");
    }
  }
  // The first parameter no get() asked for, if any.
  std::optional<std::string> first_unknown() const {
    for (const auto& [k, v] : params_)
      if (!known_.count(k)) return k;
    return std::nullopt;
  }
  std::string known_list() const {
    std::string list;
    for (const auto& n : known_) list += (list.empty() ? "" : ", ") + n;
    return list.empty() ? "none" : list;
  }

 private:
  std::string pool_;
  std::map<std::string, double> params_;
  std::set<std::string> known_;
};

}  // namespace sluice
