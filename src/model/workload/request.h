// One request of a synthetic or replayed workload, as a client would send it: when (offset from
// the run's start), who (tenant), to what (model, LoRA adapter), what (chat messages, a prompt or
// embedding input), how much output (max_tokens), streamed or not. Drivers turn it into an HTTP
// body (`body()`, for `sluice bench`) or into engine tokens (`rendered()`, for `sluice fleetsim`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/openai/chat_template.h"
#include "core/openai/request.h"
#include "core/time.h"

namespace sluice::workload {

struct WorkloadRequest {
  uint64_t index = 0;          // position in the workload, 0-based
  Duration arrival{};          // offset from the run's start (open-loop arrivals)
  std::string tenant = "default";
  std::string model = "llama";  // the model name sent in the body (the adapter's name for LoRA)
  std::string adapter;         // LoRA adapter; empty for the base model
  ApiKind kind = ApiKind::chat;
  std::vector<ChatMessage> messages;  // chat
  std::string prompt;                 // completion prompt / embedding input
  int64_t max_tokens = 128;
  bool stream = true;
  std::string group;           // what this request shares content with (analysis only)

  // The text the engine sees: the chat template applied to the messages, or the prompt.
  std::string rendered() const;
  // Its token count at 4 characters per token.
  int64_t input_tokens() const;
  // The OpenAI-compatible JSON body (chat/completions, completions or embeddings).
  std::string body() const;
  // The API path for `kind`: /v1/chat/completions, /v1/completions or /v1/embeddings.
  const char* path() const;
};

}  // namespace sluice::workload
