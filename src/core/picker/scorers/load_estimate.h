// The staleness rule, in one place: what the scorers believe about an endpoint's load.
//
// Fresh signals (scraped within the pool's stale_after): the engine's own numbers, corrected by the
// gateway's dispatches the scrape has not seen yet:
//   waiting  = scraped waiting + assigned_since_scrape        (burst spreading)
//   running  = scraped running
//   kv_usage = scraped KV usage
// Stale or missing signals: the scraped values are not trusted at all (neither the last value nor a
// pessimistic "saturated" guess); the gateway's own accounting stands in:
//   waiting  = own requests not yet past their first token
//   running  = own requests decoding
//   kv_usage = own in-flight context tokens (input + output bound) / KV capacity in tokens
// So staleness by itself never makes an endpoint look saturated (no scraped queue is assumed) or
// idle (own in-flight work still counts). The KV capacity and block size are configuration, kept from
// the last successful scrape; unknown capacity defaults to 31,250 blocks of 16 tokens.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/picker/endpoint_state.h"

namespace sluice {

inline constexpr int64_t kDefaultKvCapacityTokens = 31250 * 16;

struct LoadEstimate {
  bool fresh = false;
  double waiting = 0;
  double running = 0;
  double kv_usage = 0;  // 0..1
  double capacity_tokens = kDefaultKvCapacityTokens;
};

// Inline: it is called once per endpoint of every decision (the sluice policy's hot loop).
[[gnu::always_inline]] inline LoadEstimate estimate_load(const EndpointView& ep) {
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

// An accounting counter as a double, never below 0 (the load terms' and the samples' one rule).
[[gnu::always_inline]] inline double nonneg(int64_t x) { return static_cast<double>(std::max<int64_t>(0, x)); }

// Other clients' requests in a fresh scrape: what it saw less what the gateways had there when it
// was taken (EndpointLoad::in_flight_at_scrape, the peers' included). The engine counts a request
// in its prefill step as running, so the total is split with the waiting share as a lower bound.
// One rule for the sluice policy's ranking and PoolRouter's decode samples (DecodeSample::others).
struct ExternalLoad {
  double waiting = 0;
  double running = 0;
};
[[gnu::always_inline]] inline ExternalLoad external_load(const EngineSignals& s, const EndpointLoad& l) {
  ExternalLoad e;
  const double ext = std::max(0.0, s.waiting + s.running - nonneg(l.in_flight_at_scrape));
  e.waiting = std::min(ext, std::max(0.0, s.waiting - nonneg(l.prefill_requests_at_scrape)));
  e.running = ext - e.waiting;
  return e;
}

}  // namespace sluice
