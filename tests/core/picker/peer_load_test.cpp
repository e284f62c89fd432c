// PeerLoad (the other gateway replicas' in-flight load), its wire format and reporter, and the
// PoolRouter merge: one test per rule of peer_load.h / peer_report.h.
#include <gtest/gtest.h>
#include <msgpuck.h>

#include <random>

#include "core/picker/peer_load.h"
#include "core/picker/peer_report.h"
#include "core/picker/policy_factory.h"
#include "core/picker/pool_router.h"
#include "picker_test_util.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;

PoolConfig pool_of(size_t n, const std::string& policy) { return testing::pool_config(n, policy); }

uint64_t key_of(size_t i) { return peer_endpoint_key("127.0.0.1:" + std::to_string(9000 + i)); }

std::vector<uint64_t> keys(size_t n) {
  std::vector<uint64_t> k;
  for (size_t i = 0; i < n; ++i) k.push_back(key_of(i));
  return k;
}

PeerEndpointLoad busy(int64_t in_flight, int64_t prefill_requests, int64_t prefill_tokens, int64_t picks = 0) {
  PeerEndpointLoad l;
  l.in_flight = in_flight;
  l.prefill_requests = prefill_requests;
  l.prefill_tokens = prefill_tokens;
  l.decode_tokens = 100 * (in_flight - prefill_requests);
  l.live_context_tokens = 1000 * in_flight;
  l.context_tokens = 1100 * in_flight;
  l.input_tokens_total = 1000 * picks;
  l.predicted_cached_tokens_total = 400 * picks;
  l.picks_total = picks;
  return l;
}

PeerPoolReport report_of(std::vector<std::pair<size_t, PeerEndpointLoad>> eps) {
  PeerPoolReport r;
  r.pool = "chat";
  for (auto& [e, l] : eps) r.endpoints.push_back({key_of(e), l});
  return r;
}

PickRequest req_of(int64_t input, int64_t out = 50) {
  PickRequest r;
  r.model = "m";
  r.input_tokens = input;
  r.max_output_tokens = out;
  return r;
}

Time ms(int64_t v) { return Time(milliseconds(v)); }

// A valid message `wire` decodes only whole: every truncation of it is refused, and so is it with a
// byte after it.
void expect_decodes_only_whole(const std::string& wire) {
  PeerMessage d;
  std::string why;
  for (size_t n = 0; n < wire.size(); ++n) EXPECT_FALSE(decode_peer_message(wire.substr(0, n), d)) << n;
  EXPECT_FALSE(decode_peer_message(wire + '\0', d, &why));
  EXPECT_EQ(why, "trailing bytes");
}

