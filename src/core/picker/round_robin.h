// round_robin: the classic baseline. Endpoints are ranked starting from a cursor that advances by
// one per dispatch, so N requests go to N different endpoints in turn regardless of their cost.
#pragma once
#include "core/picker/policy.h"

namespace sluice {

class RoundRobinPolicy final : public Policy {
 public:
  std::string_view name() const override { return "round_robin"; }
  void rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
            std::vector<Candidate>& out) override;
  void on_dispatch(const PickRequest& req, size_t endpoint, Time now) override;

 private:
  size_t cursor_ = 0;
};

}  // namespace sluice
