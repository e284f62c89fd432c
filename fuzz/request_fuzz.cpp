// libFuzzer target: the request body parser and the body rewrite must never crash, whatever the
// bytes; a parsed request must rewrite to a body that parses again with the new model. The same
// bytes also go through the render cache key and, as an engine's answer, the render answer parser
// (core/prefix/render_tokens.h): never a crash, and a refusal always says why. The gateway's parse
// (keep_message_text = false: rendered while read) must accept and refuse the same bodies and render
// the same prompt as the parse that keeps the messages.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/openai/request.h"
#include "core/prefix/render_tokens.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto kind = static_cast<sluice::ApiKind>(data[0] % 8);  // every ApiKind
  std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  (void)sluice::render_key("m", "", body);
  auto answer = sluice::parse_render_answer(body, data[0] & 1, 64);
  if (!answer.ids && answer.error.empty()) std::abort();
  if (answer.ids && (answer.ids->empty() || answer.ids->size() > 64)) std::abort();
  auto r = sluice::parse_request(kind, body);
  sluice::ParseLimits render_now;
  render_now.keep_message_text = false;
  const auto g = sluice::parse_request(kind, body, render_now);
  if (g.ok() != r.ok()) std::abort();
  if (!r.ok()) {
    if (r.error.status != 400 || r.error.message.empty()) std::abort();
    if (g.error.message != r.error.message) std::abort();
    return 0;
  }
  if (g.request->rendered != r.request->rendered) std::abort();
  sluice::BodyRewrite rw;
  rw.model = "rewritten/model";
  rw.inject_max_tokens = 16;
  rw.inject_include_usage = true;
  auto out = sluice::rewrite_body(body, *r.request, rw);
  auto back = sluice::parse_request(kind, out);
  if (!back.ok() || back.request->model != "rewritten/model") std::abort();
  return 0;
}
