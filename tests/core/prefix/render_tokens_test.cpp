#include "core/prefix/render_tokens.h"

#include <gtest/gtest.h>

#include "core/config.h"
#include "core/config_error.h"
#include "core/prefix/kv_event_index.h"
#include "core/prefix/token_blocks.h"

namespace sluice {
namespace {

// ---- the key: the prompt-bearing bytes only ----

TEST(RenderKey, SamplingMembersDoNotChangeTheKey) {
  const std::string a = R"({"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5})";
  const std::string b = R"({"temperature":0.3, "model":"alias","messages":[{"role":"user","content":"hi"}],"user":"u7","n":2})";
  EXPECT_EQ(render_key("m", "", a), render_key("m", "", b));
}

TEST(RenderKey, PromptBearingMembersChangeTheKey) {
  const std::string base = R"({"model":"m","messages":[{"role":"user","content":"hi"}]})";
  const RenderKey k = render_key("m", "", base);
  EXPECT_NE(k, render_key("m", "", R"({"model":"m","messages":[{"role":"user","content":"hi!"}]})"));
  // A member the gateway does not know stays in the key (tools, template switches).
  EXPECT_NE(k, render_key("m", "", R"({"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function"}]})"));
  EXPECT_NE(k, render_key("m", "", R"({"model":"m","messages":[{"role":"user","content":"hi"}],"chat_template_kwargs":{"x":1}})"));
  // The model the engine is asked for, and the adapter, are part of it.
  EXPECT_NE(k, render_key("other", "", base));
  EXPECT_NE(k, render_key("m", "lora", base));
}

TEST(RenderKey, StringsWithBracesQuotesAndEscapesAreOneValue) {
  // A '}' or ',' or an escaped quote inside a string must not end the member early.
  const std::string a = R"({"prompt":"a},\"stream\":{,","stream":false})";
  const std::string b = R"({"prompt":"a},\"stream\":{,","stream":true})";
  const std::string c = R"({"prompt":"a},\"stream\":{;","stream":true})";
  EXPECT_EQ(render_key("m", "", a), render_key("m", "", b));
  EXPECT_NE(render_key("m", "", b), render_key("m", "", c));
  // Trailing backslash-escaped backslash before the closing quote.
  EXPECT_NE(render_key("m", "", R"({"prompt":"x\\","n":1})"), render_key("m", "", R"({"prompt":"y\\","n":1})"));
}

// ---- the engine's answer ----

TEST(RenderAnswer, ChatObjectAndCompletionsArray) {
  auto chat = parse_render_answer(R"({"request_id":"r","token_ids":[1,2,300000],"sampling_params":{},"model":"m"})", false);
  ASSERT_TRUE(chat.ids) << chat.error;
  EXPECT_EQ(*chat.ids, (TokenIds{1, 2, 300000}));
  auto comp = parse_render_answer(R"([{"token_ids":[7,8]},{"token_ids":[9]}])", true);
  ASSERT_TRUE(comp.ids) << comp.error;
  EXPECT_EQ(*comp.ids, (TokenIds{7, 8}));  // the first prompt's
}

TEST(RenderAnswer, GarbageIsRefusedWithAReason) {
  for (const auto& [body, completions] : std::vector<std::pair<std::string, bool>>{
           {"", false}, {"{\"token_ids\": [1, 2, oops", false}, {"<html>502</html>", false},
           {R"({"token_ids":[]})", false}, {R"({"tokens":[1]})", false}, {R"({"token_ids":[1,-2]})", false},
           {R"({"token_ids":[1,4294967296]})", false}, {R"({"token_ids":[1.5]})", false},
           {R"({"token_ids":"1 2"})", false}, {R"([{"token_ids":[1]}])", false},
           {R"({"token_ids":[1]})", true}, {"[]", true}, {R"([1,2])", true}}) {
    auto a = parse_render_answer(body, completions);
    EXPECT_FALSE(a.ids) << body;
    EXPECT_FALSE(a.error.empty()) << body;
  }
  EXPECT_FALSE(parse_render_answer(R"({"token_ids":[1,2,3]})", false, 2).ids);  // past max_ids
}

// ---- the cache ----

std::shared_ptr<const TokenIds> ids(size_t n, uint32_t v = 1) { return std::make_shared<const TokenIds>(n, v); }

TEST(RenderCache, LeastRecentlyUsedGoesFirst) {
  RenderCache c(2, 1000);
  const RenderKey a{1, 0}, b{2, 0}, d{3, 0};
  c.insert(a, ids(3, 1));
  c.insert(b, ids(3, 2));
  ASSERT_TRUE(c.find(a));  // a is now the most recent
  c.insert(d, ids(3, 3));
  EXPECT_TRUE(c.find(a));
  EXPECT_FALSE(c.find(b));
  EXPECT_EQ((*c.find(d))[0], 3u);
  EXPECT_EQ(c.entries(), 2u);
  EXPECT_EQ(c.tokens(), 6u);
}

TEST(RenderCache, BoundedByTokensToo) {
  RenderCache c(100, 10);
  c.insert({1, 0}, ids(6));
  c.insert({2, 0}, ids(6));  // 12 > 10: the older goes
  EXPECT_FALSE(c.find({1, 0}));
  EXPECT_TRUE(c.find({2, 0}));
  c.insert({3, 0}, ids(11));  // larger than the whole cache: not kept, nothing evicted
  EXPECT_FALSE(c.find({3, 0}));
  EXPECT_TRUE(c.find({2, 0}));
  c.insert({2, 0}, ids(2));  // replacing an entry recounts its ids
  EXPECT_EQ(c.tokens(), 2u);
}

