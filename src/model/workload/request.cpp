#include "model/workload/request.h"

#include <fmt/format.h>

#include "model/engine/tokenizer.h"
#include "core/json_escape.h"

namespace sluice::workload {

std::string WorkloadRequest::rendered() const {
  return kind == ApiKind::chat ? render_chat(messages) : prompt;
}

int64_t WorkloadRequest::input_tokens() const { return engine::count_tokens(rendered()); }

const char* WorkloadRequest::path() const {
  switch (kind) {
    case ApiKind::chat: return "/v1/chat/completions";
    case ApiKind::completion: return "/v1/completions";
    case ApiKind::embedding: return "/v1/embeddings";
    default: break;  // the workloads generate chat, completions and embeddings only
  }
  return "/v1/chat/completions";
}

std::string WorkloadRequest::body() const {
  std::string out = "{\"model\":";
  append_json_string(out, model);
  if (kind == ApiKind::chat) {
    out += ",\"messages\":[";
    for (size_t i = 0; i < messages.size(); ++i) {
      if (i) out += ',';
      out += "{\"role\":";
      append_json_string(out, messages[i].role);
      out += ",\"content\":";
      append_json_string(out, messages[i].content);
      out += '}';
    }
    out += ']';
  } else {
    out += kind == ApiKind::embedding ? ",\"input\":" : ",\"prompt\":";
    append_json_string(out, prompt);
  }
  if (kind != ApiKind::embedding) {
    out += fmt::format(",\"max_tokens\":{}", max_tokens);
    if (stream) out += ",\"stream\":true,\"stream_options\":{\"include_usage\":true}";
  }
  if (tenant != "default") {
    out += ",\"user\":";
    append_json_string(out, tenant);
  }
  out += '}';
  return out;
}

}  // namespace sluice::workload
