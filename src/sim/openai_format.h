// JSON bodies and SSE events of the OpenAI-compatible API, byte-shaped like vLLM's (fields in
// vLLM's order, `data: {json}\n\n` events, `data: [DONE]\n\n`). Pure string building.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/engine/tokenizer.h"

namespace sluice::sim {

void json_quote(std::string& out, std::string_view s);

// The text of a generated token: a short word with a leading space (~5 bytes), from its id.
std::string_view token_text(engine::TokenId t);

struct ResponseIds {
  std::string id;       // "chatcmpl-..." / "cmpl-..." / "embd-..."
  int64_t created = 0;  // unix seconds
  std::string model;    // as the client named it (base model or adapter)
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// Streaming events (each a complete "data: ...\n\n"); `index` is the choice (n > 1).
std::string chat_role_event(const ResponseIds& ids, int index = 0);
std::string chat_delta_event(const ResponseIds& ids, std::string_view content, std::string_view finish_reason,
                             int index = 0);
std::string completion_delta_event(const ResponseIds& ids, std::string_view text, std::string_view finish_reason,
                                   int index = 0);
std::string usage_event(const ResponseIds& ids, bool chat, const Usage& u);
std::string error_event(std::string_view message, std::string_view type, int code);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

// One generated choice of a whole response (n > 1 gives several).
struct ChoiceText {
  std::string text;
  std::string_view finish_reason;
};

// Whole responses.
std::string chat_response(const ResponseIds& ids, const std::vector<ChoiceText>& choices, const Usage& u);
std::string completion_response(const ResponseIds& ids, const std::vector<ChoiceText>& choices, const Usage& u);
std::string chat_response(const ResponseIds& ids, std::string_view content, std::string_view finish_reason,
                          const Usage& u);
std::string completion_response(const ResponseIds& ids, std::string_view text, std::string_view finish_reason,
                                const Usage& u);
std::string embedding_response(const ResponseIds& ids, size_t num_inputs, size_t dims, uint64_t seed,
                               const Usage& u);
std::string models_response(std::string_view base_model, int64_t max_model_len, const std::vector<std::string>& adapters,
                            int64_t created);
// ---- the Responses API (/v1/responses), shaped like vLLM's ----
// Echoed request fields of a response object.
struct ResponseRequestFields {
  std::string_view instructions;          // empty -> null
  std::optional<int64_t> max_output_tokens;
  std::string_view previous_response_id;  // empty -> null
  bool store = true;
};
// The response object. `status` "in_progress" has no output and null usage; "completed" /
// "incomplete" (length: incomplete_details.reason max_output_tokens) carry the one message item
// `msg_id` with `text`, and the usage ({input,output}_tokens ...).
std::string response_object(const ResponseIds& ids, std::string_view status, std::string_view msg_id,
                            std::string_view text, const Usage& u, const ResponseRequestFields& f);
// A typed event: "event: <type>\ndata: {"type":"<type>","sequence_number":<seq>,<members>}\n\n".
std::string response_event(std::string_view type, int64_t seq, std::string_view members);
// Members of the item/part/text events, for response_event.
std::string output_item_members(std::string_view msg_id, std::string_view status, const std::string* text);
std::string content_part_members(std::string_view msg_id, std::string_view text);
std::string text_delta_members(std::string_view msg_id, std::string_view delta, bool done);

// ---- vLLM's extra routes ----
std::string tokenize_response(const std::vector<engine::TokenId>& tokens, int64_t max_model_len);
std::string detokenize_response(std::string_view prompt);
// One object of vLLM's render routes (/v1/chat/completions/render is one, /v1/completions/render
// a JSON array of them, one per prompt): the GenerateRequest vLLM would run, without generating.
//   {"request_id":..,"token_ids":[..],"sampling_params":{"n":..,"max_tokens":..|null},"model":..,"stream":false}
std::string render_object(std::string_view request_id, const std::vector<engine::TokenId>& tokens, std::string_view model,
                          int64_t n, std::optional<int64_t> max_tokens);
// scores[i] for document i; rerank results sorted by score, best first, at most top_n.
std::string rerank_response(const ResponseIds& ids, const std::vector<std::string>& documents,
                            const std::vector<double>& scores, size_t top_n, int64_t tokens);
std::string score_response(const ResponseIds& ids, const std::vector<double>& scores, int64_t tokens);

// {"error":{"message":...,"type":...,"param":null,"code":<status>}}
std::string error_body(std::string_view message, std::string_view type, int code);
std::string_view error_type_for(int status);

}  // namespace sluice::sim
