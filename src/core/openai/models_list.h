// GET /v1/models: every configured model name in OpenAI's list format, as vLLM serves it.
//   base model: root = its name, parent = null
//   alias:      root = the pinned target, parent = null
//   adapter:    root = its name, parent = the base model
// GET /v1/models/{id}: the one entry (ids contain slashes: meta-llama/Llama-3.1-8B-Instruct; the
// SDKs may send them percent-encoded, %2F).
// A tenant with an allow-list (`allowed_models`, core/admission/tenants.h) sees only its models:
// in the list, in /v1/models/{id} and when a request names one (visible_model, the one rule both
// request paths use); any other name is answered as unknown.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/config.h"

namespace sluice {

struct Tenant;

// The route of configured model `name` if `tenant` may use it (null tenant: no restriction), else null.
const ModelRoute* visible_model(const Config& config, const Tenant* tenant, std::string_view name);

std::string models_list_json(const Config& config, int64_t created_unix_seconds, const Tenant* tenant = nullptr);
// The entry of model `id` (a configured name, alias or adapter `tenant` may use), or nullopt.
std::optional<std::string> model_json(const Config& config, std::string_view id, int64_t created_unix_seconds,
                                      const Tenant* tenant = nullptr);
// The model id of a request path's tail: %XX escapes decoded (a malformed escape is kept as is).
std::string decode_model_id(std::string_view raw);

}  // namespace sluice
