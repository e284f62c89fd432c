#include "core/picker/scorers/load_estimate.h"

#include <algorithm>

namespace sluice {

LoadEstimate estimate_load(const EndpointView& ep) {
  LoadEstimate e;
  const EngineSignals* s = ep.signals;
  const EndpointLoad& l = *ep.load;
  if (s && s->present && s->kv_capacity_blocks > 0)
    e.capacity_tokens = static_cast<double>(s->kv_capacity_blocks) * std::max(1, s->block_size);
  e.fresh = !ep.stale && s && s->present;
  if (e.fresh) {
    e.waiting = std::max(0.0, s->waiting) + static_cast<double>(std::max<int64_t>(0, l.assigned_since_scrape));
    e.running = std::max(0.0, s->running);
    e.kv_usage = std::clamp(s->kv_usage, 0.0, 1.0);
  } else {
    e.waiting = static_cast<double>(std::max<int64_t>(0, l.prefill_requests));
    e.running = static_cast<double>(std::max<int64_t>(0, l.in_flight - l.prefill_requests));
    e.kv_usage = std::clamp(static_cast<double>(l.context_tokens) / e.capacity_tokens, 0.0, 1.0);
  }
  return e;
}

}  // namespace sluice
