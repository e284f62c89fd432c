#include "core/picker/sluice_policy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <map>

#include "core/openai/chat_template.h"
#include "core/picker/oracle_policy.h"
#include "core/picker/prefix_demand.h"
#include "core/picker/ranking.h"
#include "picker_test_util.h"

namespace sluice {
namespace {

using testing::FakePool;

std::string prompt(char c, size_t chars) { return std::string(chars, c); }

// One cost term of endpoint e's explanation (-1 when it has none).
double term_of(const std::vector<Explanation>& ex, size_t e, std::string_view name) {
  for (const auto& t : ex[e].terms)
    if (t.name == name) return t.value;
  return -1.0;
}

// A 4,000-character chat's explanation on `n` idle endpoints at 200 ms (the pace factors' terms).
std::vector<Explanation> explain_idle(SluicePolicy& p, size_t n, Time at = Time{std::chrono::milliseconds(200)}) {
  FakePool pool(n);
  std::vector<Explanation> ex;
  auto v = pool.views();
  p.explain(testing::chat(prompt('a', 4000), 1000), v, at, ex);
  return ex;
}

// Two prefills of a size each, and the profile's ms for them: 200 tokens (one step under the weight
// floor) and 4,000.
constexpr double kSmallPrefillMs = 2 + 5.5 + 1.5e-6 * 200.0 * 100.0;
constexpr double kLargePrefillMs = 2 + 0.022 * 4000 + 1.5e-6 * 4000.0 * 2000.0;
std::pair<PrefillSample, PrefillSample> sized_prefills() {
  PrefillSample small, large;
  small.tokens = 200;
  small.pairs = 200.0 * 100.0;
  large.tokens = 4000;
  large.pairs = 4000.0 * 2000.0;
  return {small, large};
}

// The copy credit's holder: endpoint 0 decodes 60 sequences of 6,000-token contexts, 100 tokens each left.
void load_holder(FakePool& pool) {
  pool.loads[0].in_flight = 60;
  pool.loads[0].live_context_tokens = 60 * 6000;
  pool.loads[0].decode_tokens = 60 * 100;
}

TEST(SluicePolicy, IdleTtftFollowsTheCostModel) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(1);
  std::string t = prompt('a', 4000);
  auto c = testing::rank(p, pool, testing::chat(t, 1000));
  ASSERT_EQ(c.size(), 1u);
  // TTFT, one step: max(W 5.5, 0.022 x 1000) + C0 2 + attention 1.5e-6 x 1000 x 500 = 24.75 ms;
  // decode: 100 tokens alone at C0 + W + delta + gamma x 1050 = 7.5725 ms, far under the 50 ms pace:
  // SLO-priced (the default) it costs nothing; nobody else to slow down.
  EXPECT_NEAR(-c[0].score, 24.75, 1e-9);
  SluiceParams plain;
  plain.decode_price = 0;
  SluicePolicy pp(plain, PoolKind::chat);
  EXPECT_NEAR(-testing::rank(pp, pool, testing::chat(t, 1000))[0].score, 24.75 + 757.25, 1e-9);
  EXPECT_EQ(c[0].predicted_cached_tokens, 0);
  std::vector<Explanation> ex;
  auto v = pool.views();
  p.explain(testing::chat(t, 1000), v, Time{}, ex);
  ASSERT_EQ(ex.size(), 1u);
  std::map<std::string_view, double> terms;
  for (auto& term : ex[0].terms) terms[term.name] = term.value;
  EXPECT_NEAR(terms["ttft_ms"], 24.75, 1e-9);
  EXPECT_EQ(terms["decode_ms"], 0);
  // ITL: that step plus its own prefill's stall spread over its tokens, (22 - 5.5 + 0.75) / 100.
  EXPECT_NEAR(terms["itl_ms"], 7.5725 + 0.1725, 1e-9);
  EXPECT_NEAR(terms["cost_ms"], 24.75, 1e-9);
  EXPECT_EQ(terms["uncached_tokens"], 1000);
}

// The pace (header): an endpoint whose prefills take twice what the pool's take for the same work
// is priced with its step times doubled, relative to the pool: what the model misses in common
// (here the pool's prefills all take 1.5x the model) is not an endpoint's pace, nor is the size of
// the prefills an endpoint happens to get.
// A whole answer's expected first token (PoolRouter moves it on then): the profile's prefill time,
// times what the fastest endpoint's prefills of that size took over it, times the endpoint's pace
// relative to it; its tokens
// at the batch's ITL at that pace. Whole answers' decodes are samples of the pace too.
TEST(SluicePolicy, AWholeAnswersFirstTokenIsExpectedAfterThePoolsPrefillTimeAtTheEndpointsPace) {
  SluicePolicy p({}, PoolKind::chat);
  PrefillSample head;
  head.tokens = 1000;
  head.pairs = 1000.0 * 500.0;
  // 24.75 ms by the model alone on an idle endpoint (IdleTtftFollowsTheCostModel); more beside
  // decoders reading their KV.
  EXPECT_NEAR(p.expected_prefill(0, head).ms, 24.75, 1e-9);
  PrefillSample busy = head;
  busy.decoding = 32;
  busy.kv_read = 32 * 8000;
  EXPECT_GT(p.expected_prefill(0, busy).ms, 24.75);
  // A head that came during a step (PrefillSample::mid_step) first waits out half of it:
  // (max(W, beta D) + C0 + delta D + gamma K) / 2; the same prefill samples are modelled so.
  PrefillSample late = busy;
  late.mid_step = true;
  EXPECT_NEAR(p.expected_prefill(0, late).ms - p.expected_prefill(0, busy).ms,
              0.5 * (std::max(5.5, 0.022 * 32) + 2.0 + 0.02 * 32 + 5e-5 * 32 * 8000), 1e-9);
  late = head;  // with no decoders there is no step in progress
  late.mid_step = true;
  EXPECT_NEAR(p.expected_prefill(0, late).ms, 24.75, 1e-9);
  // Its one step (8,192 tokens) carries up to 7,192 tokens of the prefills behind it, done with it.
  EXPECT_DOUBLE_EQ(p.expected_prefill(0, head).carried, 0.0);
  PrefillSample ahead = head;
  ahead.behind = 3000;
  EXPECT_DOUBLE_EQ(p.expected_prefill(0, ahead).carried, 3000.0);
  EXPECT_GT(p.expected_prefill(0, ahead).ms, 24.75);
  ahead.behind = 20000;
  EXPECT_DOUBLE_EQ(p.expected_prefill(0, ahead).carried, 7192.0);
  // The pool's 1,000-token prefills take 1.5x the model on endpoint 0, 3x on endpoint 1.
  PrefillSample s = head;
  for (int i = 0; i < 200; ++i) {
    s.elapsed_ms = 1.5 * 24.75;
    p.on_prefill_done(0, s, Time{});
    s.elapsed_ms = 3.0 * 24.75;
    p.on_prefill_done(1, s, Time{});
  }
  const double e0 = p.expected_prefill(0, head).ms, e1 = p.expected_prefill(1, head).ms;
  EXPECT_NEAR(e0, 1.5 * 24.75, 0.15 * 24.75);
  EXPECT_NEAR(e1, 3.0 * 24.75, 0.3 * 24.75);
  // An endpoint with no samples of its own: as the fastest (never priced faster than it).
  EXPECT_DOUBLE_EQ(p.expected_prefill(5, head).ms, e0);
  // Its tokens, one per step of the endpoint's batch: the batch's ITL at the endpoint's pace.
  PrefillSample batch;
  batch.decoding = 16;
  batch.kv_read = 16 * 4000;
  EXPECT_NEAR(p.expected_itl_ms(5, batch), sluice_batch_itl(SluiceParams{}, 16, 16 * 4000, 0).mean_ms, 1e-9);
  EXPECT_NEAR(p.expected_itl_ms(1, batch) / p.expected_itl_ms(0, batch), 2.0, 0.3);
  // Where clients do not stream, whole answers' decodes are the samples: 100 tokens beside 16
  // decoders take twice as long on endpoint 1 as on endpoint 0.
  SluicePolicy d({}, PoolKind::chat);
  DecodeSample x;
  x.tokens = 100;
  x.decoding = 16;
  x.kv_read = 16 * 4000;
  const double itl = sluice_batch_itl(SluiceParams{}, 16, 16 * 4000, 0).mean_ms;
  for (int i = 0; i < 200; ++i) {
    x.elapsed_ms = 100 * itl;
    d.on_decode_done(0, x, Time{});
    x.elapsed_ms = 200 * itl;
    d.on_decode_done(1, x, Time{});
  }
  EXPECT_NEAR(d.expected_itl_ms(1, batch) / d.expected_itl_ms(0, batch), 2.0, 0.3);
  EXPECT_NEAR(d.expected_prefill(1, head).ms / d.expected_prefill(0, head).ms, 2.0, 0.3);
  // One sample is no evidence; under KV pressure they are the KV's.
  SluicePolicy one({}, PoolKind::chat);
  one.on_decode_done(1, x, Time{});
  EXPECT_DOUBLE_EQ(one.expected_itl_ms(1, batch), one.expected_itl_ms(0, batch));
  x.kv_usage = 0.95;
  for (int i = 0; i < 200; ++i) one.on_decode_done(1, x, Time{});
  EXPECT_DOUBLE_EQ(one.expected_itl_ms(1, batch), one.expected_itl_ms(0, batch));
}

// Never priced faster than the fastest: two equal endpoints, one with many samples and one with
// few, both under the pool's ratio (a slow third one raised it): neither is priced apart from the
// other (one priced faster drew more traffic, more samples, a tighter bound: noise fed itself).
TEST(SluicePolicy, AnEndpointWithMoreSamplesIsNotPricedFasterThanItsEqual) {
  SluicePolicy p({}, PoolKind::chat);
  PrefillSample s;
  s.tokens = 1000;
  s.pairs = 1000.0 * 500.0;
  for (int i = 0; i < 300; ++i) {
    s.elapsed_ms = 24.75 * (i % 2 ? 1.02 : 0.98);
    p.on_prefill_done(0, s, Time{});
    if (i % 30 == 0 || i % 30 == 1) p.on_prefill_done(1, s, Time{});
    if (i % 8 == 0) {
      s.elapsed_ms = 4 * 24.75;
      p.on_prefill_done(2, s, Time{});
    }
  }
  const auto ex = explain_idle(p, 3);
  EXPECT_DOUBLE_EQ(term_of(ex, 0, "pace"), 1.0);
  EXPECT_DOUBLE_EQ(term_of(ex, 1, "pace"), 1.0);
  EXPECT_GT(term_of(ex, 2, "pace"), 2.0);
  EXPECT_DOUBLE_EQ(term_of(ex, 0, "ttft_ms"), term_of(ex, 1, "ttft_ms"));
}

TEST(SluicePolicy, PaceFollowsWhatAnEndpointsPrefillsTake) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(2);
  const auto req = testing::chat(prompt('a', 4000), 1000);
  auto c = testing::rank(p, pool, req);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_DOUBLE_EQ(c[0].score, c[1].score);  // no samples: as the model
  {
    // One sample each, endpoint 1's twice endpoint 0's: within what one sample can tell apart.
    SluicePolicy few({}, PoolKind::chat);
    PrefillSample x;
    x.tokens = 1000;
    x.pairs = 1000.0 * 500.0;
    x.elapsed_ms = 24.75;
    few.on_prefill_done(0, x, Time{});
    x.elapsed_ms = 49.5;
    few.on_prefill_done(1, x, Time{});
    c = testing::rank(few, pool, req);
    EXPECT_DOUBLE_EQ(c[0].score, c[1].score);
    // Samples taken under KV pressure are the KV's, not the pace's.
    x.kv_usage = 0.95;
    for (int i = 0; i < 200; ++i) few.on_prefill_done(1, x, Time{});
    c = testing::rank(few, pool, req);
    EXPECT_DOUBLE_EQ(c[0].score, c[1].score);
  }
  // 1,000-token prefills alone on an idle endpoint: 24.75 ms by the model (IdleTtftFollowsTheCostModel).
  PrefillSample s;
  s.tokens = 1000;
  s.pairs = 1000.0 * 500.0;
  for (int i = 0; i < 200; ++i) {
    s.elapsed_ms = 24.75;
    p.on_prefill_done(0, s, Time{});
    s.elapsed_ms = 49.5;
    p.on_prefill_done(1, s, Time{});
  }
  c = testing::rank(p, pool, req);
  EXPECT_EQ(c[0].endpoint, 0u);
  std::vector<Explanation> ex;
  auto v = pool.views();
  p.explain(req, v, Time{}, ex);
  const double fast = term_of(ex, 0, "ttft_ms"), slow = term_of(ex, 1, "ttft_ms");
  EXPECT_NEAR(slow / fast, 2.0, 0.15);
  EXPECT_NEAR(term_of(ex, 1, "pace") / term_of(ex, 0, "pace"), 2.0, 0.15);  // shown to operators
  // Relative to the fastest: the fast one as the profile (never priced faster), the slow one slower.
  EXPECT_DOUBLE_EQ(term_of(ex, 0, "pace"), 1.0);
  EXPECT_NEAR(fast, 24.75, 0.5);
  EXPECT_GT(slow, 1.8 * 24.75);

