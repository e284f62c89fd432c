#include "core/openai/response_fields.h"

#include <simdjson.h>

#include <cstring>

#include "core/json_escape.h"
#include "core/openai/json_scan.h"

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

namespace {

// glibc's memmem (two-way, vectorised) beats string_view::find, which stops at every '"'.
bool contains(std::string_view hay, std::string_view needle) {
  return ::memmem(hay.data(), hay.size(), needle.data(), needle.size()) != nullptr;
}

// The `{...}` object that starts at json[i] (strings and escapes honoured), or npos. Strings are
// crossed by json_string_end (json_scan.h): a byte-by-byte walk cost ~1.5k instructions for a
// completion's usage object (callgrind, bench/results/overhead.txt run 15).
size_t object_end(std::string_view json, size_t i) {
  int depth = 0;
  const char* p = json.data() + i;
  const char* const end = json.data() + json.size();
  while (p < end) {
    const char c = *p++;
    if (c == '"') {
      if ((p = json_string_end(p, end)) == nullptr) break;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return static_cast<size_t>(p - json.data());
    }
  }
  return std::string_view::npos;
}


// Fast path: engines put `"usage":{...}` last in a completion or chunk. Find the last `"usage"`
// key (not inside a string: not preceded by a backslash; followed by a colon), and hand back just
// `{"usage":{...}}` for the full parse, which then reads a few dozen bytes instead of the whole
// response. Anything unexpected: the caller parses the whole document.
std::optional<std::string_view> usage_member(std::string_view json, size_t& begin) {
  // The last key in the tail, where engines put it; not found: full parse. A backward search finds
  // it within the ~100 bytes of the usage object; string_view::find stopped at every '"' of the tail
  // and glibc's memmem and string_view::rfind are not vectorised (~1.5k instructions for a small
  // completion, callgrind: bench/results/overhead.txt run 15).
  static constexpr std::string_view kKey = "\"usage\"";
  const char* const first = json.data() + (json.size() > 384 ? json.size() - 384 : 0);
  size_t key = std::string_view::npos;
  for (const char* end = json.data() + json.size(); end > first;) {  // quote by quote, backwards
    const auto* q = static_cast<const char*>(::memrchr(first, '"', static_cast<size_t>(end - first)));
    if (q == nullptr) break;
    if (json.substr(static_cast<size_t>(q - json.data())).starts_with(kKey)) {
      key = static_cast<size_t>(q - json.data());
      break;
    }
    end = q;
  }
  if (key == std::string_view::npos || key == 0 || json[key - 1] == '\\') return std::nullopt;
  size_t i = key + kKey.size();
  while (i < json.size() && is_space(json[i])) ++i;
  if (i >= json.size() || json[i] != ':') return std::nullopt;
  ++i;
  while (i < json.size() && is_space(json[i])) ++i;
  if (i >= json.size() || json[i] != '{') return std::nullopt;
  const size_t end = object_end(json, i);
  if (end == std::string_view::npos) return std::nullopt;
  begin = key;
  return json.substr(key, end - key);
}

}  // namespace

std::optional<Usage> parse_usage_document(std::string_view json);
std::optional<Usage> parse_usage_object(std::string_view json);

std::optional<Usage> find_usage(std::string_view json) {
  if (json.size() > 256) {
    size_t begin = 0;
    if (auto member = usage_member(json, begin)) {
      thread_local std::string small;
      small.assign("{").append(*member).append("}");
      if (auto u = parse_usage_object(small)) return u;
    }
  }
  return parse_usage_document(json);
}

namespace {

// Reads a usage object: chat/completions names ({prompt,completion}_tokens,
// prompt_tokens_details.cached_tokens), the Responses API's ({input,output}_tokens,
// input_tokens_details.cached_tokens), or only total_tokens (vLLM's rerank), read as prompt tokens.
std::optional<Usage> read_usage(od::object u) {
  Usage out;
  bool any = false;
  std::optional<int64_t> total;
  for (auto field : u) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return std::nullopt;
    od::value v;
    if (field.value().get(v)) return std::nullopt;
    if (key == "prompt_tokens" || key == "input_tokens") {
      any |= !v.get_int64().get(out.prompt_tokens);
    } else if (key == "completion_tokens" || key == "output_tokens") {
      any |= !v.get_int64().get(out.completion_tokens);
    } else if (key == "total_tokens") {
      int64_t t = 0;
      if (!v.get_int64().get(t)) total = t;
    } else if (key == "prompt_tokens_details" || key == "input_tokens_details") {
      od::object d;
      if (!v.get_object().get(d)) {
        int64_t cached = 0;
        if (!d.find_field_unordered("cached_tokens").get_int64().get(cached)) out.cached_tokens = cached;
      }
    }
  }
  if (!any && total) {
    out.prompt_tokens = *total;
    any = true;
  }
  if (!any) return std::nullopt;
  return out;
}

