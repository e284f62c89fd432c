#include "model/engine/tokenizer.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include "core/openai/chat_template.h"

namespace sluice::engine {
namespace {

TEST(EngineTokenizer, FourBytesPerTokenAndDeterministic) {
  EXPECT_EQ(tokenize("").size(), 0u);
  EXPECT_EQ(tokenize("abc").size(), 1u);
  EXPECT_EQ(tokenize("abcd").size(), 1u);
  EXPECT_EQ(tokenize("abcde").size(), 2u);
  EXPECT_EQ(count_tokens("abcdefghi"), 3);
  EXPECT_EQ(tokenize("hello world, this is a test"), tokenize("hello world, this is a test"));
}

TEST(EngineTokenizer, TokenIdIsXxh3OfChunkModVocab) {
  const auto t = tokenize("abcdefg");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0], XXH3_64bits("abcd", 4) % kVocabSize);
  EXPECT_EQ(t[1], XXH3_64bits("efg", 3) % kVocabSize);
  for (auto id : tokenize(std::string(1000, 'x') + "yz")) EXPECT_LT(id, kVocabSize);
}

TEST(EngineTokenizer, SharedBytePrefixGivesSharedTokenPrefix) {
  const std::string sys(640, 's');
  auto a = tokenize(render_chat({{"system", sys}, {"user", "question one"}}));
  auto b = tokenize(render_chat({{"system", sys}, {"user", "a different question"}}));
  size_t common = 0;
  while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
  EXPECT_GE(common, 640u / 4);  // the whole system prompt is shared
  EXPECT_LT(common, a.size());
}

}  // namespace
}  // namespace sluice::engine
