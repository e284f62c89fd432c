#include "sim/openai_format.h"

#include "core/json_escape.h"

#include <fmt/format.h>

#include <algorithm>
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

std::string chat_role_event(const ResponseIds& ids, int index) {
  return event(head(ids, "chat.completion.chunk") +
               fmt::format(R"("choices":[{{"index":{},"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}]}})",
                           index));
}

std::string chat_delta_event(const ResponseIds& ids, std::string_view content, std::string_view finish_reason, int index) {
  std::string tail = finish_reason.empty() ? R"("finish_reason":null)"
                                           : fmt::format(R"("finish_reason":{},"stop_reason":null)", quoted(finish_reason));
  return event(head(ids, "chat.completion.chunk") +
               fmt::format(R"("choices":[{{"index":{},"delta":{{"content":{}}},"logprobs":null,{}}}]}})", index,
                           quoted(content), tail));
}

std::string completion_delta_event(const ResponseIds& ids, std::string_view text, std::string_view finish_reason,
                                   int index) {
  return event(head(ids, "text_completion") +
               fmt::format(R"("choices":[{{"index":{},"text":{},"logprobs":null,"finish_reason":{},"stop_reason":null}}]}})",
                           index, quoted(text), finish_json(finish_reason)));
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
  return chat_response(ids, {ChoiceText{std::string(content), finish_reason}}, u);
}

std::string chat_response(const ResponseIds& ids, const std::vector<ChoiceText>& choices, const Usage& u) {
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i)
    list += fmt::format(R"({}{{"index":{},"message":{{"role":"assistant","content":{},"refusal":null,)"
                        R"("annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":null}},)"
                        R"("logprobs":null,"finish_reason":{},"stop_reason":null}})",
                        i ? "," : "", i, quoted(choices[i].text), finish_json(choices[i].finish_reason));
  return head(ids, "chat.completion") +
         fmt::format(R"("choices":[{}],"service_tier":null,)"
                     R"("system_fingerprint":null,"usage":{},"prompt_logprobs":null,"kv_transfer_params":null}})",
                     list, usage_json(u));
}

std::string completion_response(const ResponseIds& ids, std::string_view text, std::string_view finish_reason,
                                const Usage& u) {
  return completion_response(ids, {ChoiceText{std::string(text), finish_reason}}, u);
}

std::string completion_response(const ResponseIds& ids, const std::vector<ChoiceText>& choices, const Usage& u) {
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i)
    list += fmt::format(R"({}{{"index":{},"text":{},"logprobs":null,"finish_reason":{},"stop_reason":null,)"
                        R"("prompt_logprobs":null}})",
                        i ? "," : "", i, quoted(choices[i].text), finish_json(choices[i].finish_reason));
  return head(ids, "text_completion") +
         fmt::format(R"("choices":[{}],"service_tier":null,"system_fingerprint":null,"usage":{},)"
                     R"("kv_transfer_params":null}})",
                     list, usage_json(u));
}

namespace {
std::string null_or_quoted(std::string_view s) { return s.empty() ? "null" : quoted(s); }

std::string output_text_part(std::string_view text) {
  return fmt::format(R"({{"type":"output_text","text":{},"annotations":[],"logprobs":null}})", quoted(text));
}

std::string message_item(std::string_view msg_id, std::string_view status, const std::string* text) {
  return fmt::format(R"({{"id":{},"type":"message","status":"{}","role":"assistant","content":[{}]}})", quoted(msg_id),
                     status, text ? output_text_part(*text) : std::string());
}
}  // namespace

