// CPU cost of parsing one OpenAI request body (src/core/openai/request.cpp: UTF-8 check, structure
// scan, simdjson On Demand, the chat template): the gateway's per-request parse, in ns and bytes/s.
//
//   BM_ParseChat{Prose,Code}/<bytes>: a chat completion whose user message is `bytes` long (a system
//     message, max_tokens, temperature around it), parsed from a padded buffer as the gateway does.
//     Prose has no escapes (bench-overhead.sh's long prompt); Code has an escaped quote or newline
//     every ~20 bytes, as source code pasted into a prompt does. 225280 is bench-overhead.sh's
//     220 KB prompt, 409600 ~100k tokens.
//   BM_ParseChatRender{Prose,Code}/<bytes>: the same bodies parsed as the gateway does
//     (keep_message_text = false: the messages rendered into the prompt as they are read).
#include <benchmark/benchmark.h>

#include <string>

#include "core/openai/request.h"

namespace {

using namespace sluice;

std::string chat_body(size_t bytes, bool code) {
  std::string text;
  text.reserve(bytes);
  const std::string_view kWords = code ? R"(  if (x == \"fox\") {\n    return jumps(\"dog\");\n  }\n)"
                                       : "the quick brown fox jumps over the lazy dog while the fleet routes tokens ";
  while (text.size() < bytes) text.append(kWords.substr(0, std::min(kWords.size(), bytes - text.size())));
  while (!text.empty() && text.back() == '\\') text.pop_back();  // never end inside an escape
  return R"({"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[{"role":"system","content":"You are a helpful assistant."},)"
         R"({"role":"user","content":")" +
         text + R"("}],"max_tokens":16,"temperature":0})";
}

void parse_chat(benchmark::State& state, bool code, bool render = false) {
  std::string body = chat_body(static_cast<size_t>(state.range(0)), code);
  const size_t size = body.size();
  body.append(kBodyPadding, '\0');  // the gateway's RequestBody keeps this much zeroed padding
  const std::string_view view(body.data(), size);
  ParseLimits limits;
  limits.keep_message_text = !render;
  for (auto _ : state) {
    ParseResult r = parse_request(ApiKind::chat, view, limits, true);
    if (!r.ok()) state.SkipWithError(r.error.message.c_str());
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(size));
}
void BM_ParseChatProse(benchmark::State& state) { parse_chat(state, false); }
void BM_ParseChatCode(benchmark::State& state) { parse_chat(state, true); }
// The gateway's and the ext_proc server's parse (keep_message_text = false): messages rendered into
// the prompt as they are read.
void BM_ParseChatRenderProse(benchmark::State& state) { parse_chat(state, false, true); }
void BM_ParseChatRenderCode(benchmark::State& state) { parse_chat(state, true, true); }
BENCHMARK(BM_ParseChatProse)->Arg(30)->Arg(225280)->Arg(409600);
BENCHMARK(BM_ParseChatCode)->Arg(225280);
BENCHMARK(BM_ParseChatRenderProse)->Arg(30)->Arg(225280)->Arg(409600);
BENCHMARK(BM_ParseChatRenderCode)->Arg(225280);

}  // namespace
