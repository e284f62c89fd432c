#include "core/admission/outcome.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace sluice {

std::string_view to_string(RejectReason r) {
  switch (r) {
    case RejectReason::rate_limit: return "rate_limit";
    case RejectReason::too_large: return "too_large";
    case RejectReason::queue_full: return "queue_full";
    case RejectReason::queue_timeout: return "queue_timeout";
    case RejectReason::shed: return "shed";
    case RejectReason::unauthorized: return "unauthorized";
    case RejectReason::over_slo: return "over_slo";
  }
  return "unknown";
}

Duration jittered(Duration wait, AdmissionRng& rng, const JitterPolicy& policy) {
  if (wait < Duration::zero()) wait = Duration::zero();
  const double spread_ns =
      std::max(static_cast<double>(wait.count()) * std::max(0.0, policy.spread),
               static_cast<double>(policy.min_spread.count()));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  return wait + Duration(static_cast<int64_t>(u(rng) * spread_ns));
}

std::string format_go_duration(Duration d) {
  if (d <= Duration::zero()) return "0s";
  const int64_t ms = (d.count() + 999'999) / 1'000'000;  // round up to whole ms
  if (ms < 1000) return fmt::format("{}ms", ms);
  const int64_t h = ms / 3'600'000;
  const int64_t m = (ms / 60'000) % 60;
  const int64_t s = (ms / 1000) % 60;
  const int64_t frac = ms % 1000;
  std::string sec = std::to_string(s);
  if (frac != 0) {
    std::string f = fmt::format("{:03}", frac);
    while (!f.empty() && f.back() == '0') f.pop_back();
    sec += "." + f;
  }
  if (h > 0) return fmt::format("{}h{}m{}s", h, m, sec);
  if (m > 0) return fmt::format("{}m{}s", m, sec);
  return sec + "s";
}

HeaderList Denial::headers() const {
  HeaderList out;
  if (retry_after > Duration::zero()) {
    const int64_t ms = (retry_after.count() + 999'999) / 1'000'000;
    const int64_t secs = std::max<int64_t>(1, (ms + 999) / 1000);
    out.emplace_back("retry-after", std::to_string(secs));
    out.emplace_back("retry-after-ms", std::to_string(ms));
  }
  if (!should_retry) out.emplace_back("x-should-retry", "false");
  return out;
}

Denial unauthorized_denial(bool key_missing) {
  Denial d;
  d.reason = RejectReason::unauthorized;
  d.should_retry = false;
  d.error.status = 401;
  d.error.type = "invalid_request_error";
  if (key_missing) {
    d.error.message =
        "You didn't provide an API key. You need to provide your API key in an Authorization "
        "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).";
    d.error.code = "missing_api_key";
  } else {
    // Never echo the key, not even a prefix.
    d.error.message = "Incorrect API key provided.";
    d.error.code = "invalid_api_key";
  }
  return d;
}

namespace {
Denial queue_denial(RejectReason reason, int status, std::string type, std::string code,
                    std::string message, Duration retry_base, AdmissionRng& rng,
                    const JitterPolicy& jitter) {
  Denial d;
  d.reason = reason;
  d.error.status = status;
  d.error.type = std::move(type);
  d.error.code = std::move(code);
  d.error.message = std::move(message);
  d.retry_after = jittered(retry_base, rng, jitter);
  d.error.message += fmt::format(" Please try again in {}.", format_go_duration(d.retry_after));
  return d;
}
}  // namespace

Denial queue_full_denial(Duration retry_base, AdmissionRng& rng, const JitterPolicy& jitter) {
  return queue_denial(RejectReason::queue_full, 429, "requests", "queue_full",
                      "The gateway's request queue is full.", retry_base, rng, jitter);
}

Denial shed_denial(Duration retry_base, AdmissionRng& rng, const JitterPolicy& jitter) {
  return queue_denial(RejectReason::shed, 429, "requests", "shed",
                      "The pool is saturated and this request's priority is sheddable.", retry_base,
                      rng, jitter);
}

Denial over_slo_denial(Duration retry_base, AdmissionRng& rng, const JitterPolicy& jitter) {
  return queue_denial(RejectReason::over_slo, 429, "requests", "over_slo",
                      "Every endpoint of the model's pool is too loaded to serve this request within its "
                      "latency SLO; it was refused rather than served late.",
                      retry_base, rng, jitter);
}

Denial queue_timeout_denial(Duration waited, Duration retry_base, AdmissionRng& rng,
                            const JitterPolicy& jitter) {
  return queue_denial(
      RejectReason::queue_timeout, 503, "server_error", "queue_timeout",
      fmt::format("The request waited {} in the gateway's queue without capacity becoming free.",
                  format_go_duration(waited)),
      retry_base, rng, jitter);
}

}  // namespace sluice
