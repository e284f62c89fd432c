// json_string_end (src/core/openai/json_scan.h): the 64-byte block scan against a byte-by-byte
// reference, on strings whose quotes and backslash runs fall at every offset of a block, across
// block boundaries, and at the end of the input.
#include "core/openai/json_scan.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace sluice {
namespace {

// The reference: a backslash escapes the next byte; the first unescaped quote ends the string.
const char* reference_end(const char* p, const char* end) {
  for (bool escaped = false; p < end; ++p) {
    if (escaped) escaped = false;
    else if (*p == '\\') escaped = true;
    else if (*p == '"') return p + 1;
  }
  return nullptr;
}

ptrdiff_t end_of(const std::string& s) {
  const char* r = json_string_end(s.data(), s.data() + s.size());
  return r == nullptr ? -1 : r - s.data();
}
ptrdiff_t reference_of(const std::string& s) {
  const char* r = reference_end(s.data(), s.data() + s.size());
  return r == nullptr ? -1 : r - s.data();
}

TEST(JsonStringEnd, PlainQuoteAtEveryOffset) {
  for (size_t at = 0; at < 200; ++at) {
    std::string s(at, 'a');
    s += "\"tail\"";
    EXPECT_EQ(end_of(s), static_cast<ptrdiff_t>(at + 1)) << at;
  }
}

TEST(JsonStringEnd, BackslashRunsBeforeAQuoteAtEveryOffset) {
  // A run of n backslashes ending just before a quote: the quote is escaped when n is odd. The run
  // and the quote are placed at every offset around the 64-byte block edges.
  for (size_t n = 0; n <= 5; ++n)
    for (size_t at = 0; at < 140; ++at) {
      std::string s(at, 'x');
      s.append(n, '\\');
      s += "\"more text then the end\"";
      s.append(70, 'y');
      const ptrdiff_t want = reference_of(s);
      EXPECT_EQ(end_of(s), want) << "n=" << n << " at=" << at;
      EXPECT_EQ(want, static_cast<ptrdiff_t>(n % 2 == 0 ? at + n + 1 : s.find('"', at + n + 1) + 1));
    }
}

TEST(JsonStringEnd, AfterAnEscapedQuoteRunsAcrossBlockEdges) {
  // An escaped quote first (the scan then reads 64-byte blocks from the byte after it), then a run of
  // n backslashes and a quote at every offset: runs that straddle a block edge carry their escape.
  for (size_t n = 0; n <= 4; ++n)
    for (size_t at = 0; at < 200; ++at) {
      std::string s = "x\\\"";
      s.append(at, 'c');
      s.append(n, '\\');
      s += "\"";
      s.append(100, n % 2 ? 'z' : '"');
      s += "\"";
      ASSERT_EQ(end_of(s), reference_of(s)) << "n=" << n << " at=" << at;
    }
}

TEST(JsonStringEnd, UnterminatedIsNull) {
  EXPECT_EQ(end_of(""), -1);
  EXPECT_EQ(end_of(std::string(300, 'a')), -1);
  EXPECT_EQ(end_of(std::string(63, 'a') + "\\\""), -1);  // escaped quote ending the input
  EXPECT_EQ(end_of(std::string(64, 'a') + "\\"), -1);
  std::string s;
  for (int i = 0; i < 50; ++i) s += "ab\\\"cd\\n";
  EXPECT_EQ(end_of(s), -1);
}

TEST(JsonStringEnd, RandomQuotesAndBackslashesMatchTheReference) {
  std::mt19937 rng(11);
  const char alphabet[] = {'a', 'b', '\\', '\\', '"', 'n', ' '};
  for (int round = 0; round < 20000; ++round) {
    std::string s(rng() % 300, 'a');
    const unsigned density = 1 + rng() % 40;  // one special byte in `density`
    for (char& c : s)
      c = rng() % density == 0 ? alphabet[2 + rng() % 3] : alphabet[rng() % 2];
    ASSERT_EQ(end_of(s), reference_of(s)) << s;
    // And from every start offset in the first block (the block scan's alignment moves).
    if (round % 100 == 0)
      for (size_t from = 1; from < std::min<size_t>(s.size(), 70); ++from) {
        const char* r = json_string_end(s.data() + from, s.data() + s.size());
        const char* w = reference_end(s.data() + from, s.data() + s.size());
        ASSERT_EQ(r, w) << s << " from " << from;
      }
  }
}

}  // namespace
}  // namespace sluice