// Parses `json` into the thread's buffer; the root object, or false.
bool parse_root(std::string_view json, od::parser& parser, std::string& buffer, od::document& doc, od::object& root) {
  buffer.assign(json);
  buffer.append(simdjson::SIMDJSON_PADDING, '\0');
  if (parser.iterate(buffer.data(), json.size(), buffer.size()).get(doc)) return false;
  return !doc.get_object().get(root);
}

}  // namespace

// The whole document's top-level `usage` object, or that of its `response` member (the Responses
// API's response.completed event).
std::optional<Usage> parse_usage_document(std::string_view json) {
  if (!contains(json, "\"usage\"")) return std::nullopt;
  return parse_usage_object(json);
}

// parse_usage_document without the look for the key first (find_usage has found it).
std::optional<Usage> parse_usage_object(std::string_view json) {
  thread_local od::parser parser;
  thread_local std::string buffer;
  od::document doc;
  od::object root;
  if (!parse_root(json, parser, buffer, doc, root)) return std::nullopt;
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return std::nullopt;
    od::value v;
    if (field.value().get(v)) return std::nullopt;
    od::object obj;
    if (key == "usage") {
      if (v.get_object().get(obj)) return std::nullopt;  // null or not an object
      return read_usage(obj);
    }
    if (key == "response" && !v.get_object().get(obj)) {
      od::value usage;
      if (obj.find_field_unordered("usage").get(usage)) return std::nullopt;
      od::object u;
      if (usage.get_object().get(u)) return std::nullopt;
      return read_usage(u);
    }
  }
  return std::nullopt;
}

std::optional<std::string> response_id_of(std::string_view json) {
  if (!contains(json, "\"id\"")) return std::nullopt;
  thread_local od::parser parser;
  thread_local std::string buffer;
  od::document doc;
  od::object root;
  if (!parse_root(json, parser, buffer, doc, root)) return std::nullopt;
  std::optional<std::string> top;
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return std::nullopt;
    od::value v;
    if (field.value().get(v)) return std::nullopt;
    std::string_view s;
    od::object obj;
    if (key == "id" && !v.get_string().get(s)) {
      top = std::string(s);
    } else if (key == "response" && !v.get_object().get(obj)) {
      if (obj.find_field_unordered("id").get_string().get(s)) return std::nullopt;
      return std::string(s);
    }
  }
  return top;
}

bool is_output_text_delta(std::string_view event, std::string_view data) {
  if (event == "response.output_text.delta") return true;
  return event.empty() && contains(data.substr(0, 64), "\"response.output_text.delta\"");
}

namespace {

// A delta that names the role and nothing else: its other fields are null, or an empty content.
bool delta_names_role_only(od::object delta) {
  bool has_role = false;
  for (auto field : delta) {
    std::string_view key;
    od::value v;
    if (field.unescaped_key().get(key) || field.value().get(v)) return false;
    if (key == "role") {
      has_role = true;
      continue;
    }
    bool null = false;
    if (!v.is_null().get(null) && null) continue;  // SGLang writes the fields it leaves out as null
    std::string_view text;
    if (key == "content" && !v.get_string().get(text) && text.empty()) continue;
    return false;  // content, tool calls, reasoning: output
  }
  return has_role;
}

// Whether a chat chunk only announces the role: every choice's delta holds `role` and otherwise only
// an empty or null content (and null fields, as SGLang writes them), with no finish_reason and no
// logprobs. vLLM and SGLang send one such chunk per choice just before the first token; a server that
// sent it on receipt would otherwise pass for a first token (TTFT, the end of the prefill) and add a
// zero gap to the ITLs. Parsed only when the chunk names a role with a string value, which token
// chunks do not (vLLM leaves the role out of them, SGLang writes "role":null).
bool role_only(std::string_view data) {
  if (!contains(data, "\"role\":\"")) return false;
  thread_local od::parser parser;
  thread_local std::string buffer;
  od::document doc;
  od::object root;
  if (!parse_root(data, parser, buffer, doc, root)) return false;
  od::array choices;
  if (root.find_field_unordered("choices").get_array().get(choices)) return false;
  bool any = false;
  for (auto c : choices) {
    od::object choice;
    if (c.get_object().get(choice)) return false;
    bool announced = false;
    for (auto field : choice) {
      std::string_view key;
      od::value v;
      if (field.unescaped_key().get(key) || field.value().get(v)) return false;
      if (key == "delta") {
        od::object delta;
        if (v.get_object().get(delta) || !delta_names_role_only(delta)) return false;
        announced = true;
      } else if (key == "finish_reason" || key == "logprobs") {
        bool null = false;
        if (v.is_null().get(null) || !null) return false;
      }
    }
    if (!announced) return false;
    any = true;
  }
  return any;
}

}  // namespace

bool carries_tokens(std::string_view data, bool first) {
  if (data.empty() || data.front() != '{') return false;
  if (contains(data, "\"choices\":[]")) return false;
  if (data.compare(0, 9, "{\"error\":") == 0) return false;
  return !(first && role_only(data));
}

}  // namespace sluice
