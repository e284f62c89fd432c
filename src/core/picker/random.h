// random: a uniformly random order from a seeded generator (deterministic for a seed, so the fleet
// simulator can compare policies exactly).
#pragma once
#include <random>

#include "core/picker/policy.h"

namespace sluice {

class RandomPolicy final : public Policy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}
  std::string_view name() const override { return "random"; }
  void rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
            std::vector<Candidate>& out) override;

 private:
  std::mt19937_64 rng_;
};

}  // namespace sluice
