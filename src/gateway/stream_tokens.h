// The output tokens of one relayed stream, as its server-sent events show them. The proxy
// (proxy.cpp) and the Endpoint Picker's exchange (extproc/epp_exchange.cpp) both count them here, so
// that what a first token means (the TTFT, the endpoint's decode begins, the picker's calibration),
// what a later one means (a gap: the ITL) and when the shared counters hear of them are one rule.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>

#include "core/metrics/histogram.h"
#include "core/openai/response_fields.h"
#include "core/picker/policy.h"
#include "core/picker/pool_router.h"
#include "gateway/admission_runtime.h"
#include "gateway/observability/access_log.h"

namespace sluice {

class StreamTokens {
 public:
  using Clock = std::chrono::steady_clock;

  // One event that carried output, seen at `now`, of a request that started at `start` and was
  // picked at `picked`. The first is its first token: the record's TTFT, the dispatch's first token
  // (its decode begins: `gateway_now()` on the gateway's clock, read only then) and the picker's
  // calibration (the TTFT from the pick over the pick's estimate, into `ttft_estimate`). A later
  // one's gap to the last is the record's longest gap and one ITL observation (`itl`: the model's
  // series, null when it has none).
  template <class GatewayNow>
  void on_token(RequestRecord& rec, DispatchGuard& guard, GatewayNow&& gateway_now, Histogram& ttft_estimate,
                Histogram* itl, Clock::time_point start, Clock::time_point picked, Clock::time_point now) {
    ++rec.token_events;
    if (!rec.ttft) {
      rec.ttft = now - start;
      guard.on_first_token(gateway_now());
      if (const double r = ttft_estimate_ratio(rec.expected_ttft_ms, to_millis(now - picked)); r >= 0)
        ttft_estimate.observe(r);
    } else {
      const auto gap = now - last_token_;
      rec.max_gap = std::max<Duration>(rec.max_gap, gap);
      if (itl) itl->observe(to_seconds(gap));
    }
    last_token_ = now;
    ++unflushed_;
  }

  // The tokens counted since the last flush, to the dispatch (the router's per-endpoint decode
  // accounting) and the admission ticket (a token budget's delivered count; null: none). Called once
  // per relayed read, not per token: both take locks shared across workers.
  void flush(DispatchGuard& guard, AdmissionTicket* ticket) {
    if (unflushed_ == 0) return;
    guard.on_tokens(unflushed_);
    if (ticket) ticket->on_output(unflushed_);
    unflushed_ = 0;
  }

 private:
  Clock::time_point last_token_{};
  int64_t unflushed_ = 0;  // relayed, not yet told to the dispatch and the ticket
};

// The usage an answer reported, into its access-log record.
inline void take_usage(RequestRecord& rec, const Usage& u) {
  rec.prompt_tokens = u.prompt_tokens;
  rec.completion_tokens = u.completion_tokens;
  rec.cached_tokens = u.cached_tokens;
}

}  // namespace sluice
