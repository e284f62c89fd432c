// GET /v1/models: every configured model name in OpenAI's list format, as vLLM serves it.
//   base model: root = its name, parent = null
//   alias:      root = the pinned target, parent = null
//   adapter:    root = its name, parent = the base model
// GET /v1/models/{id}: the one entry (ids contain slashes: meta-llama/Llama-3.1-8B-Instruct; the
// SDKs may send them percent-encoded, %2F).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/config.h"

namespace sluice {

std::string models_list_json(const Config& config, int64_t created_unix_seconds);
// The entry of model `id` (a configured name, alias or adapter), or nullopt.
std::optional<std::string> model_json(const Config& config, std::string_view id, int64_t created_unix_seconds);
// The model id of a request path's tail: %XX escapes decoded (a malformed escape is kept as is).
std::string decode_model_id(std::string_view raw);

}  // namespace sluice
