#include "gateway/observability/access_log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "core/json_escape.h"
#include "core/openai/request.h"

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

std::string access_log_line(const RequestRecord& r) {
  std::string out = "{\"id\":";
  out.reserve(384);
  append_json_string(out, r.id.size() > kMaxLoggedValue ? truncate_echo(r.id, kMaxLoggedValue) : r.id);
  field(out, "tenant", r.tenant);
  field(out, "model", r.model);
  field(out, "pool", r.pool);
  field(out, "endpoint", r.endpoint);
  field(out, "path", r.path);
  field(out, "status", r.status);
  field(out, "outcome", to_string(r.outcome));
  if (r.reason != Reason::none) field(out, "reason", to_string(r.reason));
  out += r.stream ? ",\"stream\":true" : ",\"stream\":false";
  field(out, "attempts", r.attempts);
  optional_tokens(out, "prompt_tokens", r.prompt_tokens);
  optional_tokens(out, "completion_tokens", r.completion_tokens);
  optional_tokens(out, "cached_tokens", r.cached_tokens);
  field(out, "token_events", r.token_events);
  if (r.ttft) out += fmt::format(",\"ttft_ms\":{:.3f}", to_millis(*r.ttft));
  else out += ",\"ttft_ms\":null";
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
  logger_->info(access_log_line(r));
}

void AccessLog::flush() {
  if (logger_) logger_->flush();
}

}  // namespace sluice
