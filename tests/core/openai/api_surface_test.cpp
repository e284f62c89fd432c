// The Responses API, n / best_of and vLLM's extra routes in the request model; the Responses
// API's usage and ids in the response readers; GET /v1/models/{id}.
#include <gtest/gtest.h>

#include <string>

#include "core/config.h"
#include "core/openai/models_list.h"
#include "core/openai/request.h"
#include "core/openai/response_fields.h"

namespace sluice {
namespace {

TEST(ResponsesRequest, StringInputIsOneUserMessageAfterInstructions) {
  auto r = parse_request(ApiKind::response, R"({"model":"m","input":"Hello","instructions":"Be brief.",
    "max_output_tokens":32,"stream":true,"store":false,"previous_response_id":"resp_abc"})");
  ASSERT_TRUE(r.ok()) << r.error.message;
  const auto& q = *r.request;
  ASSERT_EQ(q.messages.size(), 2u);
  EXPECT_EQ(q.messages[0].role, "system");
  EXPECT_EQ(q.messages[0].content, "Be brief.");
  EXPECT_EQ(q.messages[1].role, "user");
  EXPECT_EQ(q.messages[1].content, "Hello");
  EXPECT_EQ(q.rendered, render_chat(q.messages));
  EXPECT_EQ(q.max_output_tokens, 32);
  EXPECT_TRUE(q.stream);
  EXPECT_FALSE(q.store);
  EXPECT_EQ(q.previous_response_id, "resp_abc");
}

TEST(ResponsesRequest, InputItemsWithPartsAndOtherItemTypes) {
  auto r = parse_request(ApiKind::response, R"({"model":"m","input":[
    {"role":"user","content":[{"type":"input_text","text":"Hi"},{"type":"input_text","text":" there"},
                              {"type":"input_image","image_url":"http://x/y.png","detail":"auto"}]},
    {"type":"message","role":"assistant","content":"Hello!"},
    {"type":"function_call_output","call_id":"c1","output":"42"}]})");
  ASSERT_TRUE(r.ok()) << r.error.message;
  const auto& q = *r.request;
  ASSERT_EQ(q.messages.size(), 3u);
  EXPECT_EQ(q.messages[0].content, "Hi therehttp://x/y.pngauto");
  EXPECT_EQ(q.messages[1].role, "assistant");
  EXPECT_EQ(q.messages[1].content, "Hello!");
  EXPECT_EQ(q.messages[2].role, "function_call_output");
  EXPECT_EQ(q.messages[2].content, "c142");
  EXPECT_TRUE(q.store);  // the default
}

TEST(ResponsesRequest, SharedConversationRendersToASharedPrefix) {
  auto a = parse_request(ApiKind::response, R"({"model":"m","instructions":"S","input":"q1"})");
  auto b = parse_request(ApiKind::response,
                         R"({"model":"m","instructions":"S","input":[{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2"}]})");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string& ra = a.request->rendered;
  const std::string& rb = b.request->rendered;
  const std::string head = ra.substr(0, ra.find("<|start_header_id|>assistant"));
  EXPECT_TRUE(rb.starts_with(head));
}

TEST(ResponsesRequest, ErrorsNameTheField) {
  auto missing = parse_request(ApiKind::response, R"({"model":"m"})");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error.param, "input");
  auto bad_item = parse_request(ApiKind::response, R"({"model":"m","input":[{"content":"x"}]})");
  ASSERT_FALSE(bad_item.ok());
  EXPECT_EQ(bad_item.error.param, "input[0]");
  auto bad_store = parse_request(ApiKind::response, R"({"model":"m","input":"x","store":"yes"})");
  ASSERT_FALSE(bad_store.ok());
  EXPECT_EQ(bad_store.error.param, "store");
  auto bad_prev = parse_request(ApiKind::response, R"({"model":"m","input":"x","previous_response_id":7})");
  ASSERT_FALSE(bad_prev.ok());
  EXPECT_EQ(bad_prev.error.param, "previous_response_id");
  auto bad_input = parse_request(ApiKind::response, R"({"model":"m","input":7})");
  ASSERT_FALSE(bad_input.ok());
  EXPECT_EQ(bad_input.error.param, "input");
}