TEST(RenderCache, ZeroEntriesDisables) {
  RenderCache c(0, 1000);
  c.insert({1, 0}, ids(1));
  EXPECT_FALSE(c.find({1, 0}));
  EXPECT_EQ(c.entries(), 0u);
}

TEST(RenderCache, AHeldAnswerOutlivesItsEviction) {
  RenderCache c(1, 100);
  c.insert({1, 0}, ids(4, 9));
  auto held = c.find({1, 0});
  c.insert({2, 0}, ids(4));
  EXPECT_FALSE(c.find({1, 0}));
  ASSERT_TRUE(held);
  EXPECT_EQ(held->size(), 4u);
}

// ---- the event index looks the engine's ids up instead of the estimate ----

TEST(RenderTokens, EventIndexMatchesTheGivenIdsNotTheEstimate) {
  KvEventIndex idx(2);
  const Time now{};
  idx.set_connected(0, true, now);
  idx.set_synced(0, true);
  // The engine stored 2 blocks of 16 ids that no text estimates to (a real tokenizer's ids).
  TokenIds engine_ids(32);
  for (size_t i = 0; i < engine_ids.size(); ++i) engine_ids[i] = static_cast<uint32_t>(200000 + i);
  kv::EventBatch b;
  kv::BlockStored st;
  st.block_hashes = {11, 12};
  st.token_ids = engine_ids;
  st.block_size = 16;
  b.events.push_back(st);
  idx.apply(0, b, 0, 0, now);
  const std::string text(128, 'x');
  uint32_t matched[2] = {0, 0};
  KvEventIndex::Source src[2];
  EXPECT_EQ(idx.match(text, "", "", now, matched, src), 2u);
  EXPECT_EQ(matched[0], 0u);  // the estimate of the text finds nothing
  EXPECT_EQ(idx.match(text, "", "", now, matched, src, engine_ids), 2u);
  EXPECT_EQ(matched[0], 2u);  // the engine's own ids find both blocks
  EXPECT_EQ(src[0], KvEventIndex::Source::events);
  // A dispatch with the engine's ids is remembered under them (the recent window).
  idx.set_connected(1, true, now);
  idx.set_synced(1, true);
  idx.note_dispatch(1, text, "", "", now, engine_ids);
  matched[0] = matched[1] = 0;
  idx.match(text, "", "", now, matched, src, engine_ids);
  EXPECT_EQ(matched[1], 2u);
  EXPECT_EQ(src[1], KvEventIndex::Source::recent);
}

// ---- config ----

const std::string kPool = "pools: [{name: p, endpoints: ['127.0.0.1:1'], kv_events: {port: 5557}";
const std::string kModels = "}]\nmodels: [{name: m, pool: p}]\n";

void expect_config_error(const std::string& yaml, const std::string& needle) {
  try {
    parse_config(yaml);
    ADD_FAILURE() << "accepted: " << yaml;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "error was: " << e.what();
  }
}

TEST(RenderTokensConfig, DefaultsAndValues) {
  auto d = parse_config(kPool + kModels);
  EXPECT_EQ(d->pools[0].token_ids.source, TokenIdsConfig::Source::estimate);
  EXPECT_EQ(d->pools[0].token_ids.timeout, std::chrono::milliseconds(50));
  EXPECT_EQ(d->pools[0].token_ids.cache_entries, 4096u);
  auto c = parse_config(kPool + ", token_ids: {source: render, timeout_ms: 20, cache_entries: 10, cache_tokens: 1000}" + kModels);
  EXPECT_EQ(c->pools[0].token_ids.source, TokenIdsConfig::Source::render);
  EXPECT_EQ(c->pools[0].token_ids.timeout, std::chrono::milliseconds(20));
  EXPECT_EQ(c->pools[0].token_ids.cache_entries, 10u);
  EXPECT_EQ(c->pools[0].token_ids.cache_tokens, 1000u);
  // An endpoint's own kv_events address is enough.
  parse_config("pools: [{name: p, endpoints: [{address: '127.0.0.1:1', kv_events: 'tcp://127.0.0.1:5'}], "
               "token_ids: {source: render}}]\nmodels: [{name: m, pool: p}]\n");
}

TEST(RenderTokensConfig, ErrorsNameTheKey) {
  expect_config_error(kPool + ", token_ids: {source: tokenizer}" + kModels, "pools[0].token_ids.source: expected render or estimate");
  expect_config_error(kPool + ", token_ids: {source: render, timeout: 5}" + kModels, "pools[0].token_ids.timeout: unknown key");
  expect_config_error(kPool + ", token_ids: {timeout_ms: 0}" + kModels, "pools[0].token_ids.timeout_ms");
  expect_config_error(kPool + ", token_ids: {cache_entries: -1}" + kModels, "pools[0].token_ids.cache_entries");
  expect_config_error("pools: [{name: p, endpoints: ['127.0.0.1:1'], token_ids: {source: render}}]\nmodels: [{name: m, pool: p}]\n",
                      "pools[0].token_ids.source: render needs the engines' KV events");
  expect_config_error(kPool + ", engine: sglang, token_ids: {source: render}" + kModels,
                      "pools[0].token_ids.source: render needs vLLM engines (its /v1/chat/completions/render route); endpoints[0] is sglang");
  // estimate needs nothing
  parse_config("pools: [{name: p, endpoints: ['127.0.0.1:1'], token_ids: {source: estimate}}]\nmodels: [{name: m, pool: p}]\n");
}

}  // namespace
}  // namespace sluice
