// GET /v1/models: every configured model name in OpenAI's list format, as vLLM serves it.
//   base model: root = its name, parent = null
//   alias:      root = the pinned target, parent = null
//   adapter:    root = its name, parent = the base model
#pragma once
#include <cstdint>
#include <string>

#include "core/config.h"

namespace sluice {

std::string models_list_json(const Config& config, int64_t created_unix_seconds);

}  // namespace sluice
