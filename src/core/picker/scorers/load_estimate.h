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

LoadEstimate estimate_load(const EndpointView& endpoint);

}  // namespace sluice
