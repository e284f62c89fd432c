#include "core/openai/response_fields.h"

#include <simdjson.h>

#include <cstring>

#include "core/json_escape.h"

namespace sluice {
namespace od = simdjson::ondemand;

ModelRewriter::ModelRewriter(std::string_view from, std::string_view to)
    : from_json_(json_string(from)), to_json_(json_string(to)) {}

namespace {
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
}  // namespace

bool ModelRewriter::append(std::string_view text, std::string& out) const {
  static constexpr std::string_view key = "\"model\"";
  size_t pos = 0;
  while ((pos = text.find(key, pos)) != std::string_view::npos) {
    size_t i = pos + key.size();
    // An escaped quote before it means the text is inside a string, not a key.
    if (pos > 0 && text[pos - 1] == '\\') {
      pos = i;
      continue;
    }
    while (i < text.size() && is_space(text[i])) ++i;
    if (i >= text.size() || text[i] != ':') {
      pos = i;
      continue;
    }
    ++i;
    while (i < text.size() && is_space(text[i])) ++i;
    if (text.substr(i, from_json_.size()) == from_json_) {
      out.append(text.substr(0, i));
      out.append(to_json_);
      out.append(text.substr(i + from_json_.size()));
      return true;
    }
    pos = i;
  }
  out.append(text);
  return false;
}

std::optional<Usage> find_usage(std::string_view json) {
  if (json.find("\"usage\"") == std::string_view::npos) return std::nullopt;
  thread_local od::parser parser;
  thread_local std::string buffer;
  buffer.assign(json);
  buffer.append(simdjson::SIMDJSON_PADDING, '\0');
  od::document doc;
  if (parser.iterate(buffer.data(), json.size(), buffer.size()).get(doc)) return std::nullopt;
  od::object root;
  if (doc.get_object().get(root)) return std::nullopt;
  od::value usage;
  if (root.find_field_unordered("usage").get(usage)) return std::nullopt;
  od::object u;
  if (usage.get_object().get(u)) return std::nullopt;  // null or not an object
  Usage out;
  bool any = false;
  for (auto field : u) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return std::nullopt;
    od::value v;
    if (field.value().get(v)) return std::nullopt;
    if (key == "prompt_tokens") {
      any |= !v.get_int64().get(out.prompt_tokens);
    } else if (key == "completion_tokens") {
      any |= !v.get_int64().get(out.completion_tokens);
    } else if (key == "prompt_tokens_details") {
      od::object d;
      if (!v.get_object().get(d)) {
        int64_t cached = 0;
        if (!d.find_field_unordered("cached_tokens").get_int64().get(cached)) out.cached_tokens = cached;
      }
    }
  }
  if (!any) return std::nullopt;
  return out;
}

bool carries_tokens(std::string_view data) {
  if (data.empty() || data.front() != '{') return false;
  if (data.find("\"choices\":[]") != std::string_view::npos) return false;
  if (data.compare(0, 9, "{\"error\":") == 0) return false;
  return true;
}

}  // namespace sluice
