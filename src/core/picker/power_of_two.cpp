#include "core/picker/power_of_two.h"

#include "core/picker/ranking.h"

namespace sluice {

void PowerOfTwoPolicy::rank(const PickRequest&, std::span<const EndpointView> endpoints, Time,
                            std::vector<Candidate>& out) {
  out.clear();
  const size_t n = endpoints.size();
  for (const auto& v : endpoints) out.push_back({v.index, -static_cast<double>(v.load->in_flight), 0, false});
  if (n >= 2) {
    size_t a = rng_() % n, b = rng_() % (n - 1);
    if (b >= a) ++b;
    size_t first = endpoints[b].load->in_flight < endpoints[a].load->in_flight ? b : a;
    size_t second = first == a ? b : a;
    out[first].score = 2e18;
    out[second].score = 1e18;
  }
  sort_candidates(out, endpoints, cursor_, pool_size_of(endpoints));
}

}  // namespace sluice