TEST(ResponsesRequest, InjectedBoundIsMaxOutputTokens) {
  const std::string body = R"({"model":"m","input":"x"})";
  auto r = parse_request(ApiKind::response, body);
  ASSERT_TRUE(r.ok());
  BodyRewrite rw;
  rw.inject_max_tokens = 64;
  const std::string out = rewrite_body(body, *r.request, rw);
  EXPECT_NE(out.find("\"max_output_tokens\":64"), std::string::npos) << out;
  EXPECT_EQ(out.find("\"max_tokens\""), std::string::npos) << out;
  auto again = parse_request(ApiKind::response, out);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.request->max_output_tokens, 64);
}

TEST(Completions, NAndBestOf) {
  auto one = parse_request(ApiKind::chat, R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one.request->completions, 1);
  auto n3 = parse_request(ApiKind::chat, R"({"model":"m","n":3,"messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(n3.ok());
  EXPECT_EQ(n3.request->completions, 3);
  EXPECT_EQ(n3.request->n, 3);
  auto best = parse_request(ApiKind::completion, R"({"model":"m","prompt":"x","n":2,"best_of":5})");
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best.request->completions, 5);
  EXPECT_EQ(best.request->n, 2);
  auto null_n = parse_request(ApiKind::chat, R"({"model":"m","n":null,"messages":[{"role":"user","content":"x"}]})");
  ASSERT_TRUE(null_n.ok());
  EXPECT_EQ(null_n.request->completions, 1);
  for (const char* body : {R"({"model":"m","prompt":"x","n":0})", R"({"model":"m","prompt":"x","n":1000})",
                           R"({"model":"m","prompt":"x","n":"2"})", R"({"model":"m","prompt":"x","n":3,"best_of":2})"}) {
    auto bad = parse_request(ApiKind::completion, body);
    EXPECT_FALSE(bad.ok()) << body;
    EXPECT_EQ(bad.error.status, 400);
  }
}

TEST(ExtraRoutes, RequiredFieldsAndText) {
  auto tok = parse_request(ApiKind::tokenize, R"({"model":"m","prompt":"hello world"})");
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok.request->rendered, "hello world");
  auto tok_chat = parse_request(ApiKind::tokenize, R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(tok_chat.ok());
  EXPECT_EQ(tok_chat.request->rendered, render_chat({{"user", "hi"}}));
  auto detok = parse_request(ApiKind::detokenize, R"({"model":"m","tokens":[1,2,3]})");
  ASSERT_TRUE(detok.ok());
  EXPECT_EQ(detok.request->rendered, "1\n2\n3");
  auto rerank = parse_request(ApiKind::rerank, R"({"model":"m","query":"q","documents":["a","b"],"top_n":1})");
  ASSERT_TRUE(rerank.ok());
  EXPECT_EQ(rerank.request->rendered, "q\na\nb");
  EXPECT_EQ(rerank.request->num_inputs, 2u);
  auto score = parse_request(ApiKind::score, R"({"model":"m","text_1":"q","text_2":["a","b","c"]})");
  ASSERT_TRUE(score.ok());
  EXPECT_EQ(score.request->num_inputs, 3u);
  EXPECT_FALSE(parse_request(ApiKind::rerank, R"({"model":"m","query":"q"})").ok());
  EXPECT_FALSE(parse_request(ApiKind::score, R"({"model":"m","text_1":"q"})").ok());
  EXPECT_FALSE(parse_request(ApiKind::detokenize, R"({"model":"m"})").ok());
  EXPECT_FALSE(parse_request(ApiKind::tokenize, R"({"prompt":"x"})").ok());  // model
  EXPECT_TRUE(needs_pooling_pool(ApiKind::rerank));
  EXPECT_TRUE(needs_pooling_pool(ApiKind::score));
  EXPECT_TRUE(any_pool_kind(ApiKind::tokenize));
  EXPECT_FALSE(generates(ApiKind::score));
  EXPECT_TRUE(generates(ApiKind::response));
  EXPECT_EQ(pick_kind(ApiKind::response), ApiKind::chat);
}

