#include "core/prefix/kv_event_index.h"

#include <gtest/gtest.h>

#include "core/prefix/token_blocks.h"

namespace sluice {
namespace {

using namespace std::chrono_literals;

// A text of `blocks` full 16-token blocks (64 bytes each), distinct per `tag`.
std::string text_of(char tag, size_t blocks) {
  std::string s;
  for (size_t i = 0; i < blocks * 64; ++i) s += static_cast<char>('a' + (tag + i * 7) % 26);
  return s;
}

// What an engine tokenising `text` with the estimate rule would publish: one BlockStored per
// chain, its engine hashes arbitrary (the gateway must not depend on them).
kv::BlockStored stored(const std::string& text, uint64_t engine_hash_base, std::optional<uint64_t> parent = {},
                       size_t from_block = 0, std::string lora = "") {
  std::vector<uint32_t> t;
  estimate_token_ids(text, t);
  kv::BlockStored st;
  st.block_size = 16;
  st.parent_block_hash = parent;
  st.lora_name = std::move(lora);
  for (size_t b = from_block; b < t.size() / 16; ++b) {
    st.block_hashes.push_back(engine_hash_base + b);
    st.token_ids.insert(st.token_ids.end(), t.begin() + b * 16, t.begin() + (b + 1) * 16);
  }
  return st;
}

kv::EventBatch batch(std::initializer_list<kv::Event> evs) {
  kv::EventBatch b;
  b.events = evs;
  return b;
}

struct Fixture : ::testing::Test {
  KvEventIndex idx{3};
  Time now{std::chrono::seconds(10)};
  std::vector<uint32_t> matched = std::vector<uint32_t>(3, 99);
  std::vector<KvEventIndex::Source> source = std::vector<KvEventIndex::Source>(3);
  void SetUp() override {
    for (size_t e = 0; e < 3; ++e) {
      idx.set_connected(e, true, now);
      idx.set_synced(e, true);
    }
  }
  void match(const std::string& text, std::string_view lora = "") {
    matched.assign(3, 99);  // the learned index's figure, kept for stale endpoints
    idx.match(text, lora, "", now, matched, source);
  }
};

TEST(KvSequenceTest, InOrderDuplicateGap) {
  KvSequence s;
  EXPECT_EQ(s.on_batch(5), KvSequence::Verdict::apply);  // first after connect: taken as it comes
  s.applied(5);
  EXPECT_EQ(s.on_batch(6), KvSequence::Verdict::apply);
  s.applied(6);
  EXPECT_EQ(s.on_batch(6), KvSequence::Verdict::duplicate);
  EXPECT_EQ(s.on_batch(3), KvSequence::Verdict::duplicate);
  EXPECT_EQ(s.on_batch(9), KvSequence::Verdict::gap);
  EXPECT_EQ(s.next(), 7);
  s.reset();
  EXPECT_EQ(s.on_batch(0), KvSequence::Verdict::apply);
}

TEST_F(Fixture, StoredBlocksMatchByTheGatewaysOwnHashOfTokenIds) {
  const std::string a = text_of(1, 4);
  idx.apply(1, batch({stored(a, 1000)}), 0, 0.001, now);
  match(a + "tail that is not a full block");
  EXPECT_EQ(matched[0], 0u);
  EXPECT_EQ(matched[1], 4u);
  EXPECT_EQ(matched[2], 0u);
  EXPECT_EQ(source[1], KvEventIndex::Source::events);
  // A different adapter never matches the same text.
  match(a, "adapter-x");
  EXPECT_EQ(matched[1], 0u);
}

TEST_F(Fixture, ChildEventsChainThroughTheEngineParentHash) {
  const std::string a = text_of(2, 6);
  kv::BlockStored head = stored(a.substr(0, 2 * 64), 500);
  kv::BlockStored tail = stored(a, 500, 501, 2);  // blocks 2..5, parent = engine hash of block 1
  idx.apply(0, batch({head}), 0, 0, now);
  idx.apply(0, batch({tail}), 1, 0, now);
  match(a);
  EXPECT_EQ(matched[0], 6u);
  // A child whose parent was never seen is an orphan: not indexed, counted.
  idx.apply(2, batch({stored(a, 900, 12345, 2)}), 0, 0, now);
  match(a);
  EXPECT_EQ(matched[2], 0u);
  EXPECT_EQ(idx.status(2, now).counters.orphans, 4u);
}

TEST_F(Fixture, RemovalsAndClearsForgetBlocks) {
  const std::string a = text_of(3, 4);
  idx.apply(0, batch({stored(a, 100)}), 0, 0, now);
  idx.apply(0, batch({kv::BlockRemoved{{102, 103}, "GPU"}}), 1, 0, now);  // the tail evicted
  match(a);
  EXPECT_EQ(matched[0], 2u);
  idx.apply(0, batch({kv::AllBlocksCleared{}}), 2, 0, now);
  match(a);
  EXPECT_EQ(matched[0], 0u);
  EXPECT_EQ(idx.status(0, now).counters.cleared, 1u);
  EXPECT_EQ(idx.status(0, now).blocks, 0u);
}

TEST_F(Fixture, ReconnectIsARestartAndStaleEndpointsKeepTheLearnedFigure) {
  const std::string a = text_of(4, 3);
  idx.apply(1, batch({stored(a, 10)}), 0, 0, now);
  idx.set_connected(1, false, now);
  match(a);
  EXPECT_EQ(matched[1], 99u);  // not fresh: the caller's (learned) figure stands
  EXPECT_EQ(source[1], KvEventIndex::Source::learned);
  idx.set_connected(1, true, now);
  idx.set_synced(1, true);
  match(a);
  EXPECT_EQ(matched[1], 0u);  // everything cleared on reconnect
  EXPECT_EQ(idx.status(1, now).counters.reconnects, 2u);
}

TEST_F(Fixture, RecentDispatchesCountUntilTheEventsArriveAndExpire) {
  const std::string a = text_of(5, 5);
  idx.note_dispatch(2, a, "", "", now);
  match(a);
  EXPECT_EQ(matched[2], 5u);
  EXPECT_EQ(source[2], KvEventIndex::Source::recent);
  idx.apply(2, batch({stored(a, 70)}), 0, 0, now);
  match(a);
  EXPECT_EQ(source[2], KvEventIndex::Source::events);  // equal: the engine's word
  // Two windows later the dispatch is forgotten; the engine's blocks remain.
  idx.apply(2, batch({kv::AllBlocksCleared{}}), 1, 0, now);
  now += 5s;
  match(a);
  EXPECT_EQ(matched[2], 0u);
}

// The eviction forecast: while the engine evicts, the blocks this gateway's unscheduled dispatches
// will allocate take the endpoint's least recent blocks; a touch (a chain extended by another
// request's stored blocks, or a dispatch) makes a chain most recent again.
TEST_F(Fixture, WhileTheEngineEvictsTheUnscheduledDispatchesTakeTheLeastRecentBlocks) {
  const std::string a = text_of(7, 6), b = text_of(8, 4), c = text_of(9, 4), d = text_of(10, 2);
  const Time t0 = now;
  // Stored in this order: a's tail is the least recent block, then the rest of a, then b, then c.
  idx.apply(0, batch({stored(a.substr(0, 4 * 64), 100), stored(b, 200), stored(c, 300)}), 0, 0, t0);
  // Engine steps that stored nothing: the chains are older than 32 steps (a touch walks them).
  for (int k = 0; k < 40; ++k) idx.apply(0, batch({}), 0, 0, t0);
  now = t0 + 5ms;
  idx.note_dispatch(0, d, "", "", now);  // 3 blocks to allocate (2 full + 1 partial), none cached
  match(a);
  EXPECT_EQ(matched[0], 4u);  // the engine has not evicted: it has free blocks
  EXPECT_FALSE(idx.status(0, now).evicting);
  EXPECT_EQ(idx.status(0, now).unscheduled_blocks, 3u);
  // c's tail evicted: the engine is evicting now. The dispatch's 3 blocks take a's tail three.
  now = t0 + 10ms;
  idx.apply(0, batch({kv::BlockRemoved{{303}, "GPU"}}), 1, 0, now);
  now = t0 + 12ms;
  EXPECT_TRUE(idx.status(0, now).evicting);
  match(a);
  EXPECT_EQ(matched[0], 1u);
  EXPECT_EQ(source[0], KvEventIndex::Source::events);
  now = t0 + 20ms;
  idx.note_dispatch(0, d, "", "", now);
  match(a);
  EXPECT_EQ(matched[0], 0u);  // 6 blocks at risk: all of a
  // A step ended (the batch after the one the first dispatch followed): it was scheduled. In the
  // same step another request was scheduled on a's chain (its new blocks stored with parent = a's
  // block 3): the chain is the most recent now, and b the least recent.
  now = t0 + 30ms;
  idx.apply(0, batch({kv::BlockRemoved{{302}, "GPU"}, stored(a, 100, 103, 4)}), 2, 0, now);
  match(a);
  EXPECT_EQ(matched[0], 6u);
  match(b);
  EXPECT_EQ(matched[0], 1u);  // the second dispatch's 3 blocks: b's tail three
  // One more step: the second dispatch is scheduled too, nothing is at risk.
  now = t0 + 40ms;
  idx.apply(0, batch({}), 3, 0, now);
  EXPECT_EQ(idx.status(0, now).unscheduled_blocks, 0u);
  match(b);
  EXPECT_EQ(matched[0], 4u);
  // This gateway's dispatch of b makes b the most recent (and will allocate 1 block): c, now the
  // least recent, loses its last block.
  now = t0 + 50ms;
  idx.note_dispatch(0, b, "", "", now);
  match(b);
  EXPECT_EQ(matched[0], 4u);
  match(c);
  EXPECT_EQ(matched[0], 1u);  // c's blocks 0-1 are present (2-3 evicted); block 1 is the least recent
  // No eviction for a second: the engine has room again, the events stand.
  now = t0 + 1500ms;
  idx.note_dispatch(0, d, "", "", now);
  match(c);
  EXPECT_EQ(matched[0], 2u);
}

TEST_F(Fixture, TheForecastCanBeSwitchedOff) {
  KvEventIndex::Options o;
  o.eviction_forecast = false;
  KvEventIndex plain(1, o);
  plain.set_connected(0, true, now);
  plain.set_synced(0, true);
  const std::string a = text_of(7, 4), c = text_of(9, 4);
  plain.apply(0, batch({stored(a, 100), stored(c, 300)}), 0, 0, now);
  plain.apply(0, batch({kv::BlockRemoved{{303}, "GPU"}}), 1, 0, now + 10ms);
  plain.note_dispatch(0, text_of(10, 8), "", "", now + 20ms);
  std::vector<uint32_t> m(1, 0);
  std::vector<KvEventIndex::Source> src(1);
  plain.match(a, "", "", now + 25ms, m, src);
  EXPECT_EQ(m[0], 4u);
}

TEST_F(Fixture, ASilentPublisherGoesStaleAfterAnUnansweredDispatch) {
  const std::string a = text_of(6, 2);
  idx.note_dispatch(0, a, "", "", now);
  EXPECT_TRUE(idx.fresh(0, now + 1s));
  EXPECT_FALSE(idx.fresh(0, now + 3s));  // 2 s without any event after a dispatch
  idx.apply(0, batch({}), 0, 0, now + 3s);
  EXPECT_TRUE(idx.fresh(0, now + 3s));
}

TEST_F(Fixture, MemoryIsBoundedByCapacityAndReported) {
  idx.set_capacity(0, 8);
  for (int i = 0; i < 50; ++i) idx.apply(0, batch({stored(text_of(static_cast<char>(i), 2), 10000 + 100 * i)}), i, 0, now);
  EXPECT_LE(idx.status(0, now).blocks, 8u);
  // The engine-hash map is bounded too (4x capacity): past it the endpoint is resynced.
  EXPECT_GE(idx.status(0, now).counters.resyncs, 1u);
  EXPECT_GT(idx.memory_bytes(), 0u);
}

TEST_F(Fixture, ANewBlockSizeStartsOver) {
  const std::string a = text_of(7, 4);
  idx.apply(0, batch({stored(a, 1)}), 0, 0, now);
  kv::BlockStored big;
  big.block_size = 32;
  big.block_hashes = {77};
  big.token_ids.assign(32, 1);
  idx.apply(1, batch({big}), 0, 0, now);
  EXPECT_EQ(idx.block_size(), 32);
  EXPECT_EQ(idx.status(0, now).blocks, 0u);
}

}  // namespace
}  // namespace sluice

