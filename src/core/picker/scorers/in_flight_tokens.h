// In-flight tokens scorer (llm-d's token load): 1 - min(1, tokens / 4,194,304), in [0,1], where
// tokens = the gateway's own in-flight prefill tokens + remaining decode bounds on the endpoint.
// Own accounting only, updated at dispatch and completion, so it is never stale.
#pragma once
#include <algorithm>

#include "core/picker/endpoint_state.h"

namespace sluice {

inline constexpr double kInFlightTokensSaturation = 4194304.0;

inline double in_flight_tokens_score(const EndpointLoad& load, double saturation_tokens = kInFlightTokensSaturation) {
  const double t = static_cast<double>(std::max<int64_t>(0, load.prefill_tokens + load.decode_tokens));
  return 1.0 - std::min(1.0, t / std::max(1.0, saturation_tokens));
}

}  // namespace sluice