  // Small prefills take 2x the model everywhere (the step in progress when they come counts more),
  // large ones 1.1x; small ones go to endpoint 0, large ones to endpoint 1: the same pace.
  SluicePolicy q({}, PoolKind::chat);
  PrefillSample small, large;
  small.tokens = 200;
  small.pairs = 200.0 * 100.0;
  small.elapsed_ms = 2.0 * (2 + 5.5 + 1.5e-6 * small.pairs);  // one step under the weight floor
  large.tokens = 4000;
  large.pairs = 4000.0 * 2000.0;
  large.elapsed_ms = 1.1 * (2 + 0.022 * 4000 + 1.5e-6 * large.pairs);
  for (int i = 0; i < 200; ++i) {
    q.on_prefill_done(0, small, Time{});
    q.on_prefill_done(1, large, Time{});
  }
  c = testing::rank(q, pool, req);
  EXPECT_NEAR(c[0].score / c[1].score, 1.0, 1e-6);
  // Evidence fades without new samples (30 s time constant): 10 minutes later endpoint 1 is tried
  // again; 5 s later it is not.
  std::vector<Candidate> later;
  p.rank(req, v, Time{std::chrono::seconds(5)}, later);
  EXPECT_LT(later[1].score, later[0].score);
  p.rank(req, v, Time{std::chrono::seconds(600)}, later);
  EXPECT_DOUBLE_EQ(later[0].score, later[1].score);
  // A reset (a reload's new endpoint list) forgets it.
  p.on_endpoints_reset(2);
  c = testing::rank(p, pool, req);
  EXPECT_DOUBLE_EQ(c[0].score, c[1].score);
}

// The pace is fitted as an endpoint's effect plus a size's (header, pace): where the policy sends the
// large prefills to the slow endpoints only, the large prefills' time over the model (here 1.5x) is
// told apart from the endpoints' pace (2x), which the small prefills, sent everywhere, show. A
// pool's mean per size took the slow endpoints' large prefills for the size's, and priced them
// about 1.3x. Streamed decodes are samples too: their steps against the model's, with the own
// prefill they carried.
// F (sluice_policy.h): what a request spends in an engine's front end before its scheduler sees
// it, learned from the prefills that became an idle endpoint's head at their dispatch. Endpoints 0
// and 1 run the model's steps, 2 and 3 twice them; every request spends 20 ms first. F is learned
// (ttft_ms carries it), and taken off those samples' times before they are the pace's: the slow
// endpoints read 2x; with F held at 0 they read 1.3x (the 20 ms common to both).
TEST(SluicePolicy, TheEnginesFrontEndIsLearnedFromIdleHeadsAtTheirDispatch) {
  PrefillSample small;
  small.tokens = 200;
  small.pairs = 200.0 * 100.0;
  small.at_dispatch = true;
  const double small_ms = 2 + 5.5 + 1.5e-6 * small.pairs;  // one step under the weight floor
  const auto feed = [&](SluicePolicy& p, double front_ms, PrefillSample s) {
    for (int i = 0; i < 300; ++i) {  // 30 s, a ranking every 100 ms (the pace's refresh)
      const Time t{std::chrono::milliseconds(100 * i)};
      for (size_t e = 0; e < 4; ++e) {
        s.elapsed_ms = front_ms + (e < 2 ? 1.0 : 2.0) * small_ms * (i % 2 ? 1.1 : 0.9);
        p.on_prefill_done(e, s, t);
      }
      explain_idle(p, 4, t);
    }
  };
  SluicePolicy learned({}, PoolKind::chat);
  feed(learned, 20, small);
  const Time end{std::chrono::seconds(30)};
  auto ex = explain_idle(learned, 4, end);
  EXPECT_NEAR(term_of(ex, 0, "frontend_ms"), 20.0, 2.0);
  EXPECT_NEAR(term_of(ex, 2, "pace"), 2.0, 0.25);
  // An idle endpoint's TTFT: F, then its prefill (the same request on a fresh policy, F 0).
  const double ttft0 = term_of(explain_idle(*std::make_unique<SluicePolicy>(SluiceParams{}, PoolKind::chat), 1), 0, "ttft_ms");
  EXPECT_NEAR(term_of(ex, 0, "ttft_ms"), ttft0 + term_of(ex, 0, "frontend_ms"), 1e-9);
  // A whole answer's head at its dispatch is expected after F too; one after another's first token not.
  PrefillSample head = small;
  const double at_dispatch = learned.expected_prefill(0, head).ms;
  head.at_dispatch = false;
  EXPECT_NEAR(at_dispatch - learned.expected_prefill(0, head).ms, term_of(ex, 0, "frontend_ms"), 1e-9);

  SluiceParams fixed;
  fixed.frontend_ms = 0;  // held at 0: not learned
  SluicePolicy held(fixed, PoolKind::chat);
  feed(held, 20, small);
  ex = explain_idle(held, 4, end);
  EXPECT_EQ(term_of(ex, 0, "frontend_ms"), 0.0);
  EXPECT_LT(term_of(ex, 2, "pace"), 1.5);
  fixed.frontend_ms = 5;  // configured: that, whatever the samples say
  SluicePolicy five(fixed, PoolKind::chat);
  feed(five, 20, small);
  EXPECT_EQ(term_of(explain_idle(five, 4, end), 0, "frontend_ms"), 5.0);

  // Not learned from the model's noise alone, nor from heads that came after another's first token
  // (they were in the engine meanwhile), beside decoders (where the step's phase at the dispatch is
  // not uniform) or with prefills queued behind them.
  SluicePolicy noise({}, PoolKind::chat);
  feed(noise, 0, small);
  EXPECT_EQ(term_of(explain_idle(noise, 4, end), 0, "frontend_ms"), 0.0);
  for (auto tweak : {+[](PrefillSample& s) { s.at_dispatch = false; }, +[](PrefillSample& s) { s.behind = 500; },
                     +[](PrefillSample& s) { s.decoding = 8, s.kv_read = 16000, s.mid_step = true; }}) {
    SluicePolicy q({}, PoolKind::chat);
    PrefillSample s = small;
    tweak(s);
    feed(q, 20, s);
    EXPECT_EQ(term_of(explain_idle(q, 4, end), 0, "frontend_ms"), 0.0);
  }
}

