#include "core/picker/scorers/queue_depth.h"

#include <algorithm>

namespace sluice {

void queue_depth_scores(std::span<const double> queues, std::span<double> out) {
  if (queues.empty()) return;
  auto [lo, hi] = std::minmax_element(queues.begin(), queues.end());
  const double min_q = *lo, max_q = *hi;
  for (size_t i = 0; i < queues.size() && i < out.size(); ++i)
    out[i] = max_q == min_q ? 1.0 : std::clamp((max_q - queues[i]) / (max_q - min_q), 0.0, 1.0);
}

}  // namespace sluice
