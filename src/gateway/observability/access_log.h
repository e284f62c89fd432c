// The end of every request: its explicit outcome and the record that the one completion path
// (Gateway::complete) turns into a structured JSON access-log line and metrics.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "core/time.h"
#include "gateway/observability/reason.h"

namespace spdlog {
class logger;
}

namespace sluice {

enum class Outcome { ok, upstream_error, client_cancelled, timeout, rejected };
std::string_view to_string(Outcome o);

struct RequestRecord {
  std::string id;          // x-request-id (passed through or generated)
  std::string tenant;      // x-gateway-inference-fairness-id, else body `user`, else "-"
  bool tenant_configured = false;  // `tenant` is a configured tenant's name (a bounded label value)
  std::string model;       // as the client named it
  std::string pool;
  std::string endpoint;    // the last endpoint tried
  Reason reason = Reason::none;  // why it was rejected / failed (reason.h)
  std::string path;
  std::string method;      // the request's HTTP method ("-" before one was read)
  std::string client;      // the client's address, host:port
  std::optional<int> priority;         // the effective priority, once admission knew it
  std::optional<Duration> queue_time;  // time waited in the gateway's admission queue
  std::string_view listener = "api";  // "api" or "admin"
  int status = 0;
  Outcome outcome = Outcome::ok;
  bool stream = false;
  int attempts = 0;
  int64_t prompt_tokens = -1;      // -1: unknown (no usage reported)
  int64_t completion_tokens = -1;
  int64_t cached_tokens = -1;
  // What the picker predicted the engine would find cached on the endpoint it chose (-1: no pick),
  // beside cached_tokens, the engine's own figure: the prefix index's accuracy per request.
  int64_t predicted_cached_tokens = -1;
  // The TTFT, in ms from its pick, the picker expected on the endpoint it first chose (-1: none, or
  // the policy has no estimate), beside ttft_ms.
  double expected_ttft_ms = -1;
  int64_t token_events = 0;        // streamed chunks that carried output
  std::optional<Duration> ttft;
  Duration max_gap{0};             // longest gap between streamed token events
  Duration duration{0};
  bool cancelled_while_streaming = false;
  // The client's own retry number: the OpenAI and Anthropic SDKs send `x-stainless-retry-count` (0 on
  // a first attempt, n on the n-th retry). -1: absent, or not a plain number.
  int client_retry = -1;
};

// `x-stainless-retry-count`'s value: 0-9999 as sent, -1 for anything else (absent, signed, spaced,
// too long).
int client_retry_of(std::string_view header);

// Writes one JSON line per request. Path "-" is stdout, "off" disables it, anything else a file.
class AccessLog {
 public:
  explicit AccessLog(const std::string& path);
  ~AccessLog();
  void write(const RequestRecord& r);
  void flush();

 private:
  std::shared_ptr<spdlog::logger> logger_;
};

// The JSON line for a record (without newline). `ts` is an RFC 3339 UTC timestamp with
// milliseconds (the time the request ended); empty strings are written as "-", unknown numbers as null.
std::string access_log_line(const RequestRecord& r, std::string_view ts = {});
// RFC 3339 UTC with milliseconds, e.g. 2026-12-01T13:05:07.123Z.
std::string rfc3339_now();

}  // namespace sluice