// k (header): a pool whose engines all run slower than the profile (a larger model than the
// profile's, a slower GPU) has its first tokens expected at its own prefill pace for their size;
// within the profile's own error (1.25x), and on a fleet whose fastest replicas run at the
// profile's pace, k is 1.
TEST(SluicePolicy, FirstTokensAreExpectedAtThePoolsOwnPrefillPace) {
  PrefillSample small = sized_prefills().first, large = sized_prefills().second;  // (clang 14: no structured bindings in lambdas)
  const double small_ms = kSmallPrefillMs, large_ms = kLargePrefillMs;
  // Every endpoint's prefills at `pool` x the profile's (x `slow` on endpoints 2 and 3; the large
  // ones x `large_too` more), +-10%.
  const auto feed = [&](SluicePolicy& p, double pool, double slow, double large_too) {
    for (int i = 0; i < 300; ++i) {
      const Time t{std::chrono::milliseconds(100 * i)};
      for (size_t e = 0; e < 4; ++e) {
        const double f = pool * (e < 2 ? 1.0 : slow) * (i % 2 ? 1.1 : 0.9);
        small.elapsed_ms = f * small_ms;
        large.elapsed_ms = f * large_too * large_ms;
        p.on_prefill_done(e, small, t);
        p.on_prefill_done(e, large, t);
      }
      explain_idle(p, 4, t);
    }
  };
  const Time end{std::chrono::seconds(30)};
  const auto fresh = [] { return std::make_unique<SluicePolicy>(SluiceParams{}, PoolKind::chat); };
  const double ttft0 = term_of(explain_idle(*fresh(), 1), 0, "ttft_ms");  // (no F: none at dispatch)

  auto slower = fresh();
  feed(*slower, 2.5, 1.0, 1.0);
  auto ex = explain_idle(*slower, 4, end);
  const double k = term_of(ex, 0, "ttft_factor");
  EXPECT_GT(k, 2.2);  // (less two standard errors)
  EXPECT_LE(k, 2.5);
  EXPECT_NEAR(term_of(ex, 0, "ttft_ms"), k * ttft0, 1e-9 * ttft0);  // a size between the two seen: the nearer's
  EXPECT_DOUBLE_EQ(term_of(ex, 0, "pace"), 1.0);  // (the replicas' speeds against each other: alike)
  // A whole answer's first token: the bins', as before (not k twice).
  EXPECT_NEAR(slower->expected_prefill(0, large).ms, 2.5 * large_ms, 0.1 * large_ms);

  // Only the long prefills slower than the profile (the short ones as it says): the short TTFTs keep it.
  auto long_only = fresh();
  feed(*long_only, 1.0, 1.0, 2.0);
  ex = explain_idle(*long_only, 4, end);
  SluicePolicy& lp = *long_only;
  FakePool pool(4);
  auto views = pool.views();
  std::vector<Explanation> short_ex;
  lp.explain(testing::chat(prompt('a', 400), 100), views, end, short_ex);
  EXPECT_EQ(term_of(short_ex, 0, "ttft_factor"), 1.0);
  std::vector<Explanation> long_ex;
  lp.explain(testing::chat(prompt('a', 16000), 4000), views, end, long_ex);
  EXPECT_GT(term_of(long_ex, 0, "ttft_factor"), 1.7);

  auto half_slow = fresh();  // the fastest at the profile's pace: k 1, the slow ones' factor 2
  feed(*half_slow, 1.0, 2.0, 1.0);
  ex = explain_idle(*half_slow, 4, end);
  EXPECT_EQ(term_of(ex, 0, "ttft_factor"), 1.0);
  EXPECT_EQ(term_of(ex, 0, "ttft_ms"), ttft0);
  EXPECT_NEAR(term_of(ex, 2, "pace"), 2.0, 0.25);

  auto near = fresh();  // within the profile's own error
  feed(*near, 1.15, 1.0, 1.0);
  EXPECT_EQ(term_of(explain_idle(*near, 4, end), 0, "ttft_ms"), ttft0);

  SluiceParams off;
  off.pool_pace = 0;
  SluicePolicy without(off, PoolKind::chat);
  feed(without, 2.5, 1.0, 1.0);
  EXPECT_EQ(term_of(explain_idle(without, 4, end), 0, "ttft_ms"), ttft0);
}

TEST(SluicePolicy, ThePaceIsToldApartFromTheSizesAnEndpointGets) {
  SluicePolicy p({}, PoolKind::chat);
  PrefillSample small = sized_prefills().first, large = sized_prefills().second;  // (clang 14: no structured bindings in lambdas)
  const double small_ms = kSmallPrefillMs, large_ms = kLargePrefillMs;
  for (int i = 0; i < 200; ++i) {
    for (size_t e = 0; e < 4; ++e) {
      small.elapsed_ms = (e < 2 ? 1.0 : 2.0) * small_ms * (i % 2 ? 1.1 : 0.9);
      p.on_prefill_done(e, small, Time{});
    }
    for (size_t e = 2; e < 4; ++e) {
      large.elapsed_ms = 2.0 * 1.5 * large_ms;
      p.on_prefill_done(e, large, Time{});
    }
  }
  auto ex = explain_idle(p, 4);
  EXPECT_DOUBLE_EQ(term_of(ex, 0, "pace"), 1.0);
  EXPECT_DOUBLE_EQ(term_of(ex, 1, "pace"), 1.0);
  EXPECT_NEAR(term_of(ex, 2, "pace"), 2.0, 0.2);
  EXPECT_NEAR(term_of(ex, 3, "pace"), 2.0, 0.2);
  // A large prefill's first token on a fast endpoint: 1.5x the model, on a slow one 3x.
  EXPECT_NEAR(p.expected_prefill(0, large).ms, 1.5 * large_ms, 0.15 * large_ms);
  EXPECT_NEAR(p.expected_prefill(2, large).ms, 3.0 * large_ms, 0.3 * large_ms);

  // Streamed decodes alone: 64 tokens beside 8 decoders, with 2,000 tokens of prefill carried,
  // take twice as long on endpoint 1.
  SluicePolicy d({}, PoolKind::chat);
  DecodeSample x;
  x.streamed = true;
  x.tokens = 64;
  x.decoding = 8;
  x.kv_read = 8 * 2000;
  x.prefilled = 2000;
  const double model = 64 * (2 + 5.5 + 0.02 * 8 + 5e-5 * x.kv_read) + 0.022 * 2000;
  for (int i = 0; i < 100; ++i) {
    x.elapsed_ms = model * (i % 2 ? 1.05 : 0.95);
    d.on_decode_done(0, x, Time{});
    x.elapsed_ms = 2 * model * (i % 2 ? 1.05 : 0.95);
    d.on_decode_done(1, x, Time{});
  }
  ex = explain_idle(d, 2);
  EXPECT_DOUBLE_EQ(term_of(ex, 0, "pace"), 1.0);
  EXPECT_NEAR(term_of(ex, 1, "pace"), 2.0, 0.2);

  // The engines' own ITL (DecodeSample::engine: a span of their histogram beside the own batch's
  // mean, the others running there at the mean context, and the prefill done meanwhile, which
  // delays every decoder): endpoint 1's tokens take twice the model's for 40 decoders; with
  // engine_itl 0 they are not samples.
  const auto engine_fed = [](SluicePolicy& q) {
    DecodeSample e;
    e.engine = true;
    e.tokens = 1000;
    e.decoding = 30;
    e.others = 10;
    e.kv_read = 30 * 3000;
    e.prefilled = 4000;
    e.prefilled_pairs = 4000.0 * 2000;
    // step(40, K) = c0 + W + delta 40 + gamma K, the others at 512 + 256 / 2 (the initial means),
    // and 40 decoders each delayed by beta 4000 + eps 8e6.
    const double model = 1000 * (2 + 5.5 + 0.02 * 40 + 5e-5 * (30 * 3000 + 10 * (512 + 128))) + 40 * (0.022 * 4000 + 1.5e-6 * 8e6);
    for (int i = 0; i < 100; ++i) {
      e.elapsed_ms = model * (i % 2 ? 1.05 : 0.95);
      q.on_decode_done(0, e, Time{});
      e.elapsed_ms = 2 * model * (i % 2 ? 1.05 : 0.95);
      q.on_decode_done(1, e, Time{});
    }
  };
  SluicePolicy g({}, PoolKind::chat);
  engine_fed(g);
  ex = explain_idle(g, 2);
  EXPECT_DOUBLE_EQ(term_of(ex, 0, "pace"), 1.0);
  EXPECT_NEAR(term_of(ex, 1, "pace"), 2.0, 0.2);
  PolicyParams off(std::map<std::string, double>{{"engine_itl", 0.0}});
  SluicePolicy g0(SluiceParams::from(off), PoolKind::chat);
  engine_fed(g0);
  ex = explain_idle(g0, 2);
  EXPECT_DOUBLE_EQ(term_of(ex, 1, "pace"), 1.0);
  EXPECT_DOUBLE_EQ(term_of(ex, 1, "pace_samples"), 0.0);
}

