// The request model: an OpenAI-compatible request body parsed once (simdjson on-demand) into the
// fields that routing, admission and accounting need. The original bytes are kept by the caller
// and forwarded unchanged unless a rewrite (alias target, injected max_tokens or stream_options)
// is needed; `rewrite_body` performs those edits on the original bytes.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/openai/chat_template.h"

namespace sluice {

// chat, completion, embedding: the classic OpenAI routes. response: the Responses API
// (/v1/responses). tokenize, detokenize, rerank, score: vLLM's extra routes (/tokenize,
// /detokenize, /v1/rerank (also /rerank, /v2/rerank), /v1/score).
enum class ApiKind { chat, completion, embedding, response, tokenize, detokenize, rerank, score };
std::string_view to_string(ApiKind k);
// Whether the request generates output tokens (chat, completion, response).
bool generates(ApiKind k);
// Whether it needs a pooling model, i.e. a pool of kind embedding (embedding, rerank, score);
// tokenize and detokenize are served by every pool.
bool needs_pooling_pool(ApiKind k);
bool any_pool_kind(ApiKind k);
// The kind the picker prices it as: response -> chat, the pooling and tokenizer routes -> embedding
// (prefill only, no decode).
ApiKind pick_kind(ApiKind k);

constexpr int64_t kMaxCompletionsPerRequest = 128;  // n / best_of above this is a 400

struct ParseLimits {
  size_t max_depth = 64;          // deeper JSON nesting is refused
  size_t max_messages = 100000;
  size_t max_model_bytes = 256;   // a longer model name is refused (it is echoed and logged)
  // false (the gateway's data path): chat messages are rendered into `rendered` as they are read,
  // and `messages` keeps their roles only (empty content); a completion's or embedding's `prompt`
  // is moved into `rendered`. One copy less of a long prompt.
  bool keep_message_text = true;
};

// At most `max` bytes of `s`, cut at a UTF-8 character boundary, with "..." appended when cut:
// for client-chosen values echoed in error messages and logs (no amplification).
std::string truncate_echo(std::string_view s, size_t max = 128);

struct RequestModel {
  ApiKind kind = ApiKind::chat;
  std::string model;
  bool stream = false;
  bool has_stream_options = false;
  bool include_usage = false;
  // Largest of max_tokens / max_completion_tokens / max_output_tokens when any is present.
  std::optional<int64_t> max_output_tokens;
  std::vector<ChatMessage> messages;  // chat: all messages in order (roles only: see keep_message_text)
  std::string prompt;                 // completions: the prompt; embeddings: the input(s), joined
  size_t num_inputs = 1;              // embeddings: number of inputs
  // n / best_of (chat, completions): the completions the engine generates for this request, the
  // larger of the two (1 when neither is given). Reservations cover this many outputs.
  int64_t completions = 1;
  int64_t n = 1;  // the choices returned (n)
  // Responses API: previous_response_id (empty when absent) and store (default true).
  std::string previous_response_id;
  bool store = true;
  std::string user;
  std::optional<int64_t> priority;    // vLLM's `priority` body field, if given
  std::string cache_salt;
  // Byte span of the "model" value (including its quotes) in the original body, for rewriting.
  size_t model_value_offset = 0;
  size_t model_value_length = 0;
  // The text the engine will see: chat rendered through the chat template, or the prompt.
  std::string rendered;
};

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;   // empty -> null
  std::string code;    // empty -> null
};

struct ParseResult {
  std::optional<RequestModel> request;
  ApiError error;  // meaningful when !request
  bool ok() const { return request.has_value(); }
};

// Parses `body`. Never throws. For ApiKind::response: `input` is a string (one user message) or
// a list of input items (messages with string content or input_text parts; other item types,
// such as function_call_output, contribute their string fields), `instructions` becomes a leading
// system message, and the whole is rendered through the chat template (the prefix the picker
// hashes). Invalid JSON, wrong types, missing model, a model name longer than
// max_model_bytes, a duplicate top-level "model" key (the engine might read the other one),
// invalid UTF-8, too-deep nesting and empty prompts give a 400 with a message naming the field.
//
// `padded`: the kBodyPadding bytes after body.end() are readable and zero (the string's own
// capacity, gateway/http/request_body.h), so the parser reads the body in place instead of
// copying it into a padded buffer first.
inline constexpr size_t kBodyPadding = 64;  // simdjson's SIMDJSON_PADDING (checked in request.cpp)
ParseResult parse_request(ApiKind kind, std::string_view body, const ParseLimits& limits = {}, bool padded = false);

// Estimated input tokens from characters (~4 characters per token, at least 1).
int64_t estimate_tokens(std::string_view text);

struct BodyRewrite {
  std::optional<std::string> model;           // replace the model value
  std::optional<int64_t> inject_max_tokens;   // add "max_tokens" ("max_output_tokens" for the Responses API) when the request has no bound
  bool inject_include_usage = false;          // add/force stream_options.include_usage=true
};
// Applies the rewrite to the original body; returns the body unchanged when nothing is asked.
std::string rewrite_body(std::string_view body, const RequestModel& req, const BodyRewrite& rw);

// {"error":{"message":...,"type":...,"param":...,"code":...}}
std::string error_json(const ApiError& e);

}  // namespace sluice
