#include "core/msgpack_io.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice {
namespace {

MsgpackReader reader(const std::string& s) { return MsgpackReader(s.data(), s.data() + s.size()); }

TEST(MsgpackIo, WhatTheWriterWritesTheReaderReads) {
  std::string out;
  MsgpackWriter w(out);
  w.array(7);
  w.uint(300);
  w.sint(-5);
  w.str("pool-a");
  w.nil();
  w.dbl(2.5);
  w.map(1);
  w.str("k");
  w.uint(1);
  w.sint(INT64_MIN);
  MsgpackReader r = reader(out);
  uint32_t n = 0;
  ASSERT_TRUE(r.array(n));
  EXPECT_EQ(n, 7u);
  uint64_t u = 0;
  ASSERT_TRUE(r.uint(u));
  EXPECT_EQ(u, 300u);
  int64_t i = 0;
  EXPECT_FALSE(r.uint(u)) << "a negative int is not a uint";
  ASSERT_TRUE(r.sint(i));
  EXPECT_EQ(i, -5);
  std::string_view s;
  EXPECT_FALSE(r.str(s, 5)) << "longer than the bound";
  ASSERT_TRUE(r.str(s, 6));
  EXPECT_EQ(s, "pool-a");
  EXPECT_TRUE(r.nil());
  double d = 0;
  ASSERT_TRUE(r.number(d));
  EXPECT_EQ(d, 2.5);
  ASSERT_TRUE(r.skip()) << "the map, whole";
  ASSERT_TRUE(r.bits64(u));
  EXPECT_EQ(u, uint64_t{1} << 63) << "a negative int's two's complement";
  EXPECT_TRUE(r.at_end());
}

TEST(MsgpackIo, AUintPastInt64IsNoSignedInt) {
  std::string out;
  MsgpackWriter(out).uint(uint64_t{1} << 63);
  int64_t i = 0;
  EXPECT_FALSE(reader(out).sint(i));
  double d = 0;
  EXPECT_FALSE(reader(out).number(d));
}

TEST(MsgpackIo, ACountLargerThanTheBytesLeftIsRefused) {
  // array32 / map32 headers claiming 2^32-1 elements, followed by two bytes.
  const std::string array("\xdd\xff\xff\xff\xff\x01\x02", 7);
  const std::string map("\xdf\xff\xff\xff\xff\x01\x02", 7);
  uint32_t n = 0;
  EXPECT_FALSE(reader(array).array(n));
  EXPECT_FALSE(reader(map).map(n));
  EXPECT_FALSE(reader(array).skip());
  EXPECT_FALSE(reader(map).skip());
  // Nested: each header alone fits its bytes, together they claim more values than bytes.
  const std::string nested("\x92\x92\x92\x01", 4);  // [[[1, ?], ?], ?]
  EXPECT_FALSE(reader(nested).skip());
}

TEST(MsgpackIo, TruncatedValuesAreRefused) {
  std::string out;
  MsgpackWriter w(out);
  w.str("a string of some length");
  w.dbl(1.0);
  for (size_t cut = 0; cut < out.size(); ++cut) {
    const std::string part = out.substr(0, cut);
    MsgpackReader r = reader(part);
    std::string_view s;
    double d = 0;
    const bool both = r.str(s) && r.number(d);
    EXPECT_FALSE(both) << "cut at " << cut;
    EXPECT_FALSE(reader(part).skip(2)) << "cut at " << cut;
  }
  EXPECT_TRUE(reader(out).skip(2));
  EXPECT_FALSE(reader(out).skip(3)) << "past the end";
}

TEST(MsgpackIo, TheWrongTypeIsRefusedWithoutMoving) {
  std::string out;
  MsgpackWriter(out).str("x");
  MsgpackReader r = reader(out);
  uint64_t u = 0;
  uint32_t n = 0;
  std::string_view b;
  EXPECT_FALSE(r.uint(u));
  EXPECT_FALSE(r.array(n));
  EXPECT_FALSE(r.bin(b));
  EXPECT_FALSE(r.nil());
  std::string_view s;
  ASSERT_TRUE(r.str(s));
  EXPECT_EQ(s, "x");
}

}  // namespace
}  // namespace sluice