// The ITL tested against the SLO is the model's times what decodes showed (header, the SLO): two
// endpoints decode 60 sequences of 9,000-token contexts, ~36 ms a token by the model (under the 50
// ms SLO). Streams on endpoint 0 took 1.6x the model's ITL for their batch, on endpoint 1 as the
// model: endpoint 0 is tested at ~1.52x (its mean shrunk toward the pool's, less two standard
// errors), past the SLO, and the request goes to endpoint 1 (a tie before). An endpoint without
// samples of its own takes the pool's; decodes faster than the model never lower it under the
// model's; old samples fade out; a whole answer only where its decode outlasts the span its first
// token was estimated over; 0 turns it off. Without it, on a half-slow fleet under KV pressure
// past its capacity, the model read ~41 ms where streams saw 55-100 and sluice admitted what then
// missed (FleetSim.TheItlCalibrationHoldsAMixedFleetUnderKvPressureAtItsCapacity).
TEST(SluicePolicy, TheItlTestedAgainstTheSloIsWhatDecodesShowed) {
  const auto ms = [](int64_t n) { return Time{std::chrono::milliseconds(n)}; };
  const std::string text = prompt('a', 4000);
  const PickRequest req = testing::chat(text, 1000, 200);
  FakePool pool(3);
  for (size_t e = 0; e < 3; ++e) {
    pool.loads[e].in_flight = 60;
    pool.loads[e].live_context_tokens = 60 * 9000;
    pool.loads[e].decode_tokens = 60 * 100;
  }
  auto v = pool.views();
  std::vector<Explanation> ex;
  const auto calibrated = [&](SluicePolicy& p, Time at) {
    p.explain(req, std::span(v).first(2), at, ex);
    return std::pair{term_of(ex, 0, "itl_calibration"), term_of(ex, 1, "itl_calibration")};
  };
  SluicePolicy p({}, PoolKind::chat);
  p.explain(req, std::span(v).first(2), ms(0), ex);
  const double itl = term_of(ex, 0, "itl_ms");
  ASSERT_GT(itl, 30.0);
  ASSERT_LT(itl, 40.0);
  EXPECT_EQ(term_of(ex, 0, "meets_slo"), 1.0);
  EXPECT_EQ(term_of(ex, 1, "meets_slo"), 1.0);
  EXPECT_EQ(term_of(ex, 0, "itl_calibration"), 1.0);
  // 200 streams on each endpoint, alternately, 100 tokens beside the batch: endpoint 0's at `r0`
  // times the model's ITL for that batch, 1's at `r1`.
  const auto feed = [&](SluicePolicy& q, double r0, double r1, bool streamed = true, double first_ms = 0) {
    DecodeSample d;
    d.streamed = streamed;
    d.expected_first_ms = first_ms;
    d.tokens = 100;
    d.decoding = 60;
    d.kv_read = 60 * 9000;
    d.kv_usage = 0.95;  // KV pressure included: its waits are what the SLO test must see
    PrefillSample batch;
    batch.decoding = d.decoding;
    batch.kv_read = d.kv_read;
    const double model = q.expected_itl_ms(0, batch);
    ASSERT_GT(model, 30.0);
    for (int i = 0; i < 200; ++i)
      for (size_t e = 0; e < 2; ++e) {
        d.elapsed_ms = (e == 0 ? r0 : r1) * model * d.tokens * (i % 2 ? 1.05 : 0.95);
        q.on_decode_done(e, d, ms(0));
      }
  };
  feed(p, 1.6, 1.0);
  auto [c0, c1] = calibrated(p, ms(200));
  EXPECT_NEAR(c0, 1.52, 0.05);
  EXPECT_NEAR(c1, 1.0, 0.02);
  EXPECT_EQ(term_of(ex, 0, "meets_slo"), 0.0);
  EXPECT_EQ(term_of(ex, 1, "meets_slo"), 1.0);
  EXPECT_NEAR(term_of(ex, 0, "itl_ms"), itl, 0.5);  // the model's ITL itself is unchanged
  EXPECT_EQ(term_of(ex, 0, "pace"), 1.0);  // samples under KV pressure are not the pace's
  // The metrics scrape reads the same (Policy::endpoint_speed: sluice_endpoint_itl_calibration_ratio).
  double pace = 0, calib = 0;
  ASSERT_TRUE(p.endpoint_speed(0, pace, calib));
  EXPECT_EQ(pace, 1.0);
  EXPECT_EQ(calib, c0);
  ASSERT_TRUE(p.endpoint_speed(1, pace, calib));
  EXPECT_EQ(calib, c1);
  std::vector<Candidate> c;
  p.rank(req, std::span(v).first(2), ms(200), c);
  EXPECT_EQ(c[0].endpoint, 1u);
  EXPECT_FALSE(c[0].shed);
  // An endpoint with no samples of its own takes the pool's (~1.22x here).
  p.explain(req, v, ms(400), ex);
  EXPECT_NEAR(term_of(ex, 2, "itl_calibration"), 1.22, 0.04);
  // Old samples fade (10 s): ten minutes later it is the model's again.
  std::tie(c0, c1) = calibrated(p, ms(600000));
  EXPECT_NEAR(c0, 1.0, 0.01);
  EXPECT_EQ(term_of(ex, 0, "meets_slo"), 1.0);
  // Decodes faster than the model never price an endpoint under it; within their noise, as it.
  SluicePolicy fast({}, PoolKind::chat);
  feed(fast, 0.5, 1.02);
  std::tie(c0, c1) = calibrated(fast, ms(200));
  EXPECT_EQ(c0, 1.0);
  EXPECT_EQ(c1, 1.0);
  // A whole answer's decode is timed from its expected first token: a sample only where the decode
  // is expected to last at least as long as that estimate's span (100 tokens at ~35 ms: 3.5 s).
  SluicePolicy whole({}, PoolKind::chat);
  feed(whole, 1.6, 1.6, false, 5000);
  EXPECT_EQ(calibrated(whole, ms(200)).first, 1.0);
  feed(whole, 1.6, 1.6, false, 2000);
  EXPECT_NEAR(calibrated(whole, ms(200)).first, 1.6, 0.1);
  // Off: the model's ITL alone.
  SluiceParams off_params;
  off_params.itl_calibration = 0;
  SluicePolicy off(off_params, PoolKind::chat);
  feed(off, 1.6, 1.0);
  EXPECT_EQ(calibrated(off, ms(200)).first, 1.0);
  EXPECT_EQ(term_of(ex, 0, "meets_slo"), 1.0);
}

struct Case {
  const char* name;
  void (*setup)(FakePool&);
  size_t want_first;
  bool prefix_on_1 = true;  // endpoint 1 was sent the request's prefix before
};

TEST(SluicePolicy, DecisionTable) {
  const Case cases[] = {
      {"prefix wins when idle", [](FakePool&) {}, 1},
      {"long queue outweighs the prefix",
       [](FakePool& p) {
         p.loads[1].prefill_tokens = 200000;
         p.loads[1].prefill_requests = 50;
         p.loads[1].in_flight = 50;
       },
       0},
      {"saturated queue is not chosen for affinity", [](FakePool& p) { p.signals[1].waiting = 64; }, 0},
      // KV pressure is priced (a preemption's recompute stalls the batch), not a tier: a full KV
      // with a batch running loses the prefix's advantage; the same batch with free KV keeps it.
      {"KV full with a batch is not chosen for affinity",
       [](FakePool& p) {
         p.signals[1].kv_usage = 0.99;
         p.signals[1].running = 1;
       },
       0},
      {"the same batch with free KV keeps affinity",
       [](FakePool& p) {
         p.signals[1].kv_usage = 0.3;
         p.signals[1].running = 1;
       },
       1},
      {"external waiting counts", [](FakePool& p) { p.signals[0].waiting = 30; }, 1, false},
      {"decode interference counts", [](FakePool& p) { p.signals[0].running = 900; }, 1, false},
      {"stale queue is not trusted",
       [](FakePool& p) {
         p.signals[1].waiting = 1000;
         p.stale[1] = true;
       },
       1},
      {"running adapter wins", [](FakePool& p) {
         for (auto& s : p.signals) { s.max_lora = 1; s.lora_running = {"other"}; }
         p.signals[0].lora_running = {"lora-x"};
       }, 0, false},
  };
  for (const auto& c : cases) {
    SluicePolicy p({}, PoolKind::chat);
    FakePool pool(2);
    std::string t = prompt('s', 8000) + prompt('q', 400);
    PickRequest req = testing::chat(t);
    if (std::string_view(c.name) == "running adapter wins") req.adapter = "lora-x";
    p.on_endpoints_reset(2);
    if (c.prefix_on_1) p.on_dispatch(req, 1, Time{});
    c.setup(pool);
    auto out = testing::rank(p, pool, req);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].endpoint, c.want_first) << c.name;
  }
}

TEST(SluicePolicy, SaturatedRankLastAndPredictionReported) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(3);
  std::string t = prompt('z', 6400);
  auto req = testing::chat(t);
  p.on_dispatch(req, 2, Time{});
  auto out = testing::rank(p, pool, req);
  EXPECT_EQ(out[0].endpoint, 2u);
  EXPECT_EQ(out[0].predicted_cached_tokens, 1600);
  // A full KV alone is priced, not saturation (it keeps the prefix here: nothing is running).
  pool.signals[2].kv_usage = 0.98;
  out = testing::rank(p, pool, req);
  EXPECT_EQ(out[0].endpoint, 2u);
  EXPECT_FALSE(out[0].saturated);
  pool.signals[2].waiting = 64;  // queue_limit
  out = testing::rank(p, pool, req);
  EXPECT_EQ(out.back().endpoint, 2u);
  EXPECT_TRUE(out.back().saturated);
}

// The prefill duty (rho) is the pool's uncached dispatch rate per endpoint, the same for every
// endpoint: a per-endpoint rate sampled every 100 ms is noise at ~1 request per sample, and the pick
// then chose the endpoint whose noise was lowest (kv_pressure collapse, sluice_policy.h).
TEST(SluicePolicy, PrefillDutyIsThePoolMean) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(2);
  const std::string text = prompt('d', 400);  // the request's text is a view of it
  auto req = testing::chat(text);
  auto v = pool.views();
  std::vector<Explanation> ex;
  p.explain(req, v, Time{}, ex);  // first sample: the rate starts at 0
  pool.loads[0].input_tokens_total = 100000;  // all of it sent to endpoint 0, none predicted cached
  p.explain(req, pool.views(), Time{} + std::chrono::milliseconds(1000), ex);
  // EMA step a = 1000 / (1000 + 2000); 100 tokens/ms x a, over 2 endpoints, x beta 0.022.
  const double want = 0.022 * (100.0 / 3.0) / 2.0;
  ASSERT_EQ(ex.size(), 2u);
  for (const auto& e : ex) {
    double duty = -1;
    for (const auto& term : e.terms)
      if (term.name == "prefill_duty") duty = term.value;
    EXPECT_NEAR(duty, want, 1e-9) << "endpoint " << e.endpoint;
  }
}

TEST(SluicePolicy, EmbeddingsAreLeastLoad) {
  SluicePolicy p({}, PoolKind::embedding);
  FakePool pool(3);
  pool.loads[0].prefill_tokens = 5000;
  pool.loads[1].prefill_tokens = 100;
  pool.loads[2].prefill_tokens = 3000;
  PickRequest req = testing::chat("hello world", 3, 0);
  req.kind = ApiKind::embedding;
  auto out = testing::rank(p, pool, req);
  EXPECT_EQ(out[0].endpoint, 1u);
  EXPECT_EQ(out[1].endpoint, 2u);
  EXPECT_EQ(out[2].endpoint, 0u);
}