#include "core/config.h"

namespace sluice {
namespace {

TEST(KvEventsConfig, PoolDefaultWithPortOffsetAndPerEndpointOverride) {
  auto cfg = parse_config(R"(
pools:
  - name: p
    kv_events: {port: 5557, replay_port: 6000, topic: "kv@", stale_after_ms: 900}
    endpoints: ["127.0.0.1:8001", "127.0.0.2:8002", {address: "127.0.0.3:8003", kv_events: "tcp://10.1.1.1:7000"}]
  - name: q
    endpoints: ["127.0.0.1:9001"]
models: [{name: m, pool: p}, {name: n, pool: q}]
)");
  const auto& p = cfg->pools[0];
  EXPECT_TRUE(p.kv_events.enabled);
  EXPECT_EQ(p.kv_events.topic, "kv@");
  EXPECT_EQ(p.kv_events.stale_after, std::chrono::milliseconds(900));
  EXPECT_EQ(p.endpoints[0].kv_events, "tcp://127.0.0.1:5557");
  EXPECT_EQ(p.endpoints[1].kv_events, "tcp://127.0.0.2:5558");  // + index, as vLLM's ranks
  EXPECT_EQ(p.endpoints[1].kv_events_replay, "tcp://127.0.0.2:6001");
  EXPECT_EQ(p.endpoints[2].kv_events, "tcp://10.1.1.1:7000");
  EXPECT_EQ(p.endpoints[2].kv_events_replay, "tcp://127.0.0.3:6002");
  EXPECT_FALSE(cfg->pools[1].kv_events.enabled);
}

TEST(KvEventsConfig, ErrorsNameTheKey) {
  const std::string models = "models: [{name: m, pool: p}]\n";
  try {
    parse_config("pools: [{name: p, endpoints: [{address: '127.0.0.1:1', kv_events: 'udp://x:1'}]}]\n" + models);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pools[0].endpoints[0].kv_events"), std::string::npos) << e.what();
  }
  try {
    parse_config("pools: [{name: p, kv_events: {port: 70000}, endpoints: ['127.0.0.1:1']}]\n" + models);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pools[0].kv_events.port"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_config("pools: [{name: p, kv_events: {bogus: 1}, endpoints: ['127.0.0.1:1']}]\n" + models),
               ConfigError);
}

}  // namespace
}  // namespace sluice
