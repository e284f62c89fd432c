// PoolRouter with the KV-aware policies: accounting extensions, explain_json, frozen metrics.
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>

#include "core/picker/policy_factory.h"
#include "core/picker/pool_router.h"
#include "core/picker/scorers/load_estimate.h"
#include "core/prefix/kv_event_index.h"
#include "core/prefix/token_blocks.h"
#include "picker_test_util.h"

namespace sluice {
namespace {

PoolConfig pool_of(size_t n, const std::string& policy) { return testing::pool_config(n, policy); }

PickRequest req_of(const std::string& text, int64_t out = 50) {
  PickRequest r;
  r.model = "m";
  r.text = text;
  r.input_tokens = static_cast<int64_t>(text.size() / 4);
  r.max_output_tokens = out;
  return r;
}

// The head of each endpoint's prefill queue: the oldest own request not yet past first token, and
// since when it has been the head (its dispatch, or the first token or end of the one before it,
// in or out of order).
// The policy is told each prefill queue head's first token (on_prefill_done): how long it was the
// head, its tokens and pairs, the own decoders and KV then, and the own prefill tokens behind it.
// A first token at no known time (tokens first) and one out of order tell it nothing.
class RecordingPolicy final : public Policy {
 public:
  std::string_view name() const override { return "recording"; }
  void rank(const PickRequest&, std::span<const EndpointView> endpoints, Time, std::vector<Candidate>& out) override {
    out.clear();
    for (const auto& v : endpoints) out.push_back({v.index, 0.0, 0});
  }
  void on_prefill_done(size_t endpoint, const PrefillSample& s, Time now) override {
    samples.push_back({endpoint, s, now});
  }
  ExpectedPrefill expected_prefill(size_t, const PrefillSample& head) const override {
    heads.push_back(head);
    return {expected_ms, carried};
  }
  void on_decode_done(size_t, const DecodeSample& d, Time) override { decodes.push_back(d); }
  std::vector<DecodeSample> decodes;
  double expected_itl_ms(size_t, const PrefillSample& batch) const override {
    batches.push_back(batch);
    return itl_ms;
  }
  double expected_ms = -1;  // < 0: no model
  double carried = 0;
  double itl_ms = -1;
  mutable std::vector<PrefillSample> batches;  // what expected_itl_ms was asked
  mutable std::vector<PrefillSample> heads;  // what expected_prefill was asked
  struct Seen {
    size_t endpoint;
    PrefillSample sample;
    Time now;
  };
  std::vector<Seen> samples;
};

// A one-endpoint pool whose policy records what the router tells it.
struct Recorded {
  RecordingPolicy* policy;
  std::unique_ptr<PoolRouter> router;
};
Recorded recording_pool() {
  auto owned = std::make_unique<RecordingPolicy>();
  RecordingPolicy* policy = owned.get();
  return {policy, std::make_unique<PoolRouter>(pool_of(1, "round_robin"), std::move(owned))};
}

TEST(PoolRouterPicker, EachPrefillHeadsFirstTokenIsASampleOfTheEndpointsPace) {
  const Recorded rec = recording_pool();
  RecordingPolicy& policy = *rec.policy;
  PoolRouter& r = *rec.router;
  const auto ms = [](int n) { return Time{std::chrono::milliseconds(n)}; };
  const std::string ta(4000, 'a'), tb(2000, 'b'), tc(800, 'c');
  auto a = req_of(ta, 10);  // 1000 tokens
  auto b = req_of(tb, 10);  // 500
  auto c = req_of(tc, 10);  // 200
  DispatchGuard ga = r.dispatch(a, r.rank(a, ms(10))[0], ms(10));
  DispatchGuard gb = r.dispatch(b, r.rank(b, ms(20))[0], ms(20));
  DispatchGuard gc = r.dispatch(c, r.rank(c, ms(30))[0], ms(30));
  ga.on_first_token(ms(110));  // the head since its dispatch at 10
  ASSERT_EQ(policy.samples.size(), 1u);
  EXPECT_EQ(policy.samples[0].endpoint, 0u);
  EXPECT_EQ(policy.samples[0].now, ms(110));
  EXPECT_DOUBLE_EQ(policy.samples[0].sample.elapsed_ms, 100.0);
  EXPECT_DOUBLE_EQ(policy.samples[0].sample.tokens, 1000.0);
  EXPECT_DOUBLE_EQ(policy.samples[0].sample.pairs, 1000.0 * 500.0);
  EXPECT_DOUBLE_EQ(policy.samples[0].sample.behind, 700.0);  // b and c
  EXPECT_DOUBLE_EQ(policy.samples[0].sample.decoding, 0.0);
  EXPECT_DOUBLE_EQ(policy.samples[0].sample.kv_read, 1700.0);
  EXPECT_FALSE(policy.samples[0].sample.mid_step);  // it came to an idle endpoint
  gc.on_first_token(ms(120));  // out of order: c was not the head
  EXPECT_EQ(policy.samples.size(), 1u);
  gb.on_first_token(ms(150));  // the head since a's first token
  ASSERT_EQ(policy.samples.size(), 2u);
  EXPECT_DOUBLE_EQ(policy.samples[1].sample.elapsed_ms, 40.0);
  EXPECT_DOUBLE_EQ(policy.samples[1].sample.tokens, 500.0);
  EXPECT_DOUBLE_EQ(policy.samples[1].sample.behind, 0.0);
  EXPECT_DOUBLE_EQ(policy.samples[1].sample.decoding, 2.0);  // a and c decode
  EXPECT_FALSE(policy.samples[1].sample.mid_step);  // the head from a's first token, a step's end
  DispatchGuard gd = r.dispatch(a, r.rank(a, ms(200))[0], ms(200));
  gd.on_tokens(1);  // its first token at no known time
  EXPECT_EQ(policy.samples.size(), 2u);
  DispatchGuard ge = r.dispatch(a, r.rank(a, ms(300))[0], ms(300));
  ge.on_whole_answer(ms(900), 0);  // a whole answer: its decode is in the time too
  EXPECT_EQ(policy.samples.size(), 2u);
  EXPECT_EQ(r.snapshot(ms(900))[0].load.prefill_requests, 0);  // the accounting moved on all the same
  // Dispatched onto the empty queue while own requests decode there: a step was in progress.
  DispatchGuard gf = r.dispatch(b, r.rank(b, ms(1000))[0], ms(1000));
  gf.on_first_token(ms(1030));
  ASSERT_EQ(policy.samples.size(), 3u);
  EXPECT_DOUBLE_EQ(policy.samples[2].sample.elapsed_ms, 30.0);
  EXPECT_GT(policy.samples[2].sample.decoding, 0.0);
  EXPECT_TRUE(policy.samples[2].sample.mid_step);
}

// A streamed answer that ends complete (on_stream_end, then its release) is a sample of the
// endpoint's decode pace: from its first token to its last, its tokens after the first, the own
// batch at its end, and the own prefill done at the endpoint meanwhile (which its steps carried).
// No sample without a first token at a known time, for a single token, without an end (an error or
// a cancellation), or for a whole answer.
TEST(PoolRouterPicker, AStreamedAnswersDecodeIsASampleOfTheEndpointsPace) {
  const Recorded rec = recording_pool();
  RecordingPolicy& policy = *rec.policy;
  PoolRouter& r = *rec.router;
  const auto ms = [](int n) { return Time{std::chrono::milliseconds(n)}; };
  const std::string ta(4000, 'a'), tb(2000, 'b');
  auto a = req_of(ta, 100);  // 1000 tokens
  auto b = req_of(tb, 100);  // 500
  DispatchGuard ga = r.dispatch(a, r.rank(a, ms(0))[0], ms(0));
  ga.on_first_token(ms(50));
  ga.on_tokens(1);
  DispatchGuard gb = r.dispatch(b, r.rank(b, ms(60))[0], ms(60));  // prefilled during a's decode
  gb.on_first_token(ms(90));
  gb.on_tokens(1);
  ga.on_tokens(40);
  ga.on_stream_end(ms(450));
  EXPECT_TRUE(policy.decodes.empty());  // taken at the release
  ga.release();
  ASSERT_EQ(policy.decodes.size(), 1u);
  const DecodeSample& d = policy.decodes[0];
  EXPECT_TRUE(d.streamed);
  EXPECT_DOUBLE_EQ(d.tokens, 40.0);
  EXPECT_DOUBLE_EQ(d.elapsed_ms, 400.0);
  EXPECT_DOUBLE_EQ(d.prefilled, 500.0);  // b's
  EXPECT_DOUBLE_EQ(d.decoding, 2.0);     // a and b (a still counted at its end)
  EXPECT_DOUBLE_EQ(d.kv_read, 1041.0 + 501.0);
  EXPECT_DOUBLE_EQ(d.others, 0.0);  // no scrape: no other decoders known
  // b ends without an end of stream (an upstream error, a client gone): no sample.
  gb.on_tokens(30);
  gb.release();
  EXPECT_EQ(policy.decodes.size(), 1u);
  // A stream of b dispatched at `t` ms, its first token 10 ms later, `tokens` in all, ended 100 ms
  // after its first token (`scrape`: called between its first token and its other tokens).
  const auto stream = [&](int t, int64_t tokens, const std::function<void()>& scrape = {}) {
    DispatchGuard g = r.dispatch(b, r.rank(b, ms(t))[0], ms(t));
    g.on_first_token(ms(t + 10));
    g.on_tokens(1);
    if (scrape) scrape();
    g.on_tokens(tokens - 1);
    g.on_stream_end(ms(tokens > 1 ? t + 110 : t + 10));
  };
  // One token only: no step between tokens to time.
  stream(500, 1);
  EXPECT_EQ(policy.decodes.size(), 1u);
  // Tokens before any first token at a known time: nothing to time them from.
  DispatchGuard ge = r.dispatch(b, r.rank(b, ms(600))[0], ms(600));
  ge.on_tokens(20);
  ge.on_stream_end(ms(900));
  ge.release();
  EXPECT_EQ(policy.decodes.size(), 1u);
  // A whole answer (no model): its decode is not timed here.
  DispatchGuard gw = r.dispatch(b, r.rank(b, ms(1000))[0], ms(1000));
  gw.on_whole_answer(ms(1400), 20);
  gw.on_stream_end(ms(1400));
  gw.release();
  EXPECT_EQ(policy.decodes.size(), 1u);
  // Moved (a guard handed on): the sample goes with it.
  DispatchGuard gm = r.dispatch(b, r.rank(b, ms(2000))[0], ms(2000));
  gm.on_first_token(ms(2010));
  gm.on_tokens(11);
  DispatchGuard moved = std::move(gm);
  moved.on_stream_end(ms(2110));
  moved.release();
  ASSERT_EQ(policy.decodes.size(), 2u);
  EXPECT_DOUBLE_EQ(policy.decodes[1].tokens, 10.0);
  EXPECT_DOUBLE_EQ(policy.decodes[1].elapsed_ms, 100.0);
  EXPECT_DOUBLE_EQ(policy.decodes[1].prefilled, 0.0);
  // A fresh scrape shows 3 more running than this gateway had in flight there (other clients'):
  // they shared the decode's batch (DecodeSample::others); a stale one says nothing.
  stream(3000, 11, [&] {
    EngineSignals sig;
    sig.running = 4;
    sig.scraped_at = ms(3020);
    r.update_signals(0, sig);  // this gateway's 1 in flight at the scrape
  });
  ASSERT_EQ(policy.decodes.size(), 3u);
  EXPECT_DOUBLE_EQ(policy.decodes[2].others, 3.0);
  EXPECT_DOUBLE_EQ(policy.decodes[2].decoding, 1.0);
  stream(60000, 11);
  ASSERT_EQ(policy.decodes.size(), 4u);
  EXPECT_DOUBLE_EQ(policy.decodes[3].others, 0.0);
}

// A whole answer (not streamed) shows no first token: it leaves the prefill queue when the policy
// expects its first token (asked when it becomes the head), and the next head's time from then is
// a model's, so its own first token is no sample; its tokens are counted at the policy's ITL. Its
// answer, or its ending, later takes nothing off twice. Without a model it stays queued until its
// answer, as before.
TEST(PoolRouterPicker, AWholeAnswerLeavesThePrefillQueueWhenItsFirstTokenIsExpected) {
  const Recorded rec = recording_pool();
  RecordingPolicy& policy = *rec.policy;
  policy.expected_ms = 100;
  policy.itl_ms = 10;
  PoolRouter& r = *rec.router;
  const auto ms = [](int n) { return Time{std::chrono::milliseconds(n)}; };
  const auto load = [&](Time now) {
    r.rank(req_of("x"), now);  // a ranking moves the queue on
    return r.snapshot(now)[0].load;
  };
  const std::string ta(4000, 'a'), tb(2000, 'b');
  auto w = req_of(ta, 40);  // 1000 tokens, a whole answer
  w.whole_answer = true;
  auto s = req_of(tb, 10);  // 500, streamed
  DispatchGuard gw = r.dispatch(w, r.rank(w, ms(10))[0], ms(10));
  ASSERT_EQ(policy.heads.size(), 1u);  // asked once, as it became the head
  EXPECT_DOUBLE_EQ(policy.heads[0].tokens, 1000.0);
  EXPECT_DOUBLE_EQ(policy.heads[0].pairs, 1000.0 * 500.0);
  DispatchGuard gs = r.dispatch(s, r.rank(s, ms(20))[0], ms(20));
  EXPECT_EQ(load(ms(109)).prefill_requests, 2);
  EXPECT_EQ(load(ms(109)).prefill_tokens, 1500);
  const EndpointLoad after = load(ms(111));  // w's first token expected at 110
  EXPECT_EQ(after.prefill_requests, 1);
  EXPECT_EQ(after.prefill_tokens, 500);
  EXPECT_EQ(after.in_flight, 2);  // w decodes
  EXPECT_EQ(after.prefill_head_tokens, 500);
  EXPECT_EQ(after.prefill_head_since, ms(110));
  gs.on_first_token(ms(150));  // its time as the head was the model's: no sample
  EXPECT_TRUE(policy.samples.empty());
  EXPECT_EQ(load(ms(150)).prefill_requests, 0);
  // Its tokens are counted at the policy's ITL from its expected first token (10 ms: 5 by 160),
  // as streamed tokens are (from the decode bound into the live context), up to its bound.
  const EndpointLoad counted = load(ms(160));
  EXPECT_EQ(counted.decode_tokens, 10 + 40 - 5);
  EXPECT_EQ(counted.live_context_tokens, 1000 + 500 + 5);
  ASSERT_FALSE(policy.batches.empty());
  EXPECT_DOUBLE_EQ(policy.batches.back().decoding, 2.0);  // w and s decode
  EXPECT_EQ(load(ms(800)).decode_tokens, 10);  // all 40 of w's bound
  gw.on_whole_answer(ms(900), 40);  // the answer: its prefill is off already
  // ... and a sample of the endpoint's pace: 40 tokens in 790 ms from its expected first token.
  ASSERT_EQ(policy.decodes.size(), 1u);
  EXPECT_DOUBLE_EQ(policy.decodes[0].tokens, 40.0);
  EXPECT_DOUBLE_EQ(policy.decodes[0].elapsed_ms, 790.0);
  EXPECT_DOUBLE_EQ(policy.decodes[0].expected_first_ms, 100.0);  // dispatched at 10, expected at 110
  // Beside the batch's mean over its decode, not the batch at its end: w alone from 110 to s's first
  // token at 150, both to 900.
  EXPECT_NEAR(policy.decodes[0].decoding, (40.0 * 1 + 750.0 * 2) / 790.0, 1e-9);
  const EndpointLoad answered = load(ms(900));
  EXPECT_EQ(answered.prefill_requests, 0);
  EXPECT_EQ(answered.prefill_tokens, 0);
  EXPECT_DOUBLE_EQ(answered.prefill_pairs, 0.0);
  EXPECT_EQ(answered.decode_tokens, 10);  // the counted tokens handed back, its own taken
  EXPECT_EQ(answered.live_context_tokens, 1000 + 500 + 40);
  gw.release();
  gs.release();
  const EndpointLoad idle = load(ms(950));
  EXPECT_EQ(idle.in_flight, 0);
  EXPECT_EQ(idle.prefill_requests, 0);
  EXPECT_EQ(idle.prefill_tokens, 0);
  EXPECT_EQ(idle.decode_tokens, 0);
  EXPECT_EQ(idle.live_context_tokens, 0);
  // Moved on, then ended without an answer (an error): nothing taken off twice.
  DispatchGuard gx = r.dispatch(w, r.rank(w, ms(1000))[0], ms(1000));
  EXPECT_EQ(load(ms(1200)).prefill_requests, 0);
  EXPECT_EQ(load(ms(1200)).decode_tokens, 40 - 10);
  gx.release();
  EXPECT_EQ(load(ms(1200)).prefill_requests, 0);
  EXPECT_EQ(load(ms(1200)).prefill_tokens, 0);
  EXPECT_EQ(load(ms(1200)).in_flight, 0);
  EXPECT_EQ(load(ms(1200)).decode_tokens, 0);
  EXPECT_EQ(load(ms(1200)).live_context_tokens, 0);
  // A streamed request after a whole answer that left at its answer: its start is not known either.
  policy.expected_ms = -1;  // no model: a whole answer stays queued until its answer
  DispatchGuard gy = r.dispatch(w, r.rank(w, ms(2000))[0], ms(2000));
  DispatchGuard gz = r.dispatch(s, r.rank(s, ms(2010))[0], ms(2010));
  EXPECT_EQ(load(ms(9000)).prefill_requests, 2);
  gy.on_whole_answer(ms(9000), 40);
  EXPECT_EQ(load(ms(9000)).prefill_requests, 1);
  EXPECT_EQ(policy.decodes.size(), 1u);  // not moved on by a model: its time is no sample
  gz.on_first_token(ms(9050));
  EXPECT_TRUE(policy.samples.empty());
  // The whole answers its steps carry are done with it (FCFS, as many as fit); not a streamed one.
  policy.expected_ms = 100;
  policy.carried = 600;
  const std::string tc(800, 'c');
  auto w2 = req_of(tb, 10);  // 500
  auto w3 = req_of(tc, 10);  // 200
  w2.whole_answer = w3.whole_answer = true;
  gy.release();
  gz.release();
  DispatchGuard h1 = r.dispatch(w, r.rank(w, ms(20000))[0], ms(20000));
  DispatchGuard h2 = r.dispatch(w2, r.rank(w2, ms(20001))[0], ms(20001));
  DispatchGuard h3 = r.dispatch(w3, r.rank(w3, ms(20002))[0], ms(20002));
  const EndpointLoad carried = load(ms(20100));
  EXPECT_EQ(carried.prefill_requests, 1);  // w3 did not fit in what was left
  EXPECT_EQ(carried.prefill_tokens, 200);
  EXPECT_EQ(carried.prefill_head_since, ms(20100));
  EXPECT_EQ(load(ms(20200)).prefill_requests, 0);
  h1.release();
  h2.release();
  h3.release();
  EXPECT_EQ(load(ms(20300)).in_flight, 0);
  EXPECT_EQ(load(ms(20300)).decode_tokens, 0);
  // An embedding's answer is its prefill: never moved on by the model.
  policy.expected_ms = 1;
  auto e = req_of(tb, 0);
  e.kind = ApiKind::embedding;
  e.whole_answer = true;
  DispatchGuard ge = r.dispatch(e, r.rank(e, ms(10000))[0], ms(10000));
  EXPECT_EQ(load(ms(10500)).prefill_requests, 1);
}

// The engine's reported ITL (EngineSignals::itl_sum_s, itl_count: its histogram's sum and count) is
// a sample of the endpoint's pace once its counters span a quarter second: the gaps between tokens
// since the span began, their sum in ms, beside the own decoders' mean over the span (a request
// decoding for the last 200 ms of 300: 2/3), the others running at its end, and the own prefill
// done meanwhile (its tokens and attention pairs). A span in which the own decoders made fewer than
// two tokens each (a replica filling up) is none; counters that go back (an engine restarted)
// begin a span; a scrape without them tells nothing.
TEST(PoolRouterPicker, TheEnginesReportedItlIsASampleOfTheEndpointsPace) {
  const Recorded rec = recording_pool();
  RecordingPolicy& policy = *rec.policy;
  PoolRouter& r = *rec.router;
  const auto ms = [](int n) { return Time{std::chrono::milliseconds(n)}; };
  const auto scrape = [&](int at, double sum_s, double count, double running = 0) {
    EngineSignals sig;
    sig.scraped_at = ms(at);
    sig.running = running;
    sig.itl_sum_s = sum_s;
    sig.itl_count = count;
    r.update_signals(0, sig);
  };
  scrape(0, 10.0, 400);  // the span begins
  auto a = req_of(std::string(4000, 'a'), 500);  // 1000 tokens
  DispatchGuard ga = r.dispatch(a, r.rank(a, ms(50))[0], ms(50));
  ga.on_first_token(ms(100));
  scrape(200, 10.5, 410, 1);
  EXPECT_TRUE(policy.decodes.empty());  // 200 ms
  scrape(300, 11.0, 440, 3);  // 2 others running besides a
  ASSERT_EQ(policy.decodes.size(), 1u);
  const DecodeSample& d = policy.decodes[0];
  EXPECT_TRUE(d.engine);
  EXPECT_FALSE(d.streamed);
  EXPECT_DOUBLE_EQ(d.tokens, 40.0);
  EXPECT_DOUBLE_EQ(d.elapsed_ms, 1000.0);
  EXPECT_NEAR(d.decoding, 2.0 / 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(d.others, 2.0);
  EXPECT_DOUBLE_EQ(d.prefilled, 1000.0);
  EXPECT_DOUBLE_EQ(d.prefilled_pairs, 1000.0 * 500.0);
  // One token for the one decoder in 300 ms: no sample.
  scrape(600, 11.1, 441, 3);
  EXPECT_EQ(policy.decodes.size(), 1u);
  // The engine restarted (its counters went back): a span begins, and no sample spans the restart.
  scrape(700, 0.5, 20);
  scrape(900, 1.0, 40);
  EXPECT_EQ(policy.decodes.size(), 1u);
  scrape(1000, 2.5, 100);
  ASSERT_EQ(policy.decodes.size(), 2u);
  EXPECT_DOUBLE_EQ(policy.decodes[1].tokens, 80.0);
  EXPECT_DOUBLE_EQ(policy.decodes[1].elapsed_ms, 2000.0);
  EXPECT_NEAR(policy.decodes[1].decoding, 1.0, 1e-9);
  EXPECT_DOUBLE_EQ(policy.decodes[1].prefilled, 0.0);
  // No counters reported (an engine without the histogram): nothing.
  scrape(9000, -1, -1);
  scrape(12000, -1, -1);
  EXPECT_EQ(policy.decodes.size(), 2u);
}

// The metrics scrape's view of what the policy learned of each endpoint's speed (EndpointSnapshot::
// pace, itl_calibration: sluice_endpoint_pace_ratio, sluice_endpoint_itl_calibration_ratio): the
// sluice policy's, 1 before any sample, the calibration above 2 on an endpoint whose streams ran far
// slower than its model (100 tokens in 20 s), lower on one whose streams ran about as the model says
// (shrunk toward the pool's); nothing (negative) from a policy that learns none.
TEST(PoolRouterPicker, TheSnapshotCarriesThePolicysLearnedSpeed) {
  const auto ms = [](int n) { return Time{std::chrono::milliseconds(n)}; };
  const PoolConfig sl = pool_of(2, "sluice");
  PoolRouter s(sl, make_policy(sl, 1));
  for (const auto& e : s.snapshot(ms(0))) {
    EXPECT_EQ(e.pace, 1.0);
    EXPECT_EQ(e.itl_calibration, 1.0);
  }
  // Endpoint 0's streams take 20 s for 100 tokens, endpoint 1's 0.8 s (about the model's).
  int t = 0;
  for (int i = 0; i < 40; ++i, t += 100) {
    const size_t to = i % 2;
    const std::string text = std::string(400, static_cast<char>('a' + i % 26)) + std::to_string(i);
    auto req = req_of(text, 100);  // (the request views its text)
    const auto ranked = s.rank(req, ms(t));
    const Candidate& c = ranked[0].endpoint == to ? ranked[0] : ranked[1];
    ASSERT_EQ(c.endpoint, to);
    DispatchGuard g = s.dispatch(req, c, ms(t));
    g.on_first_token(ms(t + 20));
    g.on_tokens(100);
    g.on_stream_end(ms(t + (to == 0 ? 20000 : 800)));
    g.release();
  }
  const std::string refresh = "refresh";
  s.rank(req_of(refresh, 10), ms(t + 20000));  // the policy refreshes its factors as it ranks
  const auto after = s.snapshot(ms(t + 20000));
  EXPECT_GT(after[0].itl_calibration, 2.0);
  EXPECT_LE(after[0].itl_calibration, 4.0);
  EXPECT_LT(after[1].itl_calibration, after[0].itl_calibration);
  EXPECT_GE(after[1].itl_calibration, 1.0);
  const PoolConfig rr = pool_of(2, "round_robin");
  PoolRouter r(rr, make_policy(rr, 1));
  for (const auto& e : r.snapshot(ms(0))) {
    EXPECT_LT(e.pace, 0);
    EXPECT_LT(e.itl_calibration, 0);
  }
}

TEST(PoolRouterPicker, PrefillQueueHeadFollowsDispatchOrder) {
  auto cfg = pool_of(1, "round_robin");
  PoolRouter r(cfg, make_policy(cfg, 1));
  const auto ms = [](int n) { return Time{std::chrono::milliseconds(n)}; };
  const auto head = [&](Time now) { return r.snapshot(now)[0].load; };
  const std::string ta(4000, 'a'), tb(2000, 'b'), tc(800, 'c');  // the requests view them
  auto a = req_of(ta);  // 1000 tokens
  auto b = req_of(tb);  // 500
  auto c = req_of(tc);  // 200
  DispatchGuard ga = r.dispatch(a, r.rank(a, ms(10))[0], ms(10));
  EXPECT_EQ(head(ms(10)).prefill_head_tokens, 1000);
  EXPECT_EQ(head(ms(10)).prefill_head_pairs, 1000.0 * 500.0);
  EXPECT_EQ(head(ms(10)).prefill_head_since, ms(10));
  DispatchGuard gb = r.dispatch(b, r.rank(b, ms(20))[0], ms(20));
  DispatchGuard gc = r.dispatch(c, r.rank(c, ms(30))[0], ms(30));
  EXPECT_EQ(head(ms(30)).prefill_head_tokens, 1000);  // b and c wait behind a
  EXPECT_EQ(head(ms(30)).prefill_head_since, ms(10));
  gb.on_first_token(ms(40));  // out of order: the head is still a
  EXPECT_EQ(head(ms(40)).prefill_head_tokens, 1000);
  EXPECT_EQ(head(ms(40)).prefill_head_since, ms(10));
  ga.on_first_token(ms(50));  // a is done: b has gone too, so c is the head from now
  EXPECT_EQ(head(ms(50)).prefill_head_tokens, 200);
  EXPECT_EQ(head(ms(50)).prefill_head_since, ms(50));
  EXPECT_EQ(head(ms(50)).prefill_tokens, 200);
  r.rank(c, ms(60));
  gc.release();  // cancelled before its first token: at the last time the router was told
  EXPECT_EQ(head(ms(60)).prefill_head_tokens, 0);
  EXPECT_EQ(head(ms(60)).prefill_head_since, ms(60));
  EXPECT_EQ(head(ms(60)).prefill_tokens, 0);
  DispatchGuard gd = r.dispatch(b, r.rank(b, ms(70))[0], ms(70));  // an empty queue: the new one is the head
  EXPECT_EQ(head(ms(70)).prefill_head_tokens, 500);
  EXPECT_EQ(head(ms(70)).prefill_head_since, ms(70));
  gd.on_tokens(3);  // tokens without a first token first: the prefill is over
  EXPECT_EQ(head(ms(70)).prefill_head_tokens, 0);
}

// A scrape keeps the own counts it was taken with (the policy takes them from the scraped
// waiting and running to find other clients' requests); they change at the next scrape only.
TEST(PoolRouterPicker, AScrapeKeepsTheOwnCountsItWasTakenWith) {
  auto cfg = pool_of(1, "sluice");
  PoolRouter r(cfg, make_policy(cfg, 1));
  std::vector<DispatchGuard> g;
  std::vector<std::string> texts;  // the requests view their text: it outlives them
  for (int i = 0; i < 3; ++i) texts.push_back(std::to_string(i) + std::string(2000, 'q'));
  for (int i = 0; i < 3; ++i) {
    auto req = req_of(texts[i]);
    g.push_back(r.dispatch(req, r.rank(req, Time{})[0], Time{}));
  }
  g[0].on_first_token(Time{});
  EngineSignals s;
  s.waiting = 2;
  s.running = 1;
  r.update_signals(0, s);
  auto load = r.snapshot(Time{})[0].load;
  EXPECT_EQ(load.in_flight_at_scrape, 3);
  EXPECT_EQ(load.prefill_requests_at_scrape, 2);
  g[1].on_first_token(Time{});
  g[2].release();
  load = r.snapshot(Time{})[0].load;
  EXPECT_EQ(load.in_flight, 2);
  EXPECT_EQ(load.prefill_requests, 0);
  EXPECT_EQ(load.in_flight_at_scrape, 3);
  EXPECT_EQ(load.prefill_requests_at_scrape, 2);
  r.update_signals(0, s);
  load = r.snapshot(Time{})[0].load;
  EXPECT_EQ(load.in_flight_at_scrape, 2);
  EXPECT_EQ(load.prefill_requests_at_scrape, 0);
}

// A scrape takes time: the engine's snapshot falls somewhere between its start and its answer, so
// the own counts kept are the highest of that window. A request of ours that ended, or passed its
// first token, while the scrape was on its way may be in the snapshot: it is not taken for another
// client's (external_load). One dispatched meanwhile raises them, and stays counted as assigned
// since the scrape (the engine's gauges had not seen it); without a start the counts of the answer
// stand (fleetsim's scrapes take no time).
TEST(PoolRouterPicker, AScrapeKeepsTheHighestOwnCountsOfItsWindow) {
  auto cfg = pool_of(1, "sluice");
  PoolRouter r(cfg, make_policy(cfg, 1));
  std::vector<std::string> texts;  // the requests view their text: it outlives them
  for (int i = 0; i < 4; ++i) texts.push_back(std::to_string(i) + std::string(2000, 'q'));
  auto dispatch = [&](int i) {
    auto req = req_of(texts[i]);
    return r.dispatch(req, r.rank(req, Time{})[0], Time{});
  };
  DispatchGuard a = dispatch(0), b = dispatch(1);
  a.on_first_token(Time{});  // a decodes, b waits
  r.on_scrape_start(0);
  a.release();               // a ends and b passes its first token while the scrape is on its way
  b.on_first_token(Time{});
  EngineSignals s;           // the engine's snapshot came before both
  s.waiting = 1;
  s.running = 1;
  r.update_signals(0, s);
  auto load = r.snapshot(Time{})[0].load;
  EXPECT_EQ(load.in_flight, 1);
  EXPECT_EQ(load.assigned_since_scrape, 0);  // a and b went before the scrape
  EXPECT_EQ(load.in_flight_at_scrape, 2);
  EXPECT_EQ(load.prefill_requests_at_scrape, 1);
  EngineSignals seen = s;
  const ExternalLoad ext = external_load(seen, load);
  EXPECT_EQ(ext.waiting, 0);  // (the counts at the answer, 1 and 0, made a and b one other client's
  EXPECT_EQ(ext.running, 0);  //  request waiting and one running until the next scrape)

  // One dispatched during the window (and ended before the answer) raises the counts.
  r.on_scrape_start(0);
  {
    DispatchGuard c = dispatch(2);
  }
  s.waiting = 1;
  s.running = 1;
  r.update_signals(0, s);
  load = r.snapshot(Time{})[0].load;
  EXPECT_EQ(load.in_flight_at_scrape, 2);
  EXPECT_EQ(load.prefill_requests_at_scrape, 1);
  // It stays among the dispatches the engine's gauges have not seen (the queue estimate's).
  EXPECT_EQ(load.assigned_since_scrape, 1);

  // Without a start: the counts at the answer.
  DispatchGuard d = dispatch(3);
  d.release();
  r.update_signals(0, s);
  load = r.snapshot(Time{})[0].load;
  EXPECT_EQ(load.in_flight_at_scrape, 1);
  EXPECT_EQ(load.prefill_requests_at_scrape, 0);
  EXPECT_EQ(load.assigned_since_scrape, 0);
}

TEST(PoolRouterPicker, AccountingTracksPrefillRequestsAndContext) {
  auto cfg = pool_of(2, "sluice");
  PoolRouter r(cfg, make_policy(cfg, 1));
  std::string t(4000, 'a');
  auto req = req_of(t);
  auto c = r.rank(req, Time{});
  ASSERT_EQ(c.size(), 2u);
  {
    DispatchGuard g = r.dispatch(req, c[0], Time{});
    auto s = r.snapshot(Time{});
    EXPECT_EQ(s[g.endpoint()].load.prefill_requests, 1);
    EXPECT_EQ(s[g.endpoint()].load.context_tokens, 1050);
    EXPECT_EQ(s[g.endpoint()].load.input_tokens_total, 1000);
    g.on_first_token(Time{});
    s = r.snapshot(Time{});
    EXPECT_EQ(s[g.endpoint()].load.prefill_requests, 0);
    EXPECT_EQ(s[g.endpoint()].load.in_flight, 1);
  }
  auto s = r.snapshot(Time{});
  for (const auto& e : s) {
    EXPECT_EQ(e.load.in_flight, 0);
    EXPECT_EQ(e.load.prefill_requests, 0);
    EXPECT_EQ(e.load.context_tokens, 0);
    EXPECT_EQ(e.load.prefill_tokens, 0);
  }
  // Second identical request: the index predicts the cache on the first endpoint.
  auto c2 = r.rank(req, Time{});
  EXPECT_EQ(c2[0].endpoint, c[0].endpoint);
  EXPECT_EQ(c2[0].predicted_cached_tokens, 992);  // 62 full 64-char blocks x 16 tokens
  {
    DispatchGuard g = r.dispatch(req, c2[0], Time{});
    EXPECT_EQ(r.snapshot(Time{})[g.endpoint()].load.predicted_cached_tokens_total, 992);
  }
}

// With engine events under KV pressure, the candidate's predicted cached tokens (its price, the
// counters, the access log, the prefill accounting) are the eviction forecast's: the blocks the
// requests sent just before allocate take the endpoint's least recent ones.
TEST(PoolRouterPicker, PredictedCachedTokensTakeTheEvictionForecast) {
  using namespace std::chrono_literals;
  auto cfg = pool_of(2, "sluice");
  PoolRouter r(cfg, make_policy(cfg, 1));
  auto ev = std::make_shared<KvEventIndex>(2);
  ASSERT_TRUE(r.attach_kv_events(ev));
  const Time t0{std::chrono::seconds(5)};
  for (size_t e = 0; e < 2; ++e) {
    ev->set_connected(e, true, t0);
    ev->set_synced(e, true);
  }
  auto stored = [](const std::string& text, uint64_t base) {
    std::vector<uint32_t> ids;
    estimate_token_ids(text, ids);
    kv::BlockStored st;
    st.block_size = 16;
    for (size_t b = 0; b < ids.size() / 16; ++b) {
      st.block_hashes.push_back(base + b);
      st.token_ids.insert(st.token_ids.end(), ids.begin() + b * 16, ids.begin() + (b + 1) * 16);
    }
    kv::EventBatch batch;
    batch.events.push_back(std::move(st));
    return batch;
  };
  std::string t, other;
  for (size_t i = 0; i < 4000; ++i) t += static_cast<char>('a' + (i * 7) % 26), other += static_cast<char>('a' + (i * 11) % 23);
  ev->apply(1, stored(t, 1000), 0, 0, t0);
  ev->apply(1, stored(other, 5000), 1, 0, t0);
  const auto req = req_of(t);
  auto c = r.rank(req, t0 + 50ms);
  ASSERT_EQ(c[0].endpoint, 1u);
  EXPECT_EQ(c[0].predicted_cached_tokens, 992);  // 62 full blocks: no eviction seen
  // The engine evicts (one of other's blocks), and a request this gateway just sent to endpoint 1
  // will allocate 7 blocks (6 full, 1 partial) before the next one is scheduled there: the least
  // recent 7, t's tail, go.
  kv::EventBatch removed;
  removed.events.push_back(kv::BlockRemoved{{5061}, "GPU"});
  ev->apply(1, removed, 2, 0, t0 + 100ms);
  const std::string small_text(400, 'z');  // outlives the request, whose text is a view of it
  const auto small = req_of(small_text);
  DispatchGuard g1 = r.dispatch(small, Candidate{1, 0.0, 0, false}, t0 + 110ms);
  c = r.rank(req, t0 + 120ms);
  ASSERT_EQ(c[0].endpoint, 1u);
  EXPECT_EQ(c[0].predicted_cached_tokens, 55 * 16);
  DispatchGuard g2 = r.dispatch(req, c[0], t0 + 120ms);
  EXPECT_EQ(r.snapshot(t0 + 120ms)[1].load.prefill_tokens, 100 + 1000 - 55 * 16);
}

TEST(PoolRouterPicker, ExplainJsonNamesEveryCandidateAndTerms) {
  auto cfg = pool_of(3, "sluice");
  cfg.endpoints[1].name = "quote\"ep";
  PoolRouter r(cfg, make_policy(cfg, 1));
  r.set_healthy(2, false);
  std::string j = r.explain_json(req_of(std::string(800, 'x')), Time{});
  EXPECT_NE(j.find("\"policy\":\"sluice\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"endpoint\":\"ep0\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"endpoint\":\"quote\\\"ep\""), std::string::npos) << j;
  EXPECT_EQ(j.find("\"endpoint\":\"ep2\""), std::string::npos) << j;  // unhealthy: not a candidate
  EXPECT_NE(j.find("\"ttft_ms\":"), std::string::npos) << j;
  EXPECT_NE(j.find("\"waiting\":null"), std::string::npos) << j;  // never scraped
  for (const auto& e : r.snapshot(Time{})) EXPECT_EQ(e.load.in_flight, 0);  // explaining dispatches nothing
}

// One endpoint's metrics freeze (scrape keeps failing) while it keeps serving: it must get neither
// all nor none of the traffic.
TEST(PoolRouterPicker, FrozenMetricsGetAFairShare) {
  for (const char* policy : {"sluice"}) {
    auto cfg = pool_of(3, policy);
    cfg.scrape.stale_after = std::chrono::milliseconds(500);
    PoolRouter r(cfg, make_policy(cfg, 1));
    // A live engine reports what it holds: our requests not yet past first token wait (plus any
    // extra queue), the rest run.
    auto signals = [&](size_t e, Time now, double extra_waiting) {
      EngineSignals s;
      auto load = r.snapshot(now)[e].load;
      s.scraped_at = now;
      s.waiting = static_cast<double>(load.prefill_requests) + extra_waiting;
      s.running = static_cast<double>(load.in_flight - load.prefill_requests);
      s.kv_usage = 0.2;
      r.update_signals(e, s);
    };
    // Endpoint 0 froze reporting a big queue; its scrapes fail from then on.
    signals(0, Time{}, 40);
    std::deque<std::pair<Time, DispatchGuard>> live;
    std::map<size_t, int> picks;
    std::vector<std::string> texts;
    for (int i = 0; i < 900; ++i) texts.push_back(std::to_string(i) + std::string(2000, 'p'));
    int n = 0;
    for (int step = 0; step < 300; ++step) {
      Time now = std::chrono::milliseconds(10 * step);
      while (!live.empty() && live.front().first <= now) live.pop_front();
      if (step % 5 == 0) {
        signals(1, now, 0);
        signals(2, now, 0);
        r.record_scrape_error(0);
      }
      for (int k = 0; k < 3; ++k) {
        auto req = req_of(texts[n++]);
        auto c = r.rank(req, now);
        ASSERT_FALSE(c.empty());
        picks[c[0].endpoint]++;
        live.emplace_back(now + std::chrono::milliseconds(300), r.dispatch(req, c[0], now));
      }
    }
    EXPECT_GT(picks[0], 900 / 6) << policy;
    EXPECT_LT(picks[0], 900 / 2) << policy;
    EXPECT_EQ(r.snapshot(Time{})[0].load.scrape_failures_in_row, 60);
  }
}

// A reload that changes the pool (here: a replica added in front) keeps the cache affinity learned
// for the endpoints both configs have, matched by address, for every policy with a prefix index.
TEST(PoolRouterPicker, InFlightOnAReplacedRuntimeCountsAgainstTheCap) {
  // A reload replaces the pool (an endpoint added): requests still running on the old runtime
  // count against the new one's hard cap and gauge on the endpoints both have, until they end.
  auto before = pool_of(1, "round_robin");
  before.max_in_flight_per_endpoint = 2;
  auto old = std::make_shared<PoolRouter>(before, make_policy(before, 1));
  const std::string hello = "hello";  // the request views it
  auto req = req_of(hello);
  std::vector<DispatchGuard> running;
  for (int i = 0; i < 2; ++i) running.push_back(old->dispatch(req, old->rank(req, Time{}).front(), Time{}));
  auto after = pool_of(2, "round_robin");
  after.max_in_flight_per_endpoint = 2;
  PoolRouter next(after, make_policy(after, 2));
  next.inherit_in_flight(std::shared_ptr<const PoolRouter>(old));
  EXPECT_EQ(next.in_flight_total(0), 2);
  EXPECT_EQ(next.in_flight_total(1), 0);
  EXPECT_EQ(next.occupancy().in_flight, 2);
  EXPECT_EQ(next.snapshot(Time{})[0].load.in_flight, 2);
  next.set_healthy(1, false);
  EXPECT_TRUE(next.saturated(Time{})) << "the shared endpoint is at its cap through the old runtime";
  running.clear();
  EXPECT_EQ(next.in_flight_total(0), 0);
  EXPECT_FALSE(next.saturated(Time{}));
  running.push_back(old->dispatch(req, old->rank(req, Time{}).front(), Time{}));
  running.clear();
  old.reset();  // the old generation is gone
  EXPECT_EQ(next.in_flight_total(0), 0);
}

TEST(PoolRouterPicker, AdoptLearnedCarriesThePrefixIndexByAddress) {
  for (const char* policy : {"sluice", "cache_aware", "llmd_default"}) {
    SCOPED_TRACE(policy);
    auto before = pool_of(2, policy);  // ep0 :9000, ep1 :9001
    PoolRouter old(before, make_policy(before, 1));
    const std::string doc(8000, 'd');
    auto req = req_of(doc);
    auto c = old.rank(req, Time{});
    const size_t learned_on = c[0].endpoint;
    { DispatchGuard g = old.dispatch(req, c[0], Time{}); }
    // The new config: a new replica :9005 first, then the old ones in reverse order.
    auto after = pool_of(0, policy);
    EndpointConfig fresh;
    fresh.name = "new";
    fresh.address = {"127.0.0.1", 9005};
    after.endpoints = {fresh, before.endpoints[1], before.endpoints[0]};
    PoolRouter next(after, make_policy(after, 2));
    EXPECT_EQ(next.adopt_learned(old), 2u);
    const size_t now_at = learned_on == 0 ? 2 : 1;
    auto ranked = next.rank(req, Time{});
    ASSERT_FALSE(ranked.empty());
    EXPECT_EQ(ranked[0].endpoint, now_at);
    EXPECT_GT(ranked[0].predicted_cached_tokens, 1000);
    // Without adopting, nothing is predicted.
    PoolRouter cold(after, make_policy(after, 2));
    for (const auto& cand : cold.rank(req, Time{})) EXPECT_EQ(cand.predicted_cached_tokens, 0);
  }
}

// A reload that changes the pool keeps what the sluice policy learned of each kept endpoint's pace
// (streamed decodes here: endpoint 1's take twice endpoint 0's), by address: the slow replica is
// still priced slower under its new index, a new replica as the fastest. Not adopted, they tie.
TEST(PoolRouterPicker, AdoptLearnedCarriesTheEndpointsPaceByAddress) {
  auto before = pool_of(2, "sluice");  // ep0 :9000, ep1 :9001
  PoolRouter old(before, make_policy(before, 1));
  const auto ms = [](int n) { return Time{std::chrono::milliseconds(n)}; };
  int t = 0;
  for (int i = 0; i < 40; ++i)
    for (size_t e = 0; e < 2; ++e) {
      const std::string text(400, static_cast<char>('a' + i % 20));  // req_of's text is a view of it
      auto req = req_of(text, 50);
      DispatchGuard g = old.dispatch(req, Candidate{e, 0.0, 0}, ms(t));
      g.on_first_token(ms(t + 20));
      g.on_tokens(41);
      g.on_stream_end(ms(t + 20 + (e == 0 ? 400 : 800)));
      g.release();
      t += 1000;
    }
  auto after = pool_of(0, "sluice");
  EndpointConfig fresh;
  fresh.name = "new";
  fresh.address = {"127.0.0.1", 9005};
  after.endpoints = {fresh, before.endpoints[1], before.endpoints[0]};  // slow :9001 is now 1, fast :9000 is 2
  const auto score_of = [](const std::vector<Candidate>& c, size_t e) {
    for (const auto& x : c)
      if (x.endpoint == e) return x.score;
    return 0.0;
  };
  const std::string probe_text(2000, 'z');
  const auto probe = req_of(probe_text, 200);
  PoolRouter next(after, make_policy(after, 2));
  EXPECT_EQ(next.adopt_learned(old), 2u);
  const auto ranked = next.rank(probe, ms(t));
  EXPECT_LT(score_of(ranked, 1), score_of(ranked, 2));
  EXPECT_DOUBLE_EQ(score_of(ranked, 0), score_of(ranked, 2));
  PoolRouter cold(after, make_policy(after, 2));
  const auto tied = cold.rank(probe, ms(t));
  EXPECT_DOUBLE_EQ(score_of(tied, 1), score_of(tied, 2));
}

}  // namespace
}  // namespace sluice