// 100 simultaneous requests, identical stale signals: the burst must spread, not land on one.
void burst(bool stale, bool same_prompt, int min_each = 20, int max_each = 30) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(4);
  for (size_t i = 0; i < 4; ++i) {
    pool.stale[i] = stale;
    pool.signals[i].waiting = 2;
    pool.signals[i].running = 10;
    pool.signals[i].kv_usage = 0.3;
  }
  std::map<size_t, int> count;
  std::vector<std::string> texts;
  for (int i = 0; i < 100; ++i) texts.push_back(same_prompt ? prompt('s', 4000) : std::to_string(i) + prompt('u', 4000));
  for (int i = 0; i < 100; ++i) {
    auto req = testing::chat(texts[i]);
    auto out = testing::rank(p, pool, req);
    ASSERT_FALSE(out.empty());
    pool.dispatch(out[0].endpoint, req, out[0].predicted_cached_tokens);
    p.on_dispatch(req, out[0].endpoint, Time{});
    count[out[0].endpoint]++;
  }
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_GE(count[i], min_each) << "endpoint " << i << " stale=" << stale << " same=" << same_prompt;
    EXPECT_LE(count[i], max_each) << "endpoint " << i << " stale=" << stale << " same=" << same_prompt;
  }
}

TEST(SluicePolicy, BurstSpreadsWithStaleSignals) { burst(true, false); }
TEST(SluicePolicy, BurstSpreadsWithFreshSignals) { burst(false, false); }
// One prompt 100 times: copies stay where the prompt is cached while their batch there costs less
// than a cold prefill elsewhere (sluice_cost_test.cpp pins the numbers); never the whole burst on
// one endpoint.
TEST(SluicePolicy, BurstOfOnePromptStopsAtTheQueueLimit) { burst(true, true, 0, 64); }

TEST(SluicePolicy, ExplainGivesTerms) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(2);
  std::vector<Explanation> ex;
  auto v = pool.views();
  p.explain(testing::chat(prompt('a', 400)), v, Time{}, ex);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_GT(term_of(ex, 0, "ttft_ms"), 0.0);
}

TEST(OraclePolicy, UsesTheCallbackNotTheIndex) {
  OraclePolicy p([](size_t endpoint, const PickRequest& r) -> int64_t { return endpoint == 2 ? r.input_tokens : 0; });
  EXPECT_EQ(p.name(), "oracle");
  FakePool pool(3);
  const std::string text = prompt('o', 8000);  // the request's text is a view of it
  auto req = testing::chat(text);
  auto out = testing::rank(p, pool, req);
  EXPECT_EQ(out[0].endpoint, 2u);
  EXPECT_EQ(out[0].predicted_cached_tokens, 2000);
  EXPECT_EQ(p.prefix().index().entries(), 0u);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(PrefixTracker, BlockSizeFromTheFirstScrapedEndpointAndMixedPoolsKeepTheIndex) {
  PrefixTracker t;
  testing::FakePool pool(2);
  pool.signals[0].block_size = 32;
  pool.signals[1].block_size = 16;
  auto v = pool.views();
  t.sync(v);
  EXPECT_EQ(t.block_tokens(), 32);
  std::string text(128 * 4, 'k');
  auto req = testing::chat(text);
  t.learn(req, 1);
  t.sync(v);  // must not clear what was learned
  auto m = t.match(req);
  EXPECT_EQ(m[1], 4u);  // 512 chars / 128-char blocks
  EXPECT_EQ(t.cached_tokens(m[1], req.input_tokens), 128);
}

// The rotation of the tie key without a division per endpoint (RankRotation) is the modulo it replaced.
TEST(SluicePolicy, RankRotationIsTheModuloItReplaced) {
  for (size_t pool : {0, 1, 2, 7, 64})
    for (size_t cursor : {0, 1, 5, 63, 64, 65, 1000})
      for (size_t index = 0; index < 130; ++index) {
        const size_t n = std::max<size_t>(pool, 1);
        EXPECT_EQ(RankRotation(cursor, pool).of(index), (index + n - cursor % n) % n) << pool << " " << cursor << " " << index;
      }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// phi, the work price's pace share (sluice_policy.h): the pool's mean batch ITL over the ITL SLO, as
// the evaluation of the last dispatched request found it. Ranking again (explain_json ranks each
// request twice) does not move it; the next dispatch does.
TEST(SluicePolicy, ThePaceShareIsTheLastDispatchedRequestsMeanBatchItlOverTheSlo) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(2);
  pool.loads[0].in_flight = 60;
  pool.loads[0].live_context_tokens = 60 * 6000;
  auto v = pool.views();
  const std::string text = prompt('a', 4000);  // the request's text is a view of it
  const auto req = testing::chat(text);
  std::vector<Candidate> out;
  std::vector<Explanation> ex;
  auto pace = [&] {
    p.explain(req, v, Time{}, ex);
    return term_of(ex, 0, "pace_share");
  };
  EXPECT_EQ(pace(), 0.0) << "nothing dispatched yet";
  p.rank(req, v, Time{}, out);
  p.rank(req, v, Time{}, out);
  EXPECT_EQ(pace(), 0.0) << "ranked, not dispatched";
  p.on_dispatch(req, 1, Time{});
  // Endpoint 0: 60 sequences reading 360k KV tokens, 2 + 5.5 + 1.2 + 18 ms; endpoint 1 idle, 7.5 ms.
  const double phi = ((2 + 5.5 + 0.02 * 60 + 5e-5 * 360000) + (2 + 5.5)) / 2 / 50;
  EXPECT_NEAR(pace(), phi, 1e-9);
  pool.loads[1].in_flight = 60;
  pool.loads[1].live_context_tokens = 60 * 6000;
  p.rank(req, v, Time{}, out);
  EXPECT_NEAR(pace(), phi, 1e-9) << "the new load is seen, but the request is not dispatched yet";
  p.on_dispatch(req, 0, Time{});
  EXPECT_NEAR(pace(), (2 + 5.5 + 0.02 * 60 + 5e-5 * 360000) / 50, 1e-9);
}

// The copy credit: endpoint 0 holds a 6,000-token prefix and decodes 60 long sequences; endpoint 1
// is idle. Alone, the request costs ~29 ms at the holder and ~167 ms cold at endpoint 1, so a single
// request stays. When the prefix's demand (lambda_p) is high enough that the requests forecast for
// it (lambda_p x 2 tau = 4 s, however long the request decodes) repay its cold premium, the copy is
// made (the credit is capped at that premium: a cold copy is never priced below a warm one).
TEST(SluicePolicy, AHotPrefixIsCopiedWhenItsDemandRepaysTheColdPrefill) {
  // The work price off: at this pool's pace share (0.34) it makes the holder's 60 long decoders dear
  // on their own; this test is the copy credit's.
  SluiceParams params;
  params.decode_bound_price = 0;
  SluicePolicy p(params, PoolKind::chat);
  FakePool pool(2);
  load_holder(pool);
  const std::string text = prompt('h', 24000) + prompt('q', 800);  // 6,000 + 200 tokens
  const auto req = testing::chat(text);
  auto v = pool.views();
  std::vector<Candidate> out;
  p.on_dispatch(req, 0, Time{});  // endpoint 0 learns the prefix (no match yet: no demand counted)
  p.rank(req, v, Time{}, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].endpoint, 0u) << "no demand yet: the holder";
  std::vector<Explanation> ex;
  p.explain(req, v, Time{}, ex);
  auto term = [&](size_t e, std::string_view name) { return term_of(ex, e, name); };
  EXPECT_EQ(term(1, "copy_credit_ms"), 0.0);
  // 1 dispatch: one earlier request is no evidence of demand (its count less its standard deviation is 0).
  p.rank(req, v, Time{}, out);
  p.on_dispatch(req, 0, Time{});
  p.explain(req, v, Time{}, ex);
  EXPECT_EQ(term(1, "copy_users"), 0.0);
  EXPECT_EQ(term(1, "copy_credit_ms"), 0.0);
  // 2 dispatches: 2 seen over tau, forecast over 2 tau = 4 s (longer than its ~0.9 s decode) from the
  // count less its standard deviation: 2 x (2 - sqrt 2) = 1.17 requests repay part of the premium.
  p.rank(req, v, Time{}, out);
  p.on_dispatch(req, 0, Time{});
  const double forecast = 2 * (2 - std::sqrt(2.0));
  p.explain(req, v, Time{}, ex);
  EXPECT_NEAR(term(1, "copy_users"), forecast, 1e-9);
  EXPECT_LT(term(1, "itl_ms") * 256, 4000.0);  // its decode is shorter than the horizon
  EXPECT_EQ(term(0, "copy_users"), 0.0);
  {
    // A 2,000-token output, whose decode outlasts the horizon, is forecast the same users: the
    // demand is not extrapolated past what its estimate saw.
    const auto long_req = testing::chat(text, -1, 2000);
    p.explain(long_req, v, Time{}, ex);
    EXPECT_GT(term(1, "itl_ms") * 2000, 4000.0);
    EXPECT_NEAR(term(1, "copy_users"), forecast, 1e-9);
    p.explain(req, v, Time{}, ex);
  }
  const double some = term(1, "copy_credit_ms");
  EXPECT_GT(some, 0.0);
  p.rank(req, v, Time{}, out);
  EXPECT_EQ(out[0].endpoint, 0u) << "credit " << some;
  // 60 in all (forecast 2 x (60 - sqrt 60) = 104.5): the future users repay the whole premium; the
  // cold endpoint is now the cheaper.
  for (int i = 0; i < 58; ++i) {
    p.rank(req, v, Time{}, out);
    p.on_dispatch(req, 0, Time{});
  }
  p.explain(req, v, Time{}, ex);
  EXPECT_GT(term(1, "copy_credit_ms"), some);
  EXPECT_EQ(term(0, "copy_credit_ms"), 0.0) << "the holder gets no credit";
  p.rank(req, v, Time{}, out);
  EXPECT_EQ(out[0].endpoint, 1u);
  // The credit never prices the copy below the warm cost: cost_ms >= the ttft of a warm 200-token prefill.
  EXPECT_GT(term(1, "cost_ms"), 5.5);

  // The same demand, but endpoint 1's prefix cache is full (its KV holds 64 blocks, all taken by
  // another prompt): the copy would evict prefixes whose demand is unknown, so it earns no credit.
  pool.signals[1].kv_capacity_blocks = 64;
  const std::string other = prompt('o', 64 * 64);
  p.rank(testing::chat(other), v, Time{}, out);  // adopt the capacity
  p.on_dispatch(testing::chat(other), 1, Time{});
  p.explain(req, v, Time{}, ex);
  EXPECT_EQ(term(1, "copy_credit_ms"), 0.0);
  p.rank(req, v, Time{}, out);
  EXPECT_EQ(out[0].endpoint, 0u);
}

