#include "core/openai/models_list.h"

#include <fmt/format.h>

#include "core/admission/tenants.h"
#include "core/json_escape.h"

namespace sluice {

namespace {
void append_entry(std::string& out, const ModelRoute& m, int64_t created) {
  out += "{\"id\":";
  append_json_string(out, m.name);
  out += fmt::format(",\"object\":\"model\",\"created\":{},\"owned_by\":\"sluice\",\"root\":", created);
  append_json_string(out, m.is_alias() ? m.target : m.name);
  out += ",\"parent\":";
  if (m.adapter_of.empty()) out += "null";
  else append_json_string(out, m.adapter_of);
  out += ",\"max_model_len\":null}";
}
}  // namespace

const ModelRoute* visible_model(const Config& config, const Tenant* tenant, std::string_view name) {
  const ModelRoute* m = config.find_model(name);
  return m && (!tenant || tenant->allows_model(m->name)) ? m : nullptr;
}

std::string models_list_json(const Config& config, int64_t created, const Tenant* tenant) {
  std::string out = "{\"object\":\"list\",\"data\":[";
  bool first = true;
  for (const auto& m : config.models) {
    if (tenant && !tenant->allows_model(m.name)) continue;
    if (!first) out.push_back(',');
    first = false;
    append_entry(out, m, created);
  }
  out += "]}";
  return out;
}

std::optional<std::string> model_json(const Config& config, std::string_view id, int64_t created,
                                      const Tenant* tenant) {
  const ModelRoute* m = visible_model(config, tenant, id);
  if (!m) return std::nullopt;
  std::string out;
  append_entry(out, *m, created);
  return out;
}

std::string decode_model_id(std::string_view raw) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '%' && i + 2 < raw.size() && hex(raw[i + 1]) >= 0 && hex(raw[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(raw[i + 1]) * 16 + hex(raw[i + 2])));
      i += 2;
    } else {
      out.push_back(raw[i]);
    }
  }
  return out;
}

}  // namespace sluice
