// power_of_two: the power of two choices. Two distinct endpoints are drawn at random (seeded
// generator, deterministic per seed); the one with fewer requests in flight from this gateway
// comes first (tie: the first drawn), the other second, then every other endpoint by load (ties
// rotate). One endpoint: itself. No parameters.
#pragma once
#include <random>

#include "core/picker/policy.h"

namespace sluice {

class PowerOfTwoPolicy final : public Policy {
 public:
  explicit PowerOfTwoPolicy(uint64_t seed) : rng_(seed) {}
  std::string_view name() const override { return "power_of_two"; }
  void rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
            std::vector<Candidate>& out) override;
  void on_dispatch(const PickRequest& req, size_t endpoint, Time now) override { cursor_ = endpoint + 1; }

 private:
  std::mt19937_64 rng_;
  size_t cursor_ = 0;
};

}  // namespace sluice
