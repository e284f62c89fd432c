// JSON bodies and SSE events of the OpenAI-compatible API, byte-shaped like vLLM's (fields in
// vLLM's order, `data: {json}\n\n` events, `data: [DONE]\n\n`). Pure string building.
#pragma once
#include <cstdint>
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

// Streaming events (each a complete "data: ...\n\n").
std::string chat_role_event(const ResponseIds& ids);
std::string chat_delta_event(const ResponseIds& ids, std::string_view content, std::string_view finish_reason);
std::string completion_delta_event(const ResponseIds& ids, std::string_view text, std::string_view finish_reason);
std::string usage_event(const ResponseIds& ids, bool chat, const Usage& u);
std::string error_event(std::string_view message, std::string_view type, int code);
inline constexpr std::string_view kDoneEvent = "data: [DONE]\n\n";

// Whole responses.
std::string chat_response(const ResponseIds& ids, std::string_view content, std::string_view finish_reason,
                          const Usage& u);
std::string completion_response(const ResponseIds& ids, std::string_view text, std::string_view finish_reason,
                                const Usage& u);
std::string embedding_response(const ResponseIds& ids, size_t num_inputs, size_t dims, uint64_t seed,
                               const Usage& u);
std::string models_response(std::string_view base_model, int64_t max_model_len, const std::vector<std::string>& adapters,
                            int64_t created);
// {"error":{"message":...,"type":...,"param":null,"code":<status>}}
std::string error_body(std::string_view message, std::string_view type, int code);
std::string_view error_type_for(int status);

}  // namespace sluice::sim