TEST(ResponsesUsage, WholeResponseAndCompletedEvent) {
  auto whole = find_usage(R"({"id":"resp_1","object":"response","status":"completed","output":[],
    "usage":{"input_tokens":40,"input_tokens_details":{"cached_tokens":32},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":47}})");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->prompt_tokens, 40);
  EXPECT_EQ(whole->completion_tokens, 7);
  EXPECT_EQ(whole->cached_tokens, 32);
  // Small event: the full parse reads the `response` member.
  auto done = find_usage(R"({"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","usage":{"input_tokens":5,"output_tokens":3,"total_tokens":8}}})");
  ASSERT_TRUE(done);
  EXPECT_EQ(done->prompt_tokens, 5);
  EXPECT_EQ(done->completion_tokens, 3);
  // A long event (usage not in the tail): still found.
  std::string big = R"({"type":"response.completed","sequence_number":9,"response":{"id":"resp_1","usage":{"input_tokens":11,"output_tokens":4,"total_tokens":15},"output":[{"type":"message","content":[{"type":"output_text","text":")" +
                    std::string(2000, 'x') + R"("}]}]}})";
  auto late = find_usage(big);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->completion_tokens, 4);
  EXPECT_FALSE(find_usage(R"({"type":"response.created","response":{"id":"r","usage":null}})"));
  auto rerank = find_usage(R"({"id":"rerank-1","usage":{"total_tokens":12},"results":[]})");
  ASSERT_TRUE(rerank);
  EXPECT_EQ(rerank->prompt_tokens, 12);
}

TEST(ResponsesIds, FromBodyOrEvent) {
  EXPECT_EQ(response_id_of(R"({"id":"resp_a","object":"response"})"), "resp_a");
  EXPECT_EQ(response_id_of(R"({"type":"response.created","sequence_number":0,"response":{"object":"response","id":"resp_b"}})"),
            "resp_b");
  EXPECT_FALSE(response_id_of(R"({"object":"response"})"));
  EXPECT_FALSE(response_id_of("not json"));
  EXPECT_TRUE(is_output_text_delta("response.output_text.delta", "{}"));
  EXPECT_FALSE(is_output_text_delta("response.output_text.done", "{}"));
  EXPECT_TRUE(is_output_text_delta("", R"({"type":"response.output_text.delta","delta":"x"})"));
  EXPECT_FALSE(is_output_text_delta("", R"({"type":"response.completed"})"));
}

TEST(ModelLookup, SlashedIdsAndPercentEncoding) {
  Config c;
  c.models.push_back({"meta-llama/Llama-3.1-8B-Instruct", "chat", "meta-llama/Llama-3.1-8B-Instruct", ""});
  c.models.push_back({"llama-3-8b", "chat", "meta-llama/Llama-3.1-8B-Instruct", ""});
  EXPECT_EQ(decode_model_id("meta-llama%2FLlama-3.1-8B-Instruct"), "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ(decode_model_id("a%2"), "a%2");
  EXPECT_EQ(decode_model_id("a%zzb"), "a%zzb");
  auto entry = model_json(c, "meta-llama/Llama-3.1-8B-Instruct", 7);
  ASSERT_TRUE(entry);
  EXPECT_NE(entry->find(R"("id":"meta-llama/Llama-3.1-8B-Instruct")"), std::string::npos);
  EXPECT_NE(entry->find(R"("object":"model")"), std::string::npos);
  auto alias = model_json(c, "llama-3-8b", 7);
  ASSERT_TRUE(alias);
  EXPECT_NE(alias->find(R"("root":"meta-llama/Llama-3.1-8B-Instruct")"), std::string::npos);
  EXPECT_FALSE(model_json(c, "nope", 7));
}

}  // namespace
}  // namespace sluice
