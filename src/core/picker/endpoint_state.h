// What the picker knows about one endpoint: the engine's own signals (scraped from /metrics and
// mapped from vLLM / SGLang / TRT-LLM names) and the gateway's own accounting, updated at dispatch
// and completion. Scraped values are only trusted while fresh; see PoolRouter::rank.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/time.h"

namespace sluice {

struct EngineSignals {
  bool present = false;        // at least one successful scrape
  Time scraped_at{};           // when the last successful scrape finished
  double waiting = 0;          // requests queued inside the engine
  double running = 0;          // requests in the engine's batch
  double kv_usage = 0;         // fraction 0..1
  int block_size = 16;         // tokens per KV block (cache_config_info)
  int64_t kv_capacity_blocks = 0;  // 0 = unknown
  std::vector<std::string> lora_running, lora_waiting;
  int max_lora = 0;            // 0 = LoRA not enabled / unknown
  double prefix_queries = 0;   // cumulative, in tokens
  double prefix_hits = 0;      // cumulative, in tokens
  double duty_cycle = -1;      // fraction of time busy, -1 = unknown
  double prefix_hit_rate = -1; // engine-reported hit-rate gauge (SGLang), -1 = not reported
  // The engine's inter-token latency histogram's cumulative sum (seconds) and count (gaps between
  // tokens, every request's), -1 = not reported: over a span, its mean ITL (PoolRouter: the pace).
  double itl_sum_s = -1, itl_count = -1;
};

struct EndpointLoad {
  int64_t in_flight = 0;            // requests dispatched and not yet finished
  int64_t prefill_tokens = 0;       // uncached input tokens of requests not yet past first token
  double prefill_pairs = 0;         // their prefill attention token pairs, sum of U x (C + U / 2)
  int64_t decode_tokens = 0;        // remaining output bound of requests past first token
  int64_t assigned_since_scrape = 0;  // dispatches since the last successful scrape
  int64_t picks_total = 0;
  int64_t scrape_errors_total = 0;
  int64_t prefill_requests = 0;     // requests dispatched and not yet past first token
  int64_t context_tokens = 0;       // input + output bound of requests in flight (KV footprint bound)
  int64_t live_context_tokens = 0;  // input + output so far of requests in flight (what decode attention reads)
  int64_t input_tokens_total = 0;   // cumulative input tokens dispatched
  int64_t predicted_cached_tokens_total = 0;  // cumulative predicted cached tokens at dispatch
  int64_t scrape_failures_in_row = 0;  // consecutive scrape errors (0 after a success)
  // The head of the own prefill queue: the oldest request dispatched here and not yet past first
  // token (the engine prefills in arrival order), its uncached tokens and attention pairs, and
  // since when it has been the head (its dispatch, or the first token of the one before it). A
  // policy subtracts the head's progress from prefill_tokens: a burst's leader half prefilled is
  // not a whole prefill ahead of its followers. 0 tokens when the queue is empty.
  int64_t prefill_head_tokens = 0;
  double prefill_head_pairs = 0;
  Time prefill_head_since{};
  // in_flight and prefill_requests (with the live peers' share) when the signals were last scraped:
  // the scrape's waiting and running less these are the requests of other clients. Less the counts
  // of now instead, a request of ours that passed its first token since the scrape looked like a
  // waiting request of another client until the next scrape (a phantom prefill in the queue ahead).
  int64_t in_flight_at_scrape = 0;
  int64_t prefill_requests_at_scrape = 0;
};

// Read-only view handed to policies.
struct EndpointView {
  size_t index = 0;
  std::string_view name;
  bool stale = true;   // signals missing or older than the pool's stale_after
  const EngineSignals* signals = nullptr;
  const EndpointLoad* load = nullptr;
};

}  // namespace sluice