// hot_prefixes (the operators' view, sluice_hot_prefix_* metrics): the prefixes most asked for, each
// with its dispatches per second (the demand the copy credit reads) and the endpoints holding it.
TEST(SluicePolicy, HotPrefixesAreTheMostAskedForWithTheirHolders) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(3);
  auto v = pool.views();
  std::vector<Candidate> out;
  EXPECT_TRUE(p.hot_prefixes(Time{}, 3).empty());
  std::deque<std::string> texts;  // the requests' texts outlive them (the policy keeps a view of the last)
  auto send = [&](char prefix, char tail, size_t endpoint) {
    texts.push_back(prompt(prefix, 24000) + prompt(tail, 800));
    const auto req = testing::chat(texts.back());
    p.rank(req, v, Time{}, out);
    p.on_dispatch(req, endpoint, Time{});
  };
  send('h', 'a', 0);  // learned on 0: nothing held before it, no demand counted
  for (char t = 'b'; t < 'h'; ++t) send('h', t, t % 2 ? 1 : 0);  // 6 more, on 0 and 1
  send('g', 'a', 2);
  send('g', 'b', 2);  // one counted for the second prefix
  const auto hot = p.hot_prefixes(Time{}, 3);
  ASSERT_EQ(hot.size(), 2u);
  EXPECT_NEAR(hot[0].requests_per_s, 6 / PrefixDemand::kTauMs * 1000, 1e-9);
  EXPECT_EQ(hot[0].holders, 2u);
  EXPECT_NEAR(hot[1].requests_per_s, 1 / PrefixDemand::kTauMs * 1000, 1e-9);
  EXPECT_EQ(hot[1].holders, 1u);
  EXPECT_NE(hot[0].key, hot[1].key);
  EXPECT_EQ(p.hot_prefixes(Time{}, 1).size(), 1u);
}

// The copy credit with an adapter: loading the adapter into a free slot is paid once, as the cold
// prefill is, and serves every later request for the prefix there. The copy's premium includes it,
// and neither the holders' steady cost nor the copy's counts it, so the same demand refunds the
// load too: with the credit capped at the premium, a pool whose adapter must load at the copy
// (30 ms, adapter_load_ms) credits exactly 30 ms more than the same pool without adapters; and a
// holder that must load the adapter itself makes the copy worth no more than a holder that has it.
TEST(SluicePolicy, TheCopyCreditRefundsAnAdapterLoadAsItDoesTheColdPrefill) {
  const std::string text = prompt('h', 24000) + prompt('q', 800);  // 6,000 + 200 tokens
  struct Result {
    double credit, adapter_ms;
    size_t first;
  };
  auto run = [&](std::string_view adapter, bool holder_runs_it) {
    SluiceParams params;
    params.decode_bound_price = 0;
    SluicePolicy p(params, PoolKind::chat);
    FakePool pool(2);
    for (auto& s : pool.signals) s.max_lora = 4;
    if (holder_runs_it) pool.signals[0].lora_running = {std::string(adapter)};
    load_holder(pool);
    PickRequest req = testing::chat(text);
    req.adapter = adapter;
    auto v = pool.views();
    std::vector<Candidate> out;
    p.on_dispatch(req, 0, Time{});  // endpoint 0 learns the prefix
    for (int i = 0; i < 400; ++i) {  // the demand for it (a dispatch counts the key its ranking found)
      p.rank(req, v, Time{}, out);
      p.on_dispatch(req, 0, Time{});
    }
    std::vector<Explanation> ex;
    p.explain(req, v, Time{}, ex);
    p.rank(req, v, Time{}, out);
    return Result{term_of(ex, 1, "copy_credit_ms"), term_of(ex, 1, "adapter_ms"), out[0].endpoint};
  };
  const Result plain = run("", false);
  const Result lora = run("lora-x", true);
  const Result lora_idle = run("lora-x", false);
  EXPECT_EQ(plain.adapter_ms, 0.0);
  EXPECT_EQ(lora.adapter_ms, 30.0);
  EXPECT_GT(plain.credit, 100.0);
  EXPECT_NEAR(lora.credit - plain.credit, 30.0, 1e-6) << "the load refunded with the cold prefill";
  EXPECT_EQ(plain.first, 1u);
  EXPECT_EQ(lora.first, 1u) << "the adapter's load does not hold a hot prefix on its holder";
  // The holder must load it too: both pay the load, the copy is worth what it is without it.
  EXPECT_NEAR(lora_idle.credit, lora.credit, 1e-6);
  EXPECT_EQ(lora_idle.first, 1u);
}

// An adapter stays loaded after its requests finish (the engine evicts the least recently used when
// it needs the slot), but the engine's metrics name only the adapters with running or waiting
// requests. The policy learns residency from its own dispatches: an adapter among the last max_lora
// distinct adapters it sent to an endpoint is not charged a load there while the signals show a free
// slot; one pushed out by max_lora others is charged again, as is every adapter behind stale signals.
TEST(SluicePolicy, AnAdapterSentRecentlyIsTakenAsStillLoaded) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(2);
  for (auto& s : pool.signals) s.max_lora = 2;  // nothing running: a free slot everywhere
  auto v = pool.views();
  std::vector<Candidate> out;
  std::deque<std::string> texts;  // a PickRequest views its text: kept alive here
  auto request = [&](std::string_view adapter, char c) {
    texts.push_back(prompt(c, 4000));
    PickRequest r = testing::chat(texts.back());
    r.adapter = adapter;
    return r;
  };
  auto load_ms = [&](std::string_view adapter, size_t e) {
    std::vector<Explanation> ex;
    p.explain(request(adapter, 'z'), v, Time{}, ex);
    return term_of(ex, e, "adapter_ms");
  };
  EXPECT_EQ(load_ms("a", 0), 30.0);
  EXPECT_EQ(load_ms("a", 1), 30.0);
  const auto a = request("a", 'a');
  p.rank(a, v, Time{}, out);
  p.on_dispatch(a, 1, Time{});
  EXPECT_EQ(load_ms("a", 1), 0.0) << "sent there, its requests done since: still loaded";
  EXPECT_EQ(load_ms("a", 0), 30.0);
  EXPECT_EQ(load_ms("b", 1), 30.0);
  // b, then a again, then c: the last two distinct are c and a; b was pushed out of the 2 slots.
  for (std::string_view name : {"b", "a", "c"}) {
    const auto r = request(name, name[0]);
    p.rank(r, v, Time{}, out);
    p.on_dispatch(r, 1, Time{});
  }
  EXPECT_EQ(load_ms("a", 1), 0.0);
  EXPECT_EQ(load_ms("c", 1), 0.0);
  EXPECT_EQ(load_ms("b", 1), 30.0) << "evicted by two others";
  // Its requests waiting there: the waiting tier's price, as before (not a free slot).
  pool.signals[1].lora_waiting = {"a"};
  pool.signals[1].lora_running = {"x"};
  EXPECT_EQ(load_ms("a", 1), 30.0);
  pool.signals[1].lora_waiting.clear();
  pool.signals[1].lora_running.clear();
  pool.stale[1] = true;
  v = pool.views();
  EXPECT_EQ(load_ms("a", 1), 30.0) << "stale signals: max_lora unknown";
}

// The continuation share (c, followup_ms): a request continues an earlier one when its deepest
// cached block is the last whole block of a recent prompt and it adds blocks after it. Sessions whose
// turns extend the previous turn's prompt raise it; prompts that only share a system prompt, or
// repeat one prompt, do not.
TEST(SluicePolicy, ContinuationShareCountsTurnsThatExtendAnEarlierPrompt) {
  FakePool pool(2);
  auto v = pool.views();
  std::vector<Candidate> out;
  const std::string system = prompt('s', 8000);
  {
    SluicePolicy p({}, PoolKind::chat);
    // 40 prompts sharing the system prompt, each with its own tail: no continuation.
    std::vector<std::string> texts;
    for (int i = 0; i < 40; ++i) texts.push_back(system + "tail " + std::to_string(i) + "." + prompt('x', 640 + 64 * static_cast<size_t>(i)));
    for (const std::string& t : texts) {
      const auto r = testing::chat(t);
      p.rank(r, v, Time{}, out);
      p.on_dispatch(r, out[0].endpoint, Time{});
    }
    EXPECT_EQ(p.continuation_share(), 0.0);
    // One prompt repeated: the same context, not an extension of it.
    for (int i = 0; i < 20; ++i) {
      const auto r = testing::chat(texts[0]);
      p.rank(r, v, Time{}, out);
      p.on_dispatch(r, out[0].endpoint, Time{});
    }
    EXPECT_EQ(p.continuation_share(), 0.0);
    // A prompt that is the system prompt and a few words (its last whole block is the system
    // prompt's): the prompts behind that system prompt do not extend it.
    const std::string hi = system + "hi";
    const auto r = testing::chat(hi);
    p.rank(r, v, Time{}, out);
    p.on_dispatch(r, out[0].endpoint, Time{});
    for (int i = 0; i < 20; ++i) {
      const auto r = testing::chat(texts[static_cast<size_t>(i)]);
      p.rank(r, v, Time{}, out);
      p.on_dispatch(r, out[0].endpoint, Time{});
    }
    EXPECT_EQ(p.continuation_share(), 0.0);
  }
  SluicePolicy p({}, PoolKind::chat);
  // 60 sessions of 8 turns, each turn the previous prompt plus 1,000 characters: 7 of 8 extend one.
  std::vector<std::string> turns;
  for (int s = 0; s < 60; ++s) {
    std::string t = system + "session " + std::to_string(s) + "." + prompt('t', 1000);
    for (int k = 0; k < 8; ++k) {
      turns.push_back(t);
      const auto r = testing::chat(turns.back());
      p.rank(r, v, Time{}, out);
      p.on_dispatch(r, out[0].endpoint, Time{});
      t += " turn " + std::to_string(k) + prompt(static_cast<char>('a' + k), 1000);
    }
  }
  // Smoothed over ~128 dispatches (from 0), 480 of which 420 continue: near 7/8.
  EXPECT_GT(p.continuation_share(), 0.8);
  EXPECT_LT(p.continuation_share(), 0.9);
  std::vector<Explanation> ex;
  const auto r = testing::chat(turns.back());
  p.explain(r, v, Time{}, ex);
  const double followups = term_of(ex, 0, "followups");
  EXPECT_NEAR(followups, sluice_followups(p.continuation_share()), 1e-12);
}

