#include "core/prefix/kv_events.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

namespace sluice::kv {
namespace {

std::string read_sample(const std::string& name) {
  std::ifstream f(std::string(SLUICE_TEST_DATA_DIR) + "/kv_events/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<uint32_t> tokens(uint32_t from, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = from + static_cast<uint32_t>(i);
  return t;
}

EventBatch sample_batch() {
  EventBatch b;
  b.ts = 1700000000.25;
  BlockStored st;
  st.block_hashes = {11, 0xffffffffffffffffull};
  st.token_ids = tokens(7, 32);
  st.block_size = 16;
  st.medium = "GPU";
  st.lora_name = "adapter";
  st.cache_salt = "s1";
  b.events.emplace_back(st);
  BlockStored child;
  child.block_hashes = {12};
  child.parent_block_hash = 0xffffffffffffffffull;
  child.token_ids = tokens(40, 16);
  child.block_size = 16;
  b.events.emplace_back(child);
  b.events.emplace_back(BlockRemoved{{11, 12}, "GPU"});
  b.events.emplace_back(AllBlocksCleared{});
  b.data_parallel_rank = 0;
  return b;
}

void expect_same(const EventBatch& a, const EventBatch& b) {
  EXPECT_DOUBLE_EQ(a.ts, b.ts);
  EXPECT_EQ(a.data_parallel_rank, b.data_parallel_rank);
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    ASSERT_EQ(a.events[i].index(), b.events[i].index()) << i;
    if (auto* x = std::get_if<BlockStored>(&a.events[i])) {
      auto& y = std::get<BlockStored>(b.events[i]);
      EXPECT_EQ(x->block_hashes, y.block_hashes);
      EXPECT_EQ(x->parent_block_hash, y.parent_block_hash);
      EXPECT_EQ(x->token_ids, y.token_ids);
      EXPECT_EQ(x->block_size, y.block_size);
      EXPECT_EQ(x->medium, y.medium);
      EXPECT_EQ(x->lora_name, y.lora_name);
      EXPECT_EQ(x->cache_salt, y.cache_salt);
    } else if (auto* r = std::get_if<BlockRemoved>(&a.events[i])) {
      EXPECT_EQ(r->block_hashes, std::get<BlockRemoved>(b.events[i]).block_hashes);
    }
  }
}

TEST(KvEvents, RoundTripsBothEncodings) {
  for (Encoding enc : {Encoding::arrays, Encoding::maps}) {
    std::string wire;
    encode_event_batch(sample_batch(), enc, wire);
    EventBatch got;
    ASSERT_EQ(decode_event_batch(wire, got), "") << to_string(enc);
    EXPECT_EQ(got.skipped_events, 0u);
    expect_same(sample_batch(), got);
  }
}

TEST(KvEvents, EncodingsDifferOnTheWire) {
  std::string a, m;
  encode_event_batch(sample_batch(), Encoding::arrays, a);
  encode_event_batch(sample_batch(), Encoding::maps, m);
  EXPECT_NE(a, m);
  EXPECT_EQ(static_cast<unsigned char>(a[0]), 0x93);  // fixarray of 3: [ts, events, rank]
  EXPECT_EQ(static_cast<unsigned char>(m[0]), 0x83);  // fixmap of 3
  EXPECT_NE(m.find("BlockStored"), std::string::npos);
  EXPECT_NE(m.find("token_ids"), std::string::npos);
  EXPECT_EQ(a.find("token_ids"), std::string::npos);
}

TEST(KvEvents, DecodesCommittedSamplesOfVllmVersions) {
  EventBatch b;
  ASSERT_EQ(decode_event_batch(read_sample("arrays_v09.msgpack"), b), "");
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_FALSE(b.data_parallel_rank.has_value());
  auto& st = std::get<BlockStored>(b.events[0]);
  EXPECT_EQ(st.block_hashes, (std::vector<uint64_t>{0x1111111111111111ull, 0x2222222222222222ull}));
  EXPECT_EQ(st.token_ids.size(), 32u);
  EXPECT_EQ(st.token_ids[0], 100u);
  EXPECT_EQ(st.block_size, 16);
  EXPECT_EQ(st.medium, "GPU");
  EXPECT_EQ(st.lora_name, "");
  EXPECT_EQ(std::get<BlockRemoved>(b.events[1]).block_hashes, std::vector<uint64_t>{0x2222222222222222ull});
  EXPECT_TRUE(std::holds_alternative<AllBlocksCleared>(b.events[2]));

  ASSERT_EQ(decode_event_batch(read_sample("arrays_v025.msgpack"), b), "");
  ASSERT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.data_parallel_rank, 0);
  auto& st2 = std::get<BlockStored>(b.events[0]);
  EXPECT_EQ(st2.lora_name, "adapter-a");
  EXPECT_EQ(st2.cache_salt, "salt-1");
  EXPECT_EQ(st2.block_hashes[1], static_cast<uint64_t>(int64_t{-5}));

