#include "core/openai/response_fields.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(ModelRewriter, RewritesTheModelMemberOnly) {
  ModelRewriter rw("meta/Llama-3.1-8B", "llama-3-8b");
  std::string out;
  EXPECT_TRUE(rw.append("data: {\"id\":\"x\",\"model\":\"meta/Llama-3.1-8B\",\"choices\":[]}\n\n", out));
  EXPECT_EQ(out, "data: {\"id\":\"x\",\"model\":\"llama-3-8b\",\"choices\":[]}\n\n");
}

TEST(ModelRewriter, KeepsWhitespaceAndSkipsOtherValues) {
  ModelRewriter rw("a", "b");
  std::string out;
  EXPECT_TRUE(rw.append("{\"x\":{\"model\" : \"z\"}, \"model\": \"a\"}", out));
  EXPECT_EQ(out, "{\"x\":{\"model\" : \"z\"}, \"model\": \"b\"}");
}

TEST(ModelRewriter, IgnoresEscapedTextInsideStrings) {
  ModelRewriter rw("a", "b");
  std::string out;
  const std::string text = "{\"content\":\"say \\\"model\\\":\\\"a\\\"\"}";
  EXPECT_FALSE(rw.append(text, out));
  EXPECT_EQ(out, text);
}

TEST(ModelRewriter, PrefixOfTargetIsNotAMatch) {
  ModelRewriter rw("llama", "x");
  std::string out;
  EXPECT_FALSE(rw.append("{\"model\":\"llama-2\"}", out));
  EXPECT_EQ(out, "{\"model\":\"llama-2\"}");
}

TEST(FindUsage, ReadsTokensAndCachedTokens) {
  auto u = find_usage(R"({"id":"c","choices":[],"usage":{"prompt_tokens":40,"completion_tokens":7,"total_tokens":47,"prompt_tokens_details":{"cached_tokens":32}}})");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->prompt_tokens, 40);
  EXPECT_EQ(u->completion_tokens, 7);
  EXPECT_EQ(u->cached_tokens, 32);
}

TEST(FindUsage, NullOrAbsentOrMalformed) {
  EXPECT_FALSE(find_usage(R"({"choices":[{"delta":{}}],"usage":null})"));
  EXPECT_FALSE(find_usage(R"({"choices":[]})"));
  EXPECT_FALSE(find_usage(R"({"usage":{"prompt_tokens":)"));
  EXPECT_FALSE(find_usage("[DONE]"));
}

// A completion longer than 256 bytes takes the fast path: the last `"usage"` key in the tail, its object
// cut out (strings crossed by their unescaped quotes) and parsed alone.
TEST(FindUsage, LongCompletionUsageObjectCutOutWithStringsHonoured) {
  const std::string content(300, 'x');
  // A string inside usage holding braces, an escaped quote and an escaped backslash before its end.
  auto u = find_usage(R"({"id":"c","choices":[{"message":{"content":")" + content +
                      R"("}}],"usage":{"note":"a } \" { \\","prompt_tokens":40,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":32}},"x":1})");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->prompt_tokens, 40);
  EXPECT_EQ(u->completion_tokens, 7);
  EXPECT_EQ(u->cached_tokens, 32);
  // The key only inside the content (escaped quotes around it): not a usage object.
  EXPECT_FALSE(find_usage(R"({"id":"c","choices":[{"message":{"content":")" + content +
                          R"( \"usage\":{\"prompt_tokens\":1}"}}]})"));
  // An unterminated string inside the usage object: no usage, no crash.
  EXPECT_FALSE(find_usage(R"({"id":"c","content":")" + content + R"(","usage":{"note":"open \"})"));
}

TEST(CarriesTokens, ClassifiesStreamData) {
  EXPECT_TRUE(carries_tokens(R"({"choices":[{"delta":{"content":"hi"}}]})"));
  EXPECT_FALSE(carries_tokens(R"({"choices":[],"usage":{}})"));
  EXPECT_FALSE(carries_tokens("[DONE]"));
  EXPECT_FALSE(carries_tokens(R"({"error":{"message":"x"}})"));
  EXPECT_FALSE(carries_tokens(""));
  // The role chunk that opens a chat stream carries no token (vLLM's, SGLang's, two choices).
  EXPECT_FALSE(carries_tokens(
      R"({"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})"));
  EXPECT_FALSE(carries_tokens(
      R"({"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}]})"));
  EXPECT_FALSE(carries_tokens(
      R"({"choices":[{"index":0,"delta":{"role":"assistant"}},{"index":1,"delta":{"role":"assistant","content":null}}]})"));
  // With output, it does: content, a tool call, a reasoning token, a finish, a null role.
  EXPECT_TRUE(carries_tokens(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]})"));
  EXPECT_TRUE(carries_tokens(
      R"({"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"t","function":{"name":"f"}}]}}]})"));
  EXPECT_TRUE(carries_tokens(R"({"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"so"}}]})"));
  EXPECT_TRUE(carries_tokens(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]})"));
  EXPECT_TRUE(carries_tokens(R"({"choices":[{"index":0,"delta":{"role":null,"content":"x"},"finish_reason":null}]})"));
  // One choice announcing its role, another with a token: output.
  EXPECT_TRUE(carries_tokens(
      R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}},{"index":1,"delta":{"content":"x"}}]})"));
  // A completions chunk names no role.
  EXPECT_TRUE(carries_tokens(R"({"choices":[{"index":0,"text":"","finish_reason":null}]})"));
  // After the stream's first token a chunk is not looked at for a role (the role chunks open it).
  EXPECT_TRUE(carries_tokens(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})", false));
  // Not JSON past the role: taken as output, as before.
  EXPECT_TRUE(carries_tokens(R"({"choices":[{"delta":{"role":"assistant",)"));
}

}  // namespace
}  // namespace sluice
