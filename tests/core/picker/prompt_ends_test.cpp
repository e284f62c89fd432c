#include "core/picker/prompt_ends.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

constexpr size_t kBlock = 64;
Time ms(int x) { return Time{} + std::chrono::milliseconds(x); }

TEST(PromptEnds, AnExtensionOfTheWholePromptIncludingItsPartialTail) {
  PromptEnds e;
  const std::string system(8 * kBlock, 's');
  const std::string turn = system + "user: hello";  // 8 whole blocks + an 11-character tail
  e.note(42, turn, 8, kBlock, ms(0));
  EXPECT_TRUE(e.extends(42, turn + " assistant: hi", 8, kBlock));
  EXPECT_FALSE(e.extends(42, turn, 8, kBlock)) << "the same prompt again does not extend it";
  EXPECT_FALSE(e.extends(42, system + "user: help me", 8, kBlock)) << "the same blocks, another tail";
  EXPECT_FALSE(e.extends(43, turn + " more", 8, kBlock)) << "another block chain";
  EXPECT_FALSE(e.extends(42, turn + " more", 7, kBlock)) << "another depth: another tail offset";
  EXPECT_FALSE(e.extends(0, turn + " more", 8, kBlock));
}

TEST(PromptEnds, APromptEndingOnABlockBoundaryIsExtendedByAnyLongerText) {
  PromptEnds e;
  const std::string p(4 * kBlock, 'x');
  e.note(7, p, 4, kBlock, ms(0));
  EXPECT_TRUE(e.extends(7, p + "y", 4, kBlock));
  EXPECT_FALSE(e.extends(7, p, 4, kBlock));
}

TEST(PromptEnds, TheLatestTailPerBlockAndNoneForCappedOrShortPrompts) {
  PromptEnds e;
  const std::string base(2 * kBlock, 'b');
  e.note(9, base + "one", 2, kBlock, ms(0));
  e.note(9, base + "two", 2, kBlock, ms(1));
  EXPECT_FALSE(e.extends(9, base + "one more", 2, kBlock));
  EXPECT_TRUE(e.extends(9, base + "two more", 2, kBlock));
  // Hashed blocks capped below the text's length: where the prompt ended is not known.
  e.note(11, std::string(5 * kBlock, 'c'), 2, kBlock, ms(2));
  EXPECT_FALSE(e.extends(11, std::string(6 * kBlock, 'c'), 2, kBlock));
  // Shorter than a block (no hash), or fewer characters than the blocks claim: not kept.
  e.note(0, "short", 0, kBlock, ms(3));
  e.note(12, "short", 1, kBlock, ms(3));
  EXPECT_FALSE(e.extends(12, std::string(kBlock, 's') + "more", 1, kBlock));
}

TEST(PromptEnds, ANewKeyDisplacesTheWayUsedLeastRecently) {
  PromptEnds e;
  // Keys in one set: set_of(key) = (key ^ key >> 31) % kSets, so small multiples of kSets share set 0.
  const uint64_t a = PromptEnds::kSets, b = 2 * PromptEnds::kSets, c = 3 * PromptEnds::kSets;
  const std::string t(kBlock, 't');
  e.note(a, t, 1, kBlock, ms(0));
  e.note(b, t, 1, kBlock, ms(1));
  e.note(a, t, 1, kBlock, ms(2));  // a used again: b is now the older
  e.note(c, t, 1, kBlock, ms(3));
  EXPECT_TRUE(e.extends(a, t + "x", 1, kBlock));
  EXPECT_FALSE(e.extends(b, t + "x", 1, kBlock));
  EXPECT_TRUE(e.extends(c, t + "x", 1, kBlock));
  e.clear();
  EXPECT_FALSE(e.extends(a, t + "x", 1, kBlock));
}

}  // namespace
}  // namespace sluice
