#include "core/picker/random.h"

#include <algorithm>

namespace sluice {

void RandomPolicy::rank(const PickRequest&, std::span<const EndpointView> endpoints, Time,
                        std::vector<Candidate>& out) {
  out.clear();
  for (const auto& ep : endpoints) out.push_back({ep.index, 0, 0, false});
  std::shuffle(out.begin(), out.end(), rng_);
  for (size_t i = 0; i < out.size(); ++i) out[i].score = static_cast<double>(out.size() - i);
}

}  // namespace sluice
