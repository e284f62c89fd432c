// least_request: fewest requests in flight from this gateway (its own accounting, updated at
// dispatch and completion, so it reacts within one request, not one scrape). Ties go to the
// endpoint picked least recently in index order after the last pick, so equal loads rotate.
#pragma once
#include "core/picker/policy.h"

namespace sluice {

class LeastRequestPolicy final : public Policy {
 public:
  std::string_view name() const override { return "least_request"; }
  void rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
            std::vector<Candidate>& out) override;
  void on_dispatch(const PickRequest& req, size_t endpoint, Time now) override { last_ = endpoint; }

 private:
  size_t last_ = 0;
};

}  // namespace sluice
