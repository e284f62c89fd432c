// The `model` and `adapter` label values of the latency histograms (sluice_request_duration_seconds,
// sluice_ttft_seconds, sluice_itl_seconds), derived once per config from the configured models.
//
// Algorithm: every configured client-facing name (ModelRoute) maps to the pair the engine serves:
//   base model   -> {model: its name,              adapter: "-"}
//   LoRA adapter -> {model: its base (adapter_of), adapter: its name}
//   alias        -> the pair of its target (an alias of an adapter is that adapter)
// Cardinality is bounded by the config, not by clients: only configured names become values, and
// only the first kMaxModelLabels base models and kMaxAdapterLabels adapters (in config order, so
// the same config always gives the same labels); later ones are folded into "other". A request
// whose model is not configured (rejected before it resolves) is {"-", "-"}.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <string_view>

#include "core/config.h"

namespace sluice {

inline constexpr size_t kMaxModelLabels = 32;
inline constexpr size_t kMaxAdapterLabels = 64;
inline constexpr std::string_view kUnresolvedModelLabel = "-";  // also "no adapter"
inline constexpr std::string_view kOtherModelLabel = "other";

struct ModelLabels {
  std::string pool;
  std::string model;
  std::string adapter;
  bool operator==(const ModelLabels&) const = default;
};

// Client-facing model name -> its labels, for every model in `config`.
std::map<std::string, ModelLabels, std::less<>> model_labels(const Config& config);

}  // namespace sluice
