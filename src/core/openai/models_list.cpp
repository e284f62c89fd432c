#include "core/openai/models_list.h"

#include <fmt/format.h>

#include "core/json_escape.h"

namespace sluice {

std::string models_list_json(const Config& config, int64_t created) {
  std::string out = "{\"object\":\"list\",\"data\":[";
  bool first = true;
  for (const auto& m : config.models) {
    if (!first) out.push_back(',');
    first = false;
    out += "{\"id\":";
    append_json_string(out, m.name);
    out += fmt::format(",\"object\":\"model\",\"created\":{},\"owned_by\":\"sluice\",\"root\":", created);
    append_json_string(out, m.is_alias() ? m.target : m.name);
    out += ",\"parent\":";
    if (m.adapter_of.empty()) out += "null";
    else append_json_string(out, m.adapter_of);
    out += ",\"max_model_len\":null}";
  }
  out += "]}";
  return out;
}

}  // namespace sluice
