#include "sim/openai_format.h"

#include "core/json_escape.h"

#include <fmt/format.h>

#include <array>
#include <cmath>

namespace sluice::sim {

void json_quote(std::string& out, std::string_view s) { append_json_string(out, s); }

std::string_view token_text(engine::TokenId t) {
  static constexpr std::array<std::string_view, 32> words = {
      " the", " model", " token", " of",   " and",  " a",     " route", " cache", " to",    " in",   " is",
      " fast", " queue", " that", " for",   " with", " data",  " on",    " it",    " block", " as",   " by",
      " we",  " this",  " gate", " flow",  " time", " load",  " more",  " can",   " from",  " sim"};
  return words[t % words.size()];
}

namespace {

std::string quoted(std::string_view s) {
  std::string out;
  json_quote(out, s);
  return out;
}

std::string finish_json(std::string_view finish) { return finish.empty() ? "null" : quoted(finish); }

std::string usage_json(const Usage& u) {
  return fmt::format(
      R"({{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}}}})",
      u.prompt_tokens, u.prompt_tokens + u.completion_tokens, u.completion_tokens, u.cached_tokens);
}

std::string head(const ResponseIds& ids, std::string_view object) {
  return fmt::format(R"({{"id":{},"object":"{}","created":{},"model":{},)", quoted(ids.id), object, ids.created,
                     quoted(ids.model));
}

std::string event(std::string json) { return "data: " + json + "\n\n"; }

}  // namespace

std::string chat_role_event(const ResponseIds& ids) {
  return event(head(ids, "chat.completion.chunk") +
               R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
}

std::string chat_delta_event(const ResponseIds& ids, std::string_view content, std::string_view finish_reason) {
  std::string tail = finish_reason.empty() ? R"("finish_reason":null)"
                                           : fmt::format(R"("finish_reason":{},"stop_reason":null)", quoted(finish_reason));
  return event(head(ids, "chat.completion.chunk") +
               fmt::format(R"("choices":[{{"index":0,"delta":{{"content":{}}},"logprobs":null,{}}}]}})", quoted(content),
                           tail));
}

std::string completion_delta_event(const ResponseIds& ids, std::string_view text, std::string_view finish_reason) {
  return event(head(ids, "text_completion") +
               fmt::format(R"("choices":[{{"index":0,"text":{},"logprobs":null,"finish_reason":{},"stop_reason":null}}]}})",
                           quoted(text), finish_json(finish_reason)));
}

std::string usage_event(const ResponseIds& ids, bool chat, const Usage& u) {
  return event(head(ids, chat ? "chat.completion.chunk" : "text_completion") +
               fmt::format(R"("choices":[],"usage":{}}})", usage_json(u)));
}

std::string error_body(std::string_view message, std::string_view type, int code) {
  return fmt::format(R"({{"error":{{"message":{},"type":{},"param":null,"code":{}}}}})", quoted(message), quoted(type),
                     code);
}

std::string error_event(std::string_view message, std::string_view type, int code) {
  return event(error_body(message, type, code));
}

std::string_view error_type_for(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 404: return "NotFoundError";
    case 429: return "RateLimitError";
    case 503: return "ServiceUnavailableError";
    default: return "InternalServerError";
  }
}

std::string chat_response(const ResponseIds& ids, std::string_view content, std::string_view finish_reason,
                          const Usage& u) {
  return head(ids, "chat.completion") +
         fmt::format(R"("choices":[{{"index":0,"message":{{"role":"assistant","content":{},"refusal":null,)"
                     R"("annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null}},)"
                     R"("logprobs":null,"finish_reason":{},"stop_reason":null}}],"service_tier":null,)"
                     R"("system_fingerprint":null,"usage":{},"prompt_logprobs":null,"kv_transfer_params":null}})",
                     quoted(content), finish_json(finish_reason), usage_json(u));
}

std::string completion_response(const ResponseIds& ids, std::string_view text, std::string_view finish_reason,
                                const Usage& u) {
  return head(ids, "text_completion") +
         fmt::format(R"("choices":[{{"index":0,"text":{},"logprobs":null,"finish_reason":{},"stop_reason":null,)"
                     R"("prompt_logprobs":null}}],"service_tier":null,"system_fingerprint":null,"usage":{},)"
                     R"("kv_transfer_params":null}})",
                     quoted(text), finish_json(finish_reason), usage_json(u));
}

std::string embedding_response(const ResponseIds& ids, size_t num_inputs, size_t dims, uint64_t seed, const Usage& u) {
  std::string out = head(ids, "list") + R"("data":[)";
  uint64_t x = seed | 1;
  for (size_t i = 0; i < num_inputs; ++i) {
    if (i) out += ',';
    out += fmt::format(R"({{"index":{},"object":"embedding","embedding":[)", i);
    double norm = 0;
    std::vector<double> v(dims);
    for (auto& e : v) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      e = double(x % 20001) / 10000.0 - 1.0;
      norm += e * e;
    }
    norm = std::sqrt(norm > 0 ? norm : 1);
    for (size_t d = 0; d < dims; ++d) out += fmt::format("{}{:.6f}", d ? "," : "", v[d] / norm);
    out += "]}";
  }
  out += fmt::format(R"(],"usage":{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":0,"prompt_tokens_details":null}}}})",
                     u.prompt_tokens, u.prompt_tokens);
  return out;
}

std::string models_response(std::string_view base_model, int64_t max_model_len, const std::vector<std::string>& adapters,
                            int64_t created) {
  auto entry = [&](std::string_view id, std::string_view root, std::string parent) {
    return fmt::format(
        R"({{"id":{},"object":"model","created":{},"owned_by":"vllm","root":{},"parent":{},"max_model_len":{},)"
        R"("permission":[]}})",
        quoted(id), created, quoted(root), parent, max_model_len);
  };
  std::string out = R"({"object":"list","data":[)";
  out += entry(base_model, base_model, "null");
  for (const auto& a : adapters) out += "," + entry(a, a, quoted(base_model));
  out += "]}";
  return out;
}

}  // namespace sluice::sim