TEST(PeerLoad, MergeAddsTheLivePeersInFlightLoad) {
  PeerLoad p(keys(2), "me", {});
  ASSERT_EQ(p.apply("a", 1, 1, report_of({{0, busy(3, 2, 5000)}}), ms(0)), PeerLoad::Applied::ok);
  ASSERT_EQ(p.apply("b", 1, 1, report_of({{0, busy(1, 1, 700)}, {1, busy(2, 0, 0)}}), ms(0)), PeerLoad::Applied::ok);
  EndpointLoad l;
  l.in_flight = 1;
  l.prefill_requests = 1;
  l.prefill_tokens = 100;
  p.add_to(0, l);
  EXPECT_EQ(l.in_flight, 5);
  EXPECT_EQ(l.prefill_requests, 4);
  EXPECT_EQ(l.prefill_tokens, 5800);
  EXPECT_EQ(l.decode_tokens, 100 * 1);
  EXPECT_EQ(l.live_context_tokens, 4000);
  EXPECT_EQ(p.in_flight(1), 2);
  // A report replaces that peer's previous one (state, not events): a added nothing, it finished two.
  ASSERT_EQ(p.apply("a", 1, 2, report_of({{0, busy(1, 0, 0)}}), ms(5)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.in_flight(0), 2);
  // An endpoint a report omits has nothing in flight from that peer.
  ASSERT_EQ(p.apply("b", 1, 2, report_of({{0, busy(1, 1, 700)}}), ms(5)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.in_flight(1), 0);
  EXPECT_EQ(p.peers(), 2u);
}

TEST(PeerLoad, OwnReportsDuplicatesAndRestarts) {
  PeerLoad p(keys(1), "me", {});
  EXPECT_EQ(p.apply("me", 1, 1, report_of({{0, busy(9, 9, 9)}}), ms(0)), PeerLoad::Applied::own);
  EXPECT_EQ(p.in_flight(0), 0);
  ASSERT_EQ(p.apply("a", 7, 5, report_of({{0, busy(4, 0, 0)}}), ms(0)), PeerLoad::Applied::ok);
  // The same or an older seq of the same instance: a duplicate or reordered message.
  EXPECT_EQ(p.apply("a", 7, 5, report_of({{0, busy(9, 0, 0)}}), ms(1)), PeerLoad::Applied::duplicate);
  EXPECT_EQ(p.apply("a", 7, 3, report_of({{0, busy(9, 0, 0)}}), ms(1)), PeerLoad::Applied::duplicate);
  EXPECT_EQ(p.in_flight(0), 4);
  // A new instance (the peer restarted) replaces it whatever its seq.
  ASSERT_EQ(p.apply("a", 8, 1, report_of({{0, busy(1, 0, 0)}}), ms(2)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.in_flight(0), 1);
  EXPECT_EQ(p.peers(), 1u);
  EXPECT_EQ(p.counters().duplicates, 2u);
  EXPECT_EQ(p.counters().own, 1u);
}

TEST(PeerLoad, APeerNotHeardForTheTtlExpiresWithItsLoad) {
  PeerLoad::Options o;
  o.ttl = milliseconds(100);
  PeerLoad p(keys(1), "me", o);
  ASSERT_EQ(p.apply("a", 1, 1, report_of({{0, busy(5, 2, 1000, 10)}}), ms(0)), PeerLoad::Applied::ok);
  ASSERT_EQ(p.apply("b", 1, 1, report_of({{0, busy(1, 0, 0)}}), ms(0)), PeerLoad::Applied::ok);
  ASSERT_EQ(p.apply("a", 1, 2, report_of({{0, busy(5, 2, 1000, 20)}}), ms(60)), PeerLoad::Applied::ok);
  p.expire(ms(99));
  EXPECT_EQ(p.in_flight(0), 6);
  p.expire(ms(100));  // b: silent for 100 ms
  EXPECT_EQ(p.peers(), 1u);
  EXPECT_EQ(p.in_flight(0), 5);
  EndpointLoad before;
  p.add_to(0, before);
  p.expire(ms(160));  // a too: no phantom load
  EXPECT_EQ(p.peers(), 0u);
  EXPECT_EQ(p.in_flight(0), 0);
  EndpointLoad after;
  p.add_to(0, after);
  EXPECT_EQ(after.in_flight, 0);
  EXPECT_EQ(after.prefill_tokens, 0);
  EXPECT_EQ(after.live_context_tokens, 0);
  // Its dispatches since first heard stay counted: the policies' rates never see totals go down.
  EXPECT_EQ(after.input_tokens_total, before.input_tokens_total);
  EXPECT_EQ(after.input_tokens_total, 10 * 1000);
  EXPECT_EQ(p.counters().expired, 2u);
  // Heard again: a new peer (its history is not a burst).
  ASSERT_EQ(p.apply("a", 1, 3, report_of({{0, busy(1, 0, 0, 25)}}), ms(200)), PeerLoad::Applied::ok);
  EndpointLoad again;
  p.add_to(0, again);
  EXPECT_EQ(again.input_tokens_total, 10 * 1000);
  EXPECT_EQ(again.in_flight, 1);
}

TEST(PeerLoad, CumulativeTotalsCountIncrementsSinceFirstHeard) {
  PeerLoad p(keys(1), "me", {});
  ASSERT_EQ(p.apply("a", 1, 1, report_of({{0, busy(1, 1, 10, 1000)}}), ms(0)), PeerLoad::Applied::ok);
  EndpointLoad l0;
  p.add_to(0, l0);
  EXPECT_EQ(l0.input_tokens_total, 0);  // 1000 picks of history are not new load
  ASSERT_EQ(p.apply("a", 1, 2, report_of({{0, busy(1, 1, 10, 1003)}}), ms(1)), PeerLoad::Applied::ok);
  // Omitted: idle, totals as last reported (no decrease, no double count).
  ASSERT_EQ(p.apply("a", 1, 3, report_of({}), ms(2)), PeerLoad::Applied::ok);
  ASSERT_EQ(p.apply("a", 1, 4, report_of({{0, busy(0, 0, 0, 1004)}}), ms(3)), PeerLoad::Applied::ok);
  EndpointLoad l;
  p.add_to(0, l);
  EXPECT_EQ(l.input_tokens_total, 4 * 1000);
  EXPECT_EQ(l.predicted_cached_tokens_total, 4 * 400);
  EXPECT_EQ(l.in_flight, 0);
}

TEST(PeerLoad, PeersPicksSinceTheLastScrapeCountAsAssigned) {
  PeerLoad p(keys(1), "me", {});
  ASSERT_EQ(p.apply("a", 1, 1, report_of({{0, busy(0, 0, 0, 10)}}), ms(0)), PeerLoad::Applied::ok);
  ASSERT_EQ(p.apply("a", 1, 2, report_of({{0, busy(3, 3, 30, 13)}}), ms(1)), PeerLoad::Applied::ok);
  EndpointLoad l;
  p.add_to(0, l);
  EXPECT_EQ(l.assigned_since_scrape, 3);
  p.on_scrape(0);
  ASSERT_EQ(p.apply("a", 1, 3, report_of({{0, busy(4, 4, 40, 14)}}), ms(2)), PeerLoad::Applied::ok);
  EndpointLoad m;
  p.add_to(0, m);
  EXPECT_EQ(m.assigned_since_scrape, 1);
}

TEST(PeerLoad, BoundedPeersAndRefusedValues) {
  PeerLoad::Options o;
  o.max_peers = 2;
  o.ttl = milliseconds(100);
  PeerLoad p(keys(2), "me", o);
  ASSERT_EQ(p.apply("a", 1, 1, report_of({{0, busy(1, 0, 0)}}), ms(0)), PeerLoad::Applied::ok);
  ASSERT_EQ(p.apply("b", 1, 1, report_of({{0, busy(1, 0, 0)}}), ms(0)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.apply("c", 1, 1, report_of({{0, busy(1, 0, 0)}}), ms(10)), PeerLoad::Applied::too_many_peers);
  EXPECT_EQ(p.in_flight(0), 2);
  // Once one has expired there is room.
  ASSERT_EQ(p.apply("a", 1, 2, report_of({{0, busy(1, 0, 0)}}), ms(50)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.apply("c", 1, 1, report_of({{0, busy(1, 0, 0)}}), ms(120)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.peers(), 2u);
  EXPECT_EQ(p.counters().refused_peers, 1u);
  // Values that are not load: refused whole, nothing applied.
  auto bad = busy(2, 3, 0);  // more queued than in flight
  EXPECT_EQ(p.apply("a", 1, 3, report_of({{1, busy(5, 0, 0)}, {0, bad}}), ms(121)), PeerLoad::Applied::bad_value);
  auto neg = busy(1, 0, 0);
  neg.prefill_tokens = -5;
  EXPECT_EQ(p.apply("a", 1, 4, report_of({{0, neg}}), ms(121)), PeerLoad::Applied::bad_value);
  EXPECT_EQ(p.in_flight(1), 0);
  EXPECT_EQ(p.counters().bad_values, 2u);
  // An endpoint this pool does not have is skipped and counted; the rest applies.
  PeerPoolReport r = report_of({{1, busy(2, 0, 0)}});
  r.endpoints.push_back({peer_endpoint_key("10.0.0.9:1"), busy(7, 0, 0)});
  EXPECT_EQ(p.apply("a", 1, 5, r, ms(122)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.in_flight(1), 2);
  EXPECT_EQ(p.counters().unknown_endpoints, 1u);
}

TEST(PeerReport, RoundTripsAndRefusesGarbage) {
  PeerMessage m;
  m.gateway = "gw-1";
  m.instance = 0xfeedface12345678ull;
  m.seq = 42;
  m.pools.push_back(report_of({{0, busy(3, 1, 2048, 77)}, {1, busy(1, 0, 0, 5)}}));
  m.pools[0].endpoints[0].load.prefill_pairs = 123456789.0;
  m.pools.push_back(PeerPoolReport{"embed", {}});
  const std::string wire = encode_peer_message(m);
  PeerMessage d;
  std::string why;
  ASSERT_TRUE(decode_peer_message(wire, d, &why)) << why;
  EXPECT_EQ(d.gateway, "gw-1");
  EXPECT_EQ(d.instance, m.instance);
  EXPECT_EQ(d.seq, 42u);
  ASSERT_EQ(d.pools.size(), 2u);
  EXPECT_EQ(d.pools[1].pool, "embed");
  ASSERT_EQ(d.pools[0].endpoints.size(), 2u);
  EXPECT_EQ(d.pools[0].endpoints[0].key, key_of(0));
  EXPECT_EQ(d.pools[0].endpoints[0].load.prefill_tokens, 2048);
  EXPECT_EQ(d.pools[0].endpoints[0].load.prefill_pairs, 123456789.0);
  EXPECT_EQ(d.pools[0].endpoints[0].load.picks_total, 77);
  EXPECT_EQ(d.pools[0].endpoints[1].load.decode_tokens, 100);
  expect_decodes_only_whole(wire);
  // Another version, plain text, a hostile element count.
  std::string v2 = wire;
  v2[1] = 2;
  EXPECT_FALSE(decode_peer_message(v2, d, &why));
  EXPECT_EQ(why, "unknown version");
  EXPECT_FALSE(decode_peer_message("hello", d));
  EXPECT_FALSE(decode_peer_message(std::string("\xdd\xff\xff\xff\xff", 5), d));
  // Random bytes and random corruptions never crash (and random bytes never decode).
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    std::string s = wire;
    s[rng() % s.size()] = static_cast<char>(rng());
    (void)decode_peer_message(s, d);
    std::string junk(rng() % 64, '\0');
    for (auto& c : junk) c = static_cast<char>(rng());
    if (!junk.empty() && (static_cast<unsigned char>(junk[0]) & 0xf0) != 0x90) {
      EXPECT_FALSE(decode_peer_message(junk, d));
    }
  }
}

TEST(PeerReport, ReporterListsBusyOrChangedEndpointsAndSenderBeats) {
  PeerReporter rep(keys(3), milliseconds(1000));
  std::vector<EndpointLoad> own(3);
  PeerPoolReport out;
  EXPECT_FALSE(rep.build(own, 0, ms(0), out));  // idle pool
  EXPECT_TRUE(out.endpoints.empty());
  own[1].in_flight = 2;
  own[1].prefill_requests = 1;
  own[1].picks_total = 2;
  own[1].input_tokens_total = 900;
  EXPECT_TRUE(rep.build(own, 0, ms(5), out));
  ASSERT_EQ(out.endpoints.size(), 1u);
  EXPECT_EQ(out.endpoints[0].key, key_of(1));
  EXPECT_EQ(out.endpoints[0].load.input_tokens_total, 900);
  EXPECT_FALSE(rep.build(own, 0, ms(10), out));  // unchanged (still listed: in flight)
  EXPECT_EQ(out.endpoints.size(), 1u);
  own[1] = EndpointLoad{};
  own[1].picks_total = 2;
  own[1].input_tokens_total = 900;
  EXPECT_TRUE(rep.build(own, 0, ms(15), out));  // finished: omitted = idle
  EXPECT_TRUE(out.endpoints.empty());
  EXPECT_FALSE(rep.build(own, 0, ms(1001), out));  // the refresh lists its totals again, no change
  EXPECT_EQ(out.endpoints.size(), 1u);

  PeerSender s("gw", 9, milliseconds(250));
  s.begin();
  s.add(PeerPoolReport{"chat", {}}, false);
  const std::string first = s.finish(ms(0));  // the first message always goes
  ASSERT_FALSE(first.empty());
  s.begin();
  s.add(PeerPoolReport{"chat", {}}, false);
  EXPECT_TRUE(s.finish(ms(100)).empty());
  s.begin();
  s.add(PeerPoolReport{"chat", {}}, true);
  const std::string changed = s.finish(ms(101));
  s.begin();
  s.add(PeerPoolReport{"chat", {}}, false);
  const std::string beat = s.finish(ms(360));
  ASSERT_FALSE(changed.empty());
  ASSERT_FALSE(beat.empty());
  PeerMessage m;
  ASSERT_TRUE(decode_peer_message(beat, m));
  EXPECT_EQ(m.seq, 3u);
  EXPECT_EQ(m.instance, 9u);
}

// The merge in PoolRouter: least_request counts the peers' requests.
TEST(PeerLoadRouter, LeastRequestCountsPeersDispatches) {
  auto cfg = pool_of(2, "least_request");
  PoolRouter r(cfg, make_policy(cfg, 1));
  r.share_load("me", {});
  auto req = req_of(100);
  DispatchGuard own = r.dispatch(req, Candidate{0}, ms(0));  // one of ours on ep0
  EXPECT_EQ(r.rank(req, ms(0)).front().endpoint, 1u);
  // A peer has three on ep1: ep0 (1) is now the least loaded.
  ASSERT_EQ(r.apply_peer("a", 1, 1, report_of({{1, busy(3, 0, 0)}}), ms(1)), PeerLoad::Applied::ok);
  EXPECT_EQ(r.rank(req, ms(2)).front().endpoint, 0u);
  const auto stats = r.peer_stats(ms(2));
  EXPECT_EQ(stats.peers, 1u);
  EXPECT_EQ(stats.in_flight, (std::vector<int64_t>{0, 3}));
  // The snapshot (metrics, the hard cap) stays the router's own accounting.
  EXPECT_EQ(r.snapshot(ms(2))[1].load.in_flight, 0);
  // Expired: back to the own accounting only.
  EXPECT_EQ(r.rank(req, ms(1001)).front().endpoint, 1u);
  EXPECT_EQ(r.peer_stats(ms(1001)).peers, 0u);
}

// The sluice policy's own-accounting inputs include the peers' load, and ext = scraped - (own +
// peers) does not count it twice: with the engine reporting exactly own + peer requests, the
// queue is that, not more.
TEST(PeerLoadRouter, SluicePolicyCountsPeersOnceNotTwice) {
  auto cfg = pool_of(2, "sluice");
  PoolRouter r(cfg, make_policy(cfg, 1));
  r.share_load("me", {});
  auto req = req_of(2000);
  // 1 own queued, 2000 uncached tokens, dispatched when the picks below look (its prefill not begun)
  DispatchGuard own = r.dispatch(req, Candidate{0}, ms(2));
  ASSERT_EQ(r.apply_peer("a", 1, 1, report_of({{0, busy(3, 3, 6000)}}), ms(0)), PeerLoad::Applied::ok);
  for (size_t e = 0; e < 2; ++e) {
    EngineSignals s;
    s.scraped_at = ms(1);
    s.waiting = e == 0 ? 4 : 0;  // the engine sees our 1 and the peer's 3
    s.kv_capacity_blocks = 10000;
    r.update_signals(e, s);
  }
  const std::string j = r.explain_json(req, ms(2));
  // ep0's queue: 4 requests (not 4 + 3), 8000 prefill tokens.
  const auto at = j.find("\"endpoint\":\"ep0\"");
  ASSERT_NE(at, std::string::npos) << j;
  const std::string ep0 = j.substr(at, j.find("}}", at) - at);
  EXPECT_NE(ep0.find("\"queued\":4,"), std::string::npos) << ep0;
  EXPECT_NE(ep0.find("\"queue_tokens\":8000,"), std::string::npos) << ep0;
  EXPECT_NE(ep0.find("\"peer_in_flight\":3,"), std::string::npos) << ep0;
  EXPECT_EQ(r.rank(req, ms(2)).front().endpoint, 1u);
  // Without the peer's report, ext (scraped 4 - own 1 = 3) stands in at mean prompt size.
  PoolRouter alone(cfg, make_policy(cfg, 1));
  DispatchGuard g = alone.dispatch(req, Candidate{0}, ms(2));
  EngineSignals s;
  s.scraped_at = ms(1);
  s.waiting = 4;
  alone.update_signals(0, s);
  const std::string k = alone.explain_json(req, ms(2));
  const auto at2 = k.find("\"endpoint\":\"ep0\"");
  const std::string ep0b = k.substr(at2, k.find("}}", at2) - at2);
  EXPECT_NE(ep0b.find("\"queued\":4,"), std::string::npos) << ep0b;
  EXPECT_EQ(ep0b.find("\"queue_tokens\":8000,"), std::string::npos) << ep0b;
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// A hostile publisher alternating huge and small totals (each drop reads as a restart) cannot
// overflow the cumulative sums.
TEST(PeerLoad, HostileTotalsSaturate) {
  PeerLoad p(keys(1), "me", {});
  PeerEndpointLoad big = busy(0, 0, 0), small = busy(0, 0, 0);
  big.input_tokens_total = big.picks_total = static_cast<int64_t>(kMaxPeerValue);
  for (uint64_t seq = 1; seq <= 40000; ++seq)
    ASSERT_EQ(p.apply("x", 1, seq, report_of({{0, seq % 2 ? small : big}}), ms(0)), PeerLoad::Applied::ok);
  EndpointLoad l;
  l.input_tokens_total = 1000;
  p.add_to(0, l);
  EXPECT_GT(l.input_tokens_total, int64_t{1} << 59);
  EXPECT_GT(l.assigned_since_scrape, 0);
}


// The running total of a peer's refused work: its increments since first heard, taken once; a
// restart counts from 0; a value out of range is refused. On the wire: a pool's optional third
// element, sent once above 0 (the two-element form still decodes, as 0).
TEST(PeerLoad, PeersRefusedWorkCountsIncrementsSinceFirstHeard) {
  PeerLoad p(keys(1), "me", {});
  PeerPoolReport r = report_of({});
  r.shed_work_total_ms = 500;
  ASSERT_EQ(p.apply("a", 1, 1, r, ms(0)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.take_shed_work_ms(), 0);  // its history
  r.shed_work_total_ms = 800;
  ASSERT_EQ(p.apply("a", 1, 2, r, ms(1)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.apply("a", 1, 2, r, ms(1)), PeerLoad::Applied::duplicate);
  EXPECT_EQ(p.take_shed_work_ms(), 300);
  EXPECT_EQ(p.take_shed_work_ms(), 0);
  r.shed_work_total_ms = 100;  // restarted
  ASSERT_EQ(p.apply("a", 2, 1, r, ms(2)), PeerLoad::Applied::ok);
  EXPECT_EQ(p.take_shed_work_ms(), 100);
  r.shed_work_total_ms = -1;
  EXPECT_EQ(p.apply("a", 2, 2, r, ms(3)), PeerLoad::Applied::bad_value);
  r.shed_work_total_ms = static_cast<int64_t>(kMaxPeerValue) + 1;
  EXPECT_EQ(p.apply("a", 2, 3, r, ms(3)), PeerLoad::Applied::bad_value);
  EXPECT_EQ(p.take_shed_work_ms(), 0);

  PeerMessage m;
  m.gateway = "gw";
  m.pools.push_back(report_of({{0, busy(1, 1, 10)}}));
  const std::string two = encode_peer_message(m);
  m.pools[0].shed_work_total_ms = 1234;
  const std::string three = encode_peer_message(m);
  EXPECT_GT(three.size(), two.size());
  PeerMessage d;
  std::string why;
  ASSERT_TRUE(decode_peer_message(two, d, &why)) << why;
  EXPECT_EQ(d.pools[0].shed_work_total_ms, 0);
  ASSERT_TRUE(decode_peer_message(three, d, &why)) << why;
  EXPECT_EQ(d.pools[0].shed_work_total_ms, 1234);
  expect_decodes_only_whole(three);
  m.pools[0].shed_work_total_ms = static_cast<int64_t>(kMaxPeerValue) + 1;
  EXPECT_FALSE(decode_peer_message(encode_peer_message(m), d, &why));
  EXPECT_EQ(why, "bad shed work total");
}

// A later version's message: a field appended at every level (a number, a string, nested containers)
// is stepped over, the known ones read as before; an appended value that is malformed or claims more
// than the message holds is refused like any other.
TEST(PeerReport, FieldsALaterVersionAppendsAreSteppedOver) {
  std::string w;
  char buf[16];
  auto raw = [&](char* end) { w.append(buf, static_cast<size_t>(end - buf)); };
  auto str = [&](std::string_view s) {
    raw(mp_encode_strl(buf, static_cast<uint32_t>(s.size())));
    w.append(s);
  };
  raw(mp_encode_array(buf, 7));  // 5 known + 2 appended
  raw(mp_encode_uint(buf, 1));
  str("gw-next");
  raw(mp_encode_uint(buf, 7));
  raw(mp_encode_uint(buf, 9));
  raw(mp_encode_array(buf, 1));  // pools
  raw(mp_encode_array(buf, 5));  // pool, endpoints, shed total + 2 appended
  str("chat");
  raw(mp_encode_array(buf, 1));
  raw(mp_encode_array(buf, 13));  // 11 known + 2 appended
  raw(mp_encode_uint(buf, key_of(0)));
  for (uint64_t v = 1; v <= 10; ++v) raw(mp_encode_uint(buf, v * 10));
  raw(mp_encode_double(buf, 0.5));
  raw(mp_encode_map(buf, 1));
  str("k");
  raw(mp_encode_array(buf, 2));
  raw(mp_encode_nil(buf));
  raw(mp_encode_bool(buf, true));
  raw(mp_encode_uint(buf, 4321));  // shed work total
  str("future");
  raw(mp_encode_array(buf, 0));
  raw(mp_encode_int(buf, -3));
  str("trailer");
  const std::string wire = w;

  PeerMessage d;
  std::string why;
  ASSERT_TRUE(decode_peer_message(wire, d, &why)) << why;
  EXPECT_EQ(d.gateway, "gw-next");
  EXPECT_EQ(d.instance, 7u);
  EXPECT_EQ(d.seq, 9u);
  ASSERT_EQ(d.pools.size(), 1u);
  EXPECT_EQ(d.pools[0].pool, "chat");
  EXPECT_EQ(d.pools[0].shed_work_total_ms, 4321);
  ASSERT_EQ(d.pools[0].endpoints.size(), 1u);
  EXPECT_EQ(d.pools[0].endpoints[0].key, key_of(0));
  EXPECT_EQ(d.pools[0].endpoints[0].load.in_flight, 10);
  EXPECT_EQ(d.pools[0].endpoints[0].load.picks_total, 100);
  // Truncated anywhere, with bytes after it, or fewer than the known elements: refused.
  expect_decodes_only_whole(wire);
  std::string four = wire;
  four[0] = static_cast<char>(0x94);
  EXPECT_FALSE(decode_peer_message(four, d, &why));
  // The last appended value replaced by a container claiming 2^32 - 1 elements (mp_check alone
  // would take its header for the whole of it), a string longer than what is left, or an array
  // holding such a container.
  const size_t last = wire.size() - 8;  // "trailer": a fixstr header and 7 bytes
  ASSERT_EQ(static_cast<unsigned char>(wire[last]), 0xa7u);
  for (const std::string& bad : {std::string("\xdd\xff\xff\xff\xff", 5), std::string("\xdf\xff\xff\xff\xff", 5),
                                 std::string("\xdb\x00\x01\x00\x00xx", 7), std::string("\x91\xdd\x7f\xff\xff\xff", 6)}) {
    EXPECT_FALSE(decode_peer_message(wire.substr(0, last) + bad, d, &why));
    EXPECT_EQ(why, "bad message");
  }
}

}  // namespace
}  // namespace sluice