  ASSERT_EQ(decode_event_batch(read_sample("maps_v026.msgpack"), b), "");
  ASSERT_EQ(b.events.size(), 3u);
  EXPECT_EQ(b.data_parallel_rank, 1);
  EXPECT_DOUBLE_EQ(b.ts, 1700000002.25);
  auto& st3 = std::get<BlockStored>(b.events[0]);
  EXPECT_EQ(st3.block_hashes, (std::vector<uint64_t>{0x1111111111111111ull, 0x2222222222222222ull}));  // bytes: low 64 bits
  EXPECT_EQ(std::get<BlockRemoved>(b.events[1]).block_hashes, std::vector<uint64_t>{0x2222222222222222ull});

  ASSERT_EQ(decode_event_batch(read_sample("maps_minimal.msgpack"), b), "");
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_DOUBLE_EQ(b.ts, 5);
  EXPECT_FALSE(std::get<BlockStored>(b.events[0]).parent_block_hash.has_value());
  EXPECT_EQ(std::get<BlockStored>(b.events[0]).medium, "");

  ASSERT_EQ(decode_event_batch(read_sample("mixed_map_of_arrays.msgpack"), b), "");
  ASSERT_EQ(b.events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<BlockRemoved>(b.events[0]));
}

TEST(KvEvents, RejectsGarbageWithAReason) {
  EventBatch b;
  EXPECT_NE(decode_event_batch("", b), "");
  EXPECT_NE(decode_event_batch("hello world", b), "");
  EXPECT_NE(decode_event_batch(std::string("\xc1", 1), b), "");          // never-used byte
  EXPECT_NE(decode_event_batch(std::string("\x92\xcb\x00", 3), b), "");  // truncated double
  EXPECT_NE(decode_event_batch(std::string("\xdd\xff\xff\xff\xff", 5), b), "");  // 2^32-1 elements, no bytes
  EXPECT_NE(decode_event_batch(std::string("\xdf\xff\xff\xff\xff", 5), b), "");  // huge map
  EXPECT_NE(decode_event_batch(std::string("\x91\xc0", 2), b), "");              // one field
  EXPECT_NE(decode_event_batch(std::string("\x92\xa1x\x90", 4), b), "");         // ts is a string
  // A valid batch followed by a byte.
  std::string wire;
  encode_event_batch(sample_batch(), Encoding::maps, wire);
  EXPECT_NE(decode_event_batch(wire + "x", b), "");
  // Every truncation of a valid payload is rejected, never read past.
  for (Encoding enc : {Encoding::arrays, Encoding::maps}) {
    std::string w;
    encode_event_batch(sample_batch(), enc, w);
    for (size_t n = 0; n < w.size(); ++n) EXPECT_NE(decode_event_batch(w.substr(0, n), b), "") << n;
  }
}

TEST(KvEvents, SkipsAndCountsMalformedEventsKeepingTheRest) {
  // [ts, [ good, ["Nope", 1], {"type": "BlockStored"} (missing fields), ["BlockRemoved", "x"] , good ]]
  std::string good;
  EventBatch one;
  one.events.emplace_back(BlockRemoved{{5}, ""});
  std::string w;
  encode_event_batch(one, Encoding::arrays, w);
  // w = 0x92 <ts double 9 bytes> 0x91 <event>: take the event's bytes.
  const std::string ev = w.substr(1 + 9 + 1);
  std::string batch = std::string("\x92\xcb", 2) + std::string(8, '\0') + "\x95" + ev +
                      std::string("\x92\xa4Nope\x01", 7) + std::string("\x81\xa4type\xab" "BlockStored", 18) +
                      std::string("\x92\xac" "BlockRemoved\xa1x", 16) + ev;
  EventBatch b;
  ASSERT_EQ(decode_event_batch(batch, b), "");
  EXPECT_EQ(b.events.size(), 2u);
  EXPECT_EQ(b.skipped_events, 3u);
}

TEST(KvEvents, RandomBytesNeverCrash) {
  std::mt19937_64 rng(7);
  std::string wire;
  encode_event_batch(sample_batch(), Encoding::maps, wire);
  EventBatch b;
  int decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string m = wire;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) m[rng() % m.size()] = static_cast<char>(rng());
    if (decode_event_batch(m, b).empty()) ++decoded;
    std::string junk(rng() % 64, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    (void)decode_event_batch(junk, b);
  }
  EXPECT_GT(decoded, 0);  // some flips land in values (token ids, ts): still well-formed
}

TEST(KvEvents, SequenceFrames) {
  int64_t s = 0;
  EXPECT_EQ(encode_seq(1), std::string("\0\0\0\0\0\0\0\x01", 8));
  EXPECT_EQ(encode_seq(-1), std::string(8, '\xff'));
  ASSERT_TRUE(decode_seq(encode_seq(0x0102030405060708), s));
  EXPECT_EQ(s, 0x0102030405060708);
  ASSERT_TRUE(decode_seq(encode_seq(-1), s));
  EXPECT_EQ(s, -1);
  EXPECT_FALSE(decode_seq("1234567", s));
}

}  // namespace
}  // namespace sluice::kv