// A new session's first turn, once sessions are seen to continue: endpoint 0 holds the system prompt
// it starts with and decodes 30 long contexts, endpoint 1 is idle. Alone, the first turn is cheaper
// warm at endpoint 0 (24 ms against 54 ms cold); priced with the later turns that will follow it
// there (each a step of a batch reading 300k KV tokens: 23 ms against 7.5 ms), it goes to the idle
// endpoint.
TEST(SluicePolicy, ANewSessionGoesWhereItsLaterTurnsWillBeCheap) {
  const std::string system = prompt('s', 8000);  // 2,000 tokens
  const std::string first = system + prompt('n', 800);
  const std::string history_system = prompt('r', 8000);
  auto pick = [&](bool sessions_continue, double* followups) {
    SluicePolicy p({}, PoolKind::chat);
    FakePool pool(2);
    p.on_endpoints_reset(2);
    auto v = pool.views();
    std::vector<Candidate> out;
    // History, 3 s before: sessions behind another system prompt whose turns extend one another,
    // or, for the other history, each a new prompt behind that system prompt.
    std::vector<std::string> texts;
    for (int s = 0; s < 60; ++s) {
      std::string t = history_system + "session " + std::to_string(s) + "." + prompt('u', 700);
      for (int k = 0; k < 8; ++k) {
        texts.push_back(t);
        t = sessions_continue ? t + prompt(static_cast<char>('a' + k), 640)
                              : history_system + "other " + std::to_string(s * 8 + k) + ".";
      }
    }
    for (const std::string& t : texts) {
      const auto r = testing::chat(t);
      p.rank(r, v, Time{}, out);
      p.on_dispatch(r, out[0].endpoint, Time{});
    }
    // Endpoint 0 was sent the system prompt once, and is busy.
    p.on_dispatch(testing::chat(system), 0, Time{});
    pool.loads[0].in_flight = 30;
    pool.loads[0].live_context_tokens = 30 * 10000;
    pool.loads[0].decode_tokens = 30 * 50;
    const Time now = Time{} + std::chrono::seconds(3);
    const auto r = testing::chat(first, -1, 150);
    std::vector<Explanation> ex;
    p.explain(r, v, now, ex);
    *followups = term_of(ex, 0, "followups");
    p.rank(r, v, now, out);
    return out[0].endpoint;
  };
  double g = -1;
  EXPECT_EQ(pick(false, &g), 0u) << "no later turns: warm on the busy endpoint";
  EXPECT_EQ(g, 0.0);
  EXPECT_EQ(pick(true, &g), 1u) << "its later turns would pay the busy endpoint's steps";
  EXPECT_GT(g, 1.0);
}

// The live gateway's chat requests: the chat template renders a conversation's next turn (the
// previous messages, the assistant's answer, a new user message) with the previous turn's whole
// rendered prompt, trailer included, as its prefix, so its turns count as continuations.
TEST(SluicePolicy, ChatTurnsRenderedByTheTemplateCountAsContinuations) {
  FakePool pool(2);
  auto v = pool.views();
  std::vector<Candidate> out;
  SluicePolicy p({}, PoolKind::chat);
  std::vector<std::string> rendered;
  for (int s = 0; s < 80; ++s) {
    std::vector<ChatMessage> messages{{"system", std::string(4000, 's')},
                                      {"user", "task " + std::to_string(s) + ": " + std::string(300, 'q')}};
    for (int k = 0; k < 6; ++k) {
      rendered.push_back(render_chat(messages));
      ASSERT_TRUE(k == 0 || rendered.back().starts_with(rendered[rendered.size() - 2]));
      const auto r = testing::chat(rendered.back());
      p.rank(r, v, Time{}, out);
      p.on_dispatch(r, out[0].endpoint, Time{});
      messages.push_back({"assistant", "answer " + std::to_string(k) + std::string(200, 'a')});
      messages.push_back({"user", "tool output " + std::to_string(k) + std::string(500, 't')});
    }
  }
  // 5 of every 6 requests continue a conversation; smoothed over ~128 of 480 dispatches from 0.
  EXPECT_GT(p.continuation_share(), 0.75) << p.continuation_share();
  EXPECT_LT(p.continuation_share(), 5.0 / 6.0);
}

// ---- shedding (sluice_policy.h, "Shedding") ----

// Every endpoint has > 1 s of prefill queued ahead: the request would miss the TTFT SLO everywhere,
// and alone it would meet it (1,000 tokens: ~25 ms): the first candidate advises shedding, which
// every driver applies to priority <= 0 only. One idle endpoint is enough to serve it instead.
TEST(SluiceShed, ARequestEveryEndpointIsTooLoadedToServeInTheSloIsShed) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(3);
  for (auto& l : pool.loads) l.prefill_tokens = 60000, l.prefill_requests = 30, l.in_flight = 30;
  std::string t = prompt('s', 4000);
  auto c = testing::rank(p, pool, testing::chat(t, 1000));
  ASSERT_EQ(c.size(), 3u);
  EXPECT_TRUE(c[0].shed);
  EXPECT_FALSE(c[1].shed);  // the advice rides on the first candidate only
  EXPECT_TRUE(shed_advised(c, 0));
  EXPECT_TRUE(shed_advised(c, -1));
  EXPECT_FALSE(shed_advised(c, 1));  // a critical request is served late instead
  EXPECT_FALSE(shed_advised({}, 0));
  pool.loads[2] = EndpointLoad{};
  c = testing::rank(p, pool, testing::chat(t, 1000));
  EXPECT_FALSE(c[0].shed);
  EXPECT_EQ(c[0].endpoint, 2u);
}

// A shed request's Retry-After base is when it would meet the SLO: the TTFT excess of the endpoint
// nearest to it drains with its queue (60,000 more queued tokens: ~1.3 s later at beta 0.022 ms a
// token), never under one engine step; without an estimate the drivers keep the 1 s base.
TEST(SluiceShed, TheRetryAfterIsWhenTheQueueAheadHasDrainedToTheSlo) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(3);
  std::string t = prompt('r', 4000);
  auto shed_at = [&](double queued) {
    for (auto& l : pool.loads) l.prefill_tokens = static_cast<int64_t>(queued), l.prefill_requests = 30, l.in_flight = 30;
    pool.loads[2].prefill_tokens += 6000;  // not the nearest
    auto c = testing::rank(p, pool, testing::chat(t, 1000));
    EXPECT_TRUE(c[0].shed);
    return c;
  };
  const auto near = shed_at(60000), far = shed_at(120000);
  const SluiceParams d;
  EXPECT_GE(near[0].retry_after_ms, d.c0_ms + d.w_ms);
  EXPECT_NEAR(far[0].retry_after_ms - near[0].retry_after_ms, 60000 * d.beta_ms, 0.3 * 60000 * d.beta_ms);
  EXPECT_EQ(near[1].retry_after_ms, 0.0);  // on the first candidate only
  EXPECT_EQ(shed_retry_base(far), std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(far[0].retry_after_ms)));
  EXPECT_EQ(shed_retry_base(std::vector<Candidate>{Candidate{}}), std::chrono::seconds(1));
  EXPECT_EQ(shed_retry_base({}), std::chrono::seconds(1));
}

// A burst's refusals are told to come back one after another: each shed request's Retry-After adds
// the prefill (alone) of those refused before it (the drivers report each, on_shed), spread over the
// endpoints, less what the endpoints have worked off since; once that time has passed it is back to
// the estimate alone. A ranking that refuses nothing (/debug/pick's) adds nothing.
TEST(SluiceShed, ABurstsRefusalsComeBackOneAfterAnother) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(2);
  for (auto& l : pool.loads) l.prefill_tokens = 60000, l.prefill_requests = 30, l.in_flight = 30;
  std::string t = prompt('b', 4000);
  const PickRequest req = testing::chat(t, 1000);
  std::vector<Candidate> c;
  auto v = pool.views();
  p.rank(req, v, Time{}, c);
  const double alone = c[0].retry_after_ms;
  p.rank(req, v, Time{}, c);
  EXPECT_EQ(c[0].retry_after_ms, alone);  // ranked, not refused
  EXPECT_GT(c[0].shed_work_ms, 0.0);
  std::vector<double> waits;
  for (int i = 0; i < 5; ++i) {
    p.rank(req, v, Time{}, c);
    ASSERT_TRUE(c[0].shed);
    waits.push_back(c[0].retry_after_ms);
    p.on_shed(c[0], Time{});
  }
  EXPECT_EQ(waits[0], alone);
  // Each refusal adds one request's prefill alone (1,000 tokens) over 2 endpoints; the fields are
  // whole ms rounded up, so each sum is within 1 ms of the exact one.
  const double step = c[0].shed_work_ms / 2.0;
  EXPECT_GT(step, 5.0);
  for (int i = 1; i < 5; ++i) EXPECT_NEAR(waits[i] - waits[0], i * step, 1.0);
  // 5 refused: 5 x 2 x step ms of work; after 2 x step ms the two endpoints have done 4 x step.
  p.rank(req, v, Time{} + std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(2 * step)), c);
  EXPECT_NEAR(c[0].retry_after_ms - waits[0], 3 * step, 1.0);
  p.rank(req, v, Time{} + std::chrono::seconds(60), c);
  EXPECT_EQ(c[0].retry_after_ms, waits[0]);
}

// Missing the ITL SLO everywhere sheds too: both batches read so much KV per step that joining
// either is past the 50 ms pace.
TEST(SluiceShed, EveryBatchPastTheItlPaceSheds) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(2);
  for (auto& l : pool.loads) l.in_flight = 100, l.live_context_tokens = 100 * 9000, l.decode_tokens = 100 * 20;
  std::string t = prompt('i', 4000);
  auto c = testing::rank(p, pool, testing::chat(t, 1000));
  EXPECT_TRUE(c[0].shed);
  // Its Retry-After: while the share of the batch that puts it past the pace finishes (their ~20
  // remaining tokens each at ~50+ ms): between one step and a few seconds.
  EXPECT_GT(c[0].retry_after_ms, 10.0);
  EXPECT_LT(c[0].retry_after_ms, 5000.0);
  pool.loads[1] = EndpointLoad{};
  EXPECT_FALSE(testing::rank(p, pool, testing::chat(t, 1000))[0].shed);
}

