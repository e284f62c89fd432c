/*
 * Admission outcomes: why a request was refused, the HTTP answer for it, and the client-facing
 * wait. Every refusal anywhere in the admission layer is a `Denial` built here, so status codes,
 * OpenAI error bodies and Retry-After handling are decided in one place.
 *
 *   reason         status  OpenAI error type / code                      retry
 *   unauthorized   401     invalid_request_error / invalid_api_key       no
 *   too_large      429     tokens|requests / rate_limit_exceeded         no (x-should-retry: false)
 *   rate_limit     429     tokens|requests / rate_limit_exceeded         after the bucket refill time
 *   queue_full     429     requests / queue_full                         after a jittered base
 *   shed           429     requests / shed                               after a jittered base
 *   over_slo       429     requests / over_slo                           after a jittered base
 *   queue_timeout  503     server_error / queue_timeout                  after a jittered base
 *
 * Retry-After is always jittered (a fleet told to come back at the same instant oscillates):
 *   jittered = wait + U[0, max(wait * spread, min_spread)]   (defaults spread 0.25, min 10 ms)
 * It is never earlier than the true refill time, so an obedient client's retry fits. Headers:
 * `retry-after` in whole seconds (rounded up, at least 1) and `retry-after-ms` (rounded up), which
 * the OpenAI and Anthropic SDKs honour first. The RNG is passed in (one per driver thread, seeded),
 * so the virtual-time simulator is reproducible.
 *
 * Durations in x-ratelimit-reset-* and in "Please try again in ..." use Go's duration format at
 * millisecond resolution, rounded up: `0s`, `20ms`, `1.146s`, `6m0s`, `1h2m3.5s`.
 */
#pragma once
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/openai/request.h"
#include "core/time.h"

namespace sluice {

// over_slo: the picker found every endpoint too loaded to serve the request within its latency SLO
// (Candidate::shed, core/picker/policy.h); refused rather than served late.
enum class RejectReason : uint8_t { rate_limit, too_large, queue_full, queue_timeout, shed, unauthorized, over_slo };
inline constexpr size_t kRejectReasonCount = 7;
std::string_view to_string(RejectReason r);

using AdmissionRng = std::mt19937_64;

struct JitterPolicy {
  double spread = 0.25;
  Duration min_spread = std::chrono::milliseconds(10);
};

// wait + U[0, max(wait * spread, min_spread)].
Duration jittered(Duration wait, AdmissionRng& rng, const JitterPolicy& policy = {});

// Go duration format, milliseconds, rounded up ("20ms", "1.146s", "6m0s").
std::string format_go_duration(Duration d);

// Response headers produced by the admission layer; names are static literals.
using HeaderList = std::vector<std::pair<std::string_view, std::string>>;

struct Denial {
  RejectReason reason = RejectReason::rate_limit;
  ApiError error;                  // status + OpenAI error fields; body = error_json(error)
  Duration retry_after{0};         // jittered; 0 = no retry-after headers
  bool should_retry = true;        // false -> `x-should-retry: false`

  // Extra response headers for this denial: retry-after, retry-after-ms, x-should-retry.
  HeaderList headers() const;
};

Denial unauthorized_denial(bool key_missing);
// For queue_full, shed and queue_timeout: jittered(base) retry-after.
Denial queue_full_denial(Duration retry_base, AdmissionRng& rng, const JitterPolicy& jitter = {});
Denial shed_denial(Duration retry_base, AdmissionRng& rng, const JitterPolicy& jitter = {});
Denial over_slo_denial(Duration retry_base, AdmissionRng& rng, const JitterPolicy& jitter = {});
Denial queue_timeout_denial(Duration waited, Duration retry_base, AdmissionRng& rng,
                            const JitterPolicy& jitter = {});

}  // namespace sluice
