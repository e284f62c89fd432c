// Adapter locality scorer (llm-d's LoRA affinity), in [0,1]:
//   base model request (no adapter)                    1.0
//   adapter in the endpoint's running adapters           1.0
//   a free slot (running + waiting adapters < max_lora)  0.8
//   adapter in the endpoint's waiting adapters           0.6
//   otherwise (all slots held by other adapters)         0.0
// LoRA not enabled or not reported (max_lora 0) scores 0.8: the engine decides. Stale signals are
// not trusted: 0.8 too, so staleness neither attracts nor repels an adapter's requests.
#pragma once
#include <string_view>

#include "core/picker/endpoint_state.h"

namespace sluice {

// The score of a free slot (and of no or stale LoRA signals).
inline constexpr double kAdapterFreeSlot = 0.8;

// Fresh signals from an engine with LoRA enabled (max_lora > 0): the scores below other than
// "the engine decides" rest on them.
bool lora_signals_known(const EndpointView& endpoint);

double adapter_locality_score(const EndpointView& endpoint, std::string_view adapter);

}  // namespace sluice
