// Cheap reads and edits of a model server's response text, done on the bytes as they are relayed
// (an SSE event's raw text or a whole non-streaming body), never by re-serialising the JSON:
//   - ModelRewriter: the response must name the model the client asked for (an alias), not the
//     pinned target the gateway forwarded; it replaces the first `"model": "<target>"` member.
//   - find_usage: the `usage` object ({prompt,completion}_tokens, prompt_tokens_details.
//     cached_tokens), parsed with simdjson only when the text contains `"usage"`.
//     The Responses API's usage ({input,output}_tokens) is read too, also inside the `response`
//     member of a response.completed event; a usage with only total_tokens (rerank) counts as input.
//   - response_id_of: the id of a Responses API response (a whole body, or an event that carries
//     the `response` object), to learn where a stored response lives.
//   - is_output_text_delta: whether a Responses API event is a text delta (~ one token).
//   - carries_tokens: whether a stream event's data is a chunk with output (not [DONE], not the
//     usage-only chunk with `"choices":[]`, not an error, not a chunk that only announces the role).
//     One such chunk ~ one token in vLLM.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

class ModelRewriter {
 public:
  ModelRewriter(std::string_view from, std::string_view to);
  // Appends `text` to `out` with the first `"model"` member whose value is `from` rewritten to
  // `to` (whitespace around the colon is kept). Returns whether a rewrite happened.
  bool append(std::string_view text, std::string& out) const;

 private:
  std::string from_json_;  // `"from"` as a JSON string literal
  std::string to_json_;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// The first non-null `usage` object at the top level of a JSON object, if any.
std::optional<Usage> find_usage(std::string_view json);

// first: no token seen yet in this stream (the role chunks open it: only then is one looked for).
bool carries_tokens(std::string_view data, bool first = true);

// The `id` of `response` when the JSON object has that member, else its own top-level `id`.
std::optional<std::string> response_id_of(std::string_view json);

// `event` is the SSE event name (may be empty), `data` its data.
bool is_output_text_delta(std::string_view event, std::string_view data);

}  // namespace sluice
