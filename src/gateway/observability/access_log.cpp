#include "gateway/observability/access_log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "core/json_escape.h"
#include "core/openai/request.h"

#include <charconv>
#include <chrono>
#include <ctime>

namespace sluice {

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::ok: return "ok";
    case Outcome::upstream_error: return "upstream_error";
    case Outcome::client_cancelled: return "client_cancelled";
    case Outcome::timeout: return "timeout";
    case Outcome::rejected: return "rejected";
  }
  return "unknown";
}

namespace {
// Client-chosen values (model, tenant, path, id) are cut to this many bytes in a log line, so one
// request cannot write megabytes of log (truncate_echo marks the cut with "...").
constexpr size_t kMaxLoggedValue = 256;

void field(std::string& out, std::string_view key, std::string_view value) {
  out += ",\"";
  out += key;
  out += "\":";
  if (value.empty()) value = "-";  // one spelling of "none" in every line
  if (value.size() > kMaxLoggedValue) append_json_string(out, truncate_echo(value, kMaxLoggedValue));
  else append_json_string(out, value);
}
void field(std::string& out, std::string_view key, int64_t value) {
  out += fmt::format(",\"{}\":{}", key, value);
}
void optional_tokens(std::string& out, std::string_view key, int64_t value) {
  if (value < 0) out += fmt::format(",\"{}\":null", key);
  else field(out, key, value);
}
}  // namespace

std::string rfc3339_now() {
  const auto now = std::chrono::system_clock::now();
  const auto secs = std::chrono::time_point_cast<std::chrono::seconds>(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - secs).count();
  const std::time_t t = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, ms);
}

int client_retry_of(std::string_view header) {
  unsigned n = 0;  // unsigned: a sign is refused
  const auto [end, ec] = std::from_chars(header.data(), header.data() + header.size(), n);
  return header.size() <= 4 && ec == std::errc() && end == header.data() + header.size() ? static_cast<int>(n) : -1;
}

std::string access_log_line(const RequestRecord& r, std::string_view ts) {
  std::string out = "{\"ts\":";
  out.reserve(448);
  append_json_string(out, ts.empty() ? std::string_view("-") : ts);
  out += ",\"id\":";
  if (r.id.empty()) append_json_string(out, "-");
  else if (r.id.size() > kMaxLoggedValue) append_json_string(out, truncate_echo(r.id, kMaxLoggedValue));
  else append_json_string(out, r.id);
  field(out, "method", r.method);
  field(out, "client", r.client);
  field(out, "tenant", r.tenant);
  if (r.priority) field(out, "priority", int64_t{*r.priority});
  else out += ",\"priority\":null";
  field(out, "model", r.model);
  field(out, "pool", r.pool);
  field(out, "endpoint", r.endpoint);
  field(out, "path", r.path);
  field(out, "status", r.status);
  field(out, "outcome", to_string(r.outcome));
  if (r.reason != Reason::none) field(out, "reason", to_string(r.reason));
  out += r.stream ? ",\"stream\":true" : ",\"stream\":false";
  field(out, "attempts", r.attempts);
  if (r.client_retry >= 0) field(out, "client_retry", r.client_retry);
  optional_tokens(out, "prompt_tokens", r.prompt_tokens);
  optional_tokens(out, "completion_tokens", r.completion_tokens);
  optional_tokens(out, "cached_tokens", r.cached_tokens);
  optional_tokens(out, "predicted_cached_tokens", r.predicted_cached_tokens);
  field(out, "token_events", r.token_events);
  if (r.queue_time) out += fmt::format(",\"queue_ms\":{:.3f}", to_millis(*r.queue_time));
  else out += ",\"queue_ms\":null";
  if (r.ttft) out += fmt::format(",\"ttft_ms\":{:.3f}", to_millis(*r.ttft));
  else out += ",\"ttft_ms\":null";
  if (r.expected_ttft_ms > 0) out += fmt::format(",\"expected_ttft_ms\":{:.3f}", r.expected_ttft_ms);
  else out += ",\"expected_ttft_ms\":null";
  out += fmt::format(",\"max_gap_ms\":{:.3f},\"duration_ms\":{:.3f}}}", to_millis(r.max_gap), to_millis(r.duration));
  return out;
}

AccessLog::AccessLog(const std::string& path) {
  if (path == "off" || path.empty()) return;
  if (path == "-") logger_ = std::make_shared<spdlog::logger>("access", std::make_shared<spdlog::sinks::stdout_sink_mt>());
  else logger_ = std::make_shared<spdlog::logger>("access", std::make_shared<spdlog::sinks::basic_file_sink_mt>(path));
  logger_->set_pattern("%v");
  logger_->flush_on(spdlog::level::off);
}

AccessLog::~AccessLog() { flush(); }

void AccessLog::write(const RequestRecord& r) {
  if (!logger_) return;
  logger_->info(access_log_line(r, rfc3339_now()));
}

void AccessLog::flush() {
  if (logger_) logger_->flush();
}

}  // namespace sluice
