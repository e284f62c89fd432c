#include "core/picker/round_robin.h"

namespace sluice {

void RoundRobinPolicy::rank(const PickRequest&, std::span<const EndpointView> endpoints, Time,
                            std::vector<Candidate>& out) {
  out.clear();
  const size_t n = endpoints.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& ep = endpoints[(cursor_ + i) % n];
    out.push_back({ep.index, static_cast<double>(n - i), 0, false});
  }
}

void RoundRobinPolicy::on_dispatch(const PickRequest&, size_t endpoint, Time) { cursor_ = endpoint + 1; }

}  // namespace sluice