std::string response_object(const ResponseIds& ids, std::string_view status, std::string_view msg_id,
                            std::string_view text, const Usage& u, const ResponseRequestFields& f) {
  const bool done = status != "in_progress";
  const std::string body(text);
  const std::string output = done ? message_item(msg_id, "completed", &body) : std::string();
  const std::string usage =
      done ? fmt::format(R"({{"input_tokens":{},"input_tokens_details":{{"cached_tokens":{}}},"output_tokens":{},)"
                         R"("output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{}}})",
                         u.prompt_tokens, u.cached_tokens, u.completion_tokens, u.prompt_tokens + u.completion_tokens)
           : "null";
  return fmt::format(
      R"({{"id":{},"object":"response","created_at":{},"model":{},"status":"{}","background":false,"error":null,)"
      R"("incomplete_details":{},"instructions":{},"max_output_tokens":{},"max_tool_calls":null,"metadata":null,)"
      R"("output":[{}],"parallel_tool_calls":true,"previous_response_id":{},"prompt":null,"reasoning":null,)"
      R"("service_tier":"auto","store":{},"temperature":1.0,"text":{{"format":{{"type":"text"}}}},"tool_choice":"auto",)"
      R"("tools":[],"top_logprobs":0,"top_p":1.0,"truncation":"disabled","usage":{},"user":null}})",
      quoted(ids.id), ids.created, quoted(ids.model), status,
      status == "incomplete" ? R"({"reason":"max_output_tokens"})" : "null", null_or_quoted(f.instructions),
      f.max_output_tokens ? std::to_string(*f.max_output_tokens) : "null", output, null_or_quoted(f.previous_response_id),
      f.store ? "true" : "false", usage);
}

std::string response_event(std::string_view type, int64_t seq, std::string_view members) {
  return fmt::format("event: {}\ndata: {{\"type\":\"{}\",\"sequence_number\":{},{}}}\n\n", type, type, seq, members);
}

std::string output_item_members(std::string_view msg_id, std::string_view status, const std::string* text) {
  return R"("output_index":0,"item":)" + message_item(msg_id, status, text);
}

std::string content_part_members(std::string_view msg_id, std::string_view text) {
  return fmt::format(R"("item_id":{},"output_index":0,"content_index":0,"part":{})", quoted(msg_id), output_text_part(text));
}

std::string text_delta_members(std::string_view msg_id, std::string_view delta, bool done) {
  return fmt::format(R"("item_id":{},"output_index":0,"content_index":0,"{}":{},"logprobs":[])", quoted(msg_id),
                     done ? "text" : "delta", quoted(delta));
}

std::string tokenize_response(const std::vector<engine::TokenId>& tokens, int64_t max_model_len) {
  std::string list;
  for (size_t i = 0; i < tokens.size(); ++i) list += fmt::format("{}{}", i ? "," : "", tokens[i]);
  return fmt::format(R"({{"count":{},"max_model_len":{},"tokens":[{}],"token_strs":null}})", tokens.size(), max_model_len,
                     list);
}

std::string render_object(std::string_view request_id, const std::vector<engine::TokenId>& tokens, std::string_view model,
                          int64_t n, std::optional<int64_t> max_tokens) {
  std::string out = R"({"request_id":)" + quoted(request_id) + R"(,"token_ids":[)";
  for (size_t i = 0; i < tokens.size(); ++i) fmt::format_to(std::back_inserter(out), "{}{}", i ? "," : "", tokens[i]);
  fmt::format_to(std::back_inserter(out), R"(],"sampling_params":{{"n":{},"max_tokens":{}}},"model":{},"stream":false}})", n,
                 max_tokens ? fmt::format("{}", *max_tokens) : std::string("null"), quoted(model));
  return out;
}

std::string detokenize_response(std::string_view prompt) { return R"({"prompt":)" + quoted(prompt) + "}"; }

std::string rerank_response(const ResponseIds& ids, const std::vector<std::string>& documents,
                            const std::vector<double>& scores, size_t top_n, int64_t tokens) {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  if (top_n > 0 && top_n < order.size()) order.resize(top_n);
  std::string results;
  for (size_t k = 0; k < order.size(); ++k)
    results += fmt::format(R"({}{{"index":{},"document":{{"text":{}}},"relevance_score":{:.6f}}})", k ? "," : "", order[k],
                           quoted(documents[order[k]]), scores[order[k]]);
  return fmt::format(R"({{"id":{},"model":{},"usage":{{"total_tokens":{}}},"results":[{}]}})", quoted(ids.id),
                     quoted(ids.model), tokens, results);
}

std::string score_response(const ResponseIds& ids, const std::vector<double>& scores, int64_t tokens) {
  std::string data;
  for (size_t i = 0; i < scores.size(); ++i)
    data += fmt::format(R"({}{{"index":{},"object":"score","score":{:.6f}}})", i ? "," : "", i, scores[i]);
  return head(ids, "list") +
         fmt::format(R"("data":[{}],"usage":{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":0,)"
                     R"("prompt_tokens_details":null}}}})",
                     data, tokens, tokens);
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
