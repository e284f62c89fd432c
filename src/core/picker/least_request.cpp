#include "core/picker/least_request.h"

#include <algorithm>

namespace sluice {

void LeastRequestPolicy::rank(const PickRequest&, std::span<const EndpointView> endpoints, Time,
                              std::vector<Candidate>& out) {
  out.clear();
  const size_t n = endpoints.size();
  for (const auto& ep : endpoints) out.push_back({ep.index, -static_cast<double>(ep.load->in_flight), 0, false});
  // Rotation distance from the last pick breaks ties without randomness.
  auto distance = [&](size_t idx) { return (idx + n - last_ - 1) % std::max<size_t>(n, 1); };
  std::stable_sort(out.begin(), out.end(), [&](const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    return distance(a.endpoint) < distance(b.endpoint);
  });
}

}  // namespace sluice
