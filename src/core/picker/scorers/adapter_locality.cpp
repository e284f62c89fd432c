#include "core/picker/scorers/adapter_locality.h"

#include <algorithm>

namespace sluice {

bool lora_signals_known(const EndpointView& ep) {
  return !ep.stale && ep.signals && ep.signals->present && ep.signals->max_lora > 0;
}

double adapter_locality_score(const EndpointView& ep, std::string_view adapter) {
  if (adapter.empty()) return 1.0;
  if (!lora_signals_known(ep)) return kAdapterFreeSlot;
  const EngineSignals* s = ep.signals;
  auto has = [&](const std::vector<std::string>& v) { return std::find(v.begin(), v.end(), adapter) != v.end(); };
  if (has(s->lora_running)) return 1.0;
  if (static_cast<int>(s->lora_running.size() + s->lora_waiting.size()) < s->max_lora) return kAdapterFreeSlot;
  if (has(s->lora_waiting)) return 0.6;
  return 0.0;
}

}  // namespace sluice