// A lost cause (sluice_policy.h, the SLO): a request that would miss the TTFT SLO even alone on an
// idle endpoint (60,000 uncached tokens: ~4 s of prefill, its attention included) is held to its own time alone plus the
// SLO (the load may delay it by as much as the SLO delays any request), in TTFT and in ITL, and is
// shed like any other where the load makes it miss that: with lost_causes 0 it misses the SLO
// everywhere and is never shed, however loaded (its lateness read as its own). Its cached prefix
// counts: cached on an endpoint, the same prompt meets the SLO alone and is no lost cause.
TEST(SluiceShed, ARequestTooLongToMeetTheSloAloneIsHeldToItsTimeAlonePlusTheSlo) {
  std::string t = prompt('l', 240000);
  // A long answer: its prefill's stall spread over 1,000 tokens leaves the batch it joins under the
  // pace (over 100, the one request queued there would be pushed past it, and shed 2 would weigh that).
  PickRequest req = testing::chat(t, 60000, 1000);
  auto run = [&](const SluiceParams& params, int64_t queued_tokens, bool idle_second) {
    SluicePolicy p(params, PoolKind::chat);
    FakePool pool(2);
    // The queue ahead is one long prompt (30 queued short ones would join the batch its prefill
    // stalls, and shed 2 weighs their expected misses: ShedTwoWeighsTheBatchsExpectedMisses).
    for (auto& l : pool.loads) l.prefill_tokens = queued_tokens, l.prefill_requests = 1, l.in_flight = 1;
    if (idle_second) pool.loads[1] = EndpointLoad{};
    std::vector<Explanation> ex;
    auto v = pool.views();
    p.explain(req, v, Time{}, ex);
    std::map<std::string_view, double> first;
    for (auto& x : ex[0].terms) first[x.name] = x.value;
    const auto c = testing::rank(p, pool, req);
    return std::make_tuple(c, first, ex[0].endpoint);
  };
  SluiceParams off;
  off.lost_causes = 0;
  EXPECT_EQ(SluiceParams{}.lost_causes, 1);
  // 60,000 tokens queued ahead everywhere (~1.3 s, and its attention): past its time alone plus the SLO: shed, and told
  // to come back when that queue has drained to it; without lost causes, never shed.
  const auto [loaded, loaded_terms, loaded_at] = run(SluiceParams{}, 60000, false);
  EXPECT_TRUE(loaded[0].shed);
  EXPECT_EQ(loaded_terms.at("meets_slo"), 0);
  EXPECT_GT(loaded[0].retry_after_ms, 100);
  EXPECT_LT(loaded[0].retry_after_ms, 1000);  // ~1.3 s of queue less the SLO's 1 s
  EXPECT_FALSE(std::get<0>(run(off, 60000, false))[0].shed);
  // 20,000 tokens ahead (~0.45 s): within its time alone plus the SLO: served, and it meets its
  // target there, where without lost causes it misses the SLO (alone it takes ~4 s).
  const auto [light, light_terms, light_at] = run(SluiceParams{}, 20000, false);
  EXPECT_FALSE(light[0].shed);
  EXPECT_GT(light_terms.at("ttft_ms"), 1000);
  EXPECT_EQ(light_terms.at("meets_slo"), 1);
  // /debug/pick shows what it was tested against: its time alone (~4 s) plus the SLO's 1 s and 50 ms.
  EXPECT_LE(light_terms.at("ttft_ms"), light_terms.at("ttft_target_ms"));
  EXPECT_GT(light_terms.at("ttft_target_ms"), 4000);
  EXPECT_LT(light_terms.at("ttft_target_ms"), 6000);
  EXPECT_GT(light_terms.at("itl_target_ms"), 50);
  EXPECT_EQ(std::get<1>(run(off, 20000, false)).at("ttft_target_ms"), 1000);
  EXPECT_EQ(std::get<1>(run(off, 20000, false)).at("itl_target_ms"), 50);
  EXPECT_EQ(std::get<1>(run(off, 20000, false)).at("meets_slo"), 0);
  // An idle endpoint serves it at once.
  const auto [idle, idle_terms, idle_at] = run(SluiceParams{}, 60000, true);
  EXPECT_FALSE(idle[0].shed);
  EXPECT_EQ(idle[0].endpoint, 1u);
  // Its prefix learned on endpoint 1: alone there it needs only the tail's prefill, no lost cause,
  // and the loaded pool sheds it by the SLO itself (with lost causes off too).
  for (const SluiceParams& params : {SluiceParams{}, off}) {
    SluicePolicy p(params, PoolKind::chat);
    FakePool pool(2);
    for (auto& l : pool.loads) l.prefill_tokens = 60000, l.prefill_requests = 30, l.in_flight = 30;
    p.on_dispatch(req, 1, Time{});
    const auto c = testing::rank(p, pool, req);
    EXPECT_GT(c[0].predicted_cached_tokens + c[1].predicted_cached_tokens, 50000);
    EXPECT_TRUE(c[0].shed);
  }
  // The parameter by name, as a pool's policy_params give it.
  PolicyParams named(std::map<std::string, double>{{"lost_causes", 0.0}});
  EXPECT_EQ(SluiceParams::from(named).lost_causes, 0);
}

// shed 2 (the default): a batch just under the ITL pace, where the request itself would still meet
// it but its 6,000-token context slows every step enough that the others' expected new misses
// outweigh its own chance of meeting it: shed 2 sheds, shed 1 serves. A short request adds almost
// nothing to the step (its context is ~100 tokens): served. A small batch well under the pace: served.
TEST(SluiceShed, ShedTwoWeighsTheBatchsExpectedMisses) {
  SluiceParams two;
  two.shed = 2;
  SluiceParams one;
  one.shed = 1;
  std::string t = prompt('g', 24000);
  PickRequest req = testing::chat(t, 6000, 200);
  auto first = [&](const SluiceParams& params, int64_t in_flight, int64_t context) {
    SluicePolicy p(params, PoolKind::chat);
    FakePool pool(1);
    pool.loads[0].in_flight = in_flight;
    pool.loads[0].live_context_tokens = in_flight * context;
    pool.loads[0].decode_tokens = in_flight * 100;
    std::vector<Explanation> ex;
    auto v = pool.views();
    p.explain(req, v, Time{}, ex);
    std::map<std::string_view, double> terms;
    for (auto& x : ex[0].terms) terms[x.name] = x.value;
    return std::make_pair(testing::rank(p, pool, req)[0].shed, terms);
  };
  // Find a batch whose ITL with the request sits just under the 50 ms pace.
  int64_t b = 0;
  for (int64_t n = 10; n < 400; ++n) {
    auto [shed, terms] = first(one, n, 6000);
    if (terms["itl_ms"] > 47 && terms["itl_ms"] < 50) {
      b = n;
      break;
    }
  }
  ASSERT_GT(b, 0);
  EXPECT_FALSE(first(one, b, 6000).first);            // it meets the SLO there: shed 1 serves it
  EXPECT_TRUE(first(two, b, 6000).first);             // but the batch's expected misses outweigh it
  EXPECT_TRUE(first(SluiceParams{}, b, 6000).first);  // (the default)
  // /debug/pick tells the two apart: it meets the SLO there, and the endpoint does not serve it.
  auto [shed_two, terms_two] = first(two, b, 6000);
  EXPECT_EQ(terms_two["meets_slo"], 1);
  EXPECT_EQ(terms_two["serves"], 0);
  EXPECT_EQ(first(one, b, 6000).second["serves"], 1);
  EXPECT_FALSE(first(two, 10, 6000).first);            // a small batch far under the pace
  std::string short_text = prompt('h', 400);
  req = testing::chat(short_text, 100, 200);
  EXPECT_FALSE(first(two, b, 6000).first);             // a short request barely slows the batch
}

// An ITL SLO under one engine step (5 ms; a step alone is ~7.5 ms) is missed everywhere, loaded or
// not: that is the SLO's doing, not the load's, and nothing is shed.
TEST(SluiceShed, AnSloNoEngineStepCanMeetShedsNothing) {
  SluiceParams tight;
  tight.itl_slo_ms = 5;
  SluicePolicy p(tight, PoolKind::chat);
  FakePool pool(2);
  for (auto& l : pool.loads) l.prefill_tokens = 60000, l.prefill_requests = 30, l.in_flight = 30;
  std::string t = prompt('t', 4000);
  EXPECT_FALSE(testing::rank(p, pool, testing::chat(t, 1000))[0].shed);
  SluicePolicy q({}, PoolKind::chat);  // the default SLO on the same load: shed
  EXPECT_TRUE(testing::rank(q, pool, testing::chat(t, 1000))[0].shed);
}

TEST(SluiceShed, OffWithShedZeroAndForEmbeddings) {
  SluiceParams off;
  off.shed = 0;
  EXPECT_EQ(SluiceParams{}.shed, 2);  // on by default (shed 2, ShedTwoWeighsTheBatchsExpectedMisses)
  SluicePolicy p(off, PoolKind::chat);
  FakePool pool(2);
  for (auto& l : pool.loads) l.prefill_tokens = 60000, l.prefill_requests = 30, l.in_flight = 30;
  std::string t = prompt('o', 4000);
  EXPECT_FALSE(testing::rank(p, pool, testing::chat(t, 1000))[0].shed);
  // Embeddings have no SLO here (no TTFT, no ITL): never shed.
  SluicePolicy e({}, PoolKind::embedding);
  PickRequest er = testing::chat(t, 1000, 0);
  er.kind = ApiKind::embedding;
  EXPECT_FALSE(testing::rank(e, pool, er)[0].shed);
  // The parameter by name, as a pool's policy_params give it.
  PolicyParams named(std::map<std::string, double>{{"shed", 0.0}});
  EXPECT_EQ(SluiceParams::from(named).shed, 0);
}

}  // namespace
}  // namespace sluice
