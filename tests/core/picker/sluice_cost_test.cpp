// Each term of the sluice policy's cost (sluice_policy.h) on its own, against the engine's step-time
// model, and the behaviours that fall out of their sum: a hot prefix is copied to a cold endpoint
// when its warm endpoint's batch makes it dearer, and a burst of one prompt is kept together while
// the warm endpoint absorbs it.
#include <gtest/gtest.h>

#include <map>

#include "core/engine/cost_model.h"
#include "core/picker/sluice_policy.h"
#include "picker_test_util.h"

namespace sluice {
namespace {

using testing::FakePool;

// Decode priced in plain ms (decode_price 0): the terms that do not depend on the pricing use it.
SluiceParams plain_ms() {
  SluiceParams p;
  p.decode_price = 0;
  return p;
}
const SluiceParams kP = plain_ms();
const SluiceParams kPlain = plain_ms();
// Decode priced by its lag behind the ITL SLO's pace (decode_price 1).
SluiceParams lag_priced() {
  SluiceParams p;
  p.decode_price = 1;
  return p;
}
const SluiceParams kLag = lag_priced();

// One decode step of the engine's cost model (no prefill in the step).
double engine_step(double seqs, double kv_read) {
  engine::CostModel m;
  engine::StepShape s;
  s.num_tokens = static_cast<int64_t>(seqs);
  s.num_seqs = static_cast<int64_t>(seqs);
  s.kv_read_tokens = static_cast<int64_t>(kv_read);
  return m.step_ms(s);
}

TEST(SluiceCost, DefaultsAreTheDefaultEngineProfile) {
  const auto prof = engine::find_profile(engine::kDefaultProfile);
  ASSERT_TRUE(prof);
  EXPECT_EQ(kP.c0_ms, prof->cost.c0_ms);
  EXPECT_EQ(kP.w_ms, prof->cost.w_ms);
  EXPECT_EQ(kP.beta_ms, prof->cost.beta_ms);
  EXPECT_EQ(kP.delta_ms, prof->cost.delta_ms);
  EXPECT_EQ(kP.gamma_ms, prof->cost.gamma_ms);
  EXPECT_EQ(kP.eps_ms, prof->cost.eps_ms);
  EXPECT_EQ(kP.chunk_tokens, static_cast<double>(prof->max_num_batched_tokens));
}

TEST(SluiceCost, IdleEndpoint) {
  SluiceInputs in;
  in.input = 1000;
  in.output = 100;
  in.capacity_tokens = 432000;
  const SluiceCost c = sluice_cost(kPlain, in);
  EXPECT_EQ(sluice_cost(kLag, in).decode_ms, 0);  // alone, far faster than the SLO's pace: no lag
  // One prefill step of 1000 tokens: max(W, beta x 1000) + C0 + attention eps x 1000 x 500.
  EXPECT_NEAR(c.ttft_ms, 22.0 + 2.0 + 1.5e-6 * 1000 * 500, 1e-9);
  // 100 tokens alone, at the engine's step time for one sequence reading its mean context.
  EXPECT_NEAR(c.decode_ms, 100 * engine_step(1, 1050), 1e-9);
  EXPECT_EQ(c.interference_ms, 0);     // nobody to slow down
  EXPECT_EQ(c.prefill_imposed_ms, 0);
  EXPECT_EQ(c.kv_ms, 0);
  EXPECT_NEAR(c.total(), c.ttft_ms + c.decode_ms, 1e-9);
}

TEST(SluiceCost, TtftCountsTheQueueTheDecodersAndTheirKvRead) {
  SluiceInputs in;
  in.input = 1000;
  in.output = 10;
  in.capacity_tokens = 432000;
  const double idle = sluice_cost(kP, in).ttft_ms;
  in.queue_tokens = 20000;  // 21000 tokens to prefill: 3 chunked steps
  const double queued = sluice_cost(kP, in).ttft_ms;
  EXPECT_NEAR(queued, 0.022 * 21000 + 3 * 2.0 + 1.5e-6 * 1000 * 500, 1e-9);
  in.decoding = 100;
  in.kv_read = 1e6;  // every one of the 3 steps also reads the decoders' KV
  const double with_decode = sluice_cost(kP, in).ttft_ms;
  // ... and it first waits out the rest of the decode step in progress, half of one on average:
  // (max(W, beta D) + C0 + delta D + gamma K) / 2.
  const double in_progress = 0.5 * (std::max(5.5, 0.022 * 100) + 2.0 + 0.02 * 100 + 5e-5 * 1e6);
  EXPECT_NEAR(with_decode - queued, 0.022 * 300 + 3 * (0.02 * 100 + 5e-5 * 1e6) + in_progress, 1e-9);
  in.cached = 800;  // a cached prefix removes its prefill (the attention over it remains)
  EXPECT_LT(sluice_cost(kP, in).ttft_ms, with_decode - 0.022 * 700);
  EXPECT_GT(idle, 0);
}

// The step in progress: with decoders running, a request arriving at a random time waits out the
// rest of the current step (half of it on average) before its prefill's first step; an idle engine
// starts it at once. The same with a queue ahead (the head's progress is counted apart).
TEST(SluiceCost, TtftWaitsOutHalfTheDecodeStepInProgress) {
  SluiceInputs in;
  in.input = 500;
  in.output = 10;
  in.capacity_tokens = 432000;
  const double idle = sluice_cost(kP, in).ttft_ms;
  EXPECT_NEAR(idle, 0.022 * 500 + 2.0 + 1.5e-6 * 500 * 250, 1e-9);  // one step: max(W, beta U) + C0 + attention
  in.decoding = 8;
  in.kv_read = 40000;
  const double step = std::max(5.5, 0.022 * 8) + 2.0 + 0.02 * 8 + 5e-5 * 40000;  // step(D, K)
  // Its own step also carries the decoders (delta D + gamma K, and beta D under the W floor).
  const double own = std::max(5.5, 0.022 * 508) + 2.0 + 0.02 * 8 + 5e-5 * 40000 + 1.5e-6 * 500 * 250;
  EXPECT_NEAR(sluice_cost(kP, in).ttft_ms, step / 2 + own, 1e-9);
  EXPECT_NEAR(sluice_cost(kP, in).ttft_ms - idle, step / 2 + (own - idle), 1e-9);
  in.queue_tokens = 9000;  // 9,500 tokens: two chunked steps of 8,192
  EXPECT_NEAR(sluice_cost(kP, in).ttft_ms,
              step / 2 + 0.022 * (9500 + 2 * 8) + 2 * (2.0 + 0.02 * 8 + 5e-5 * 40000) + 1.5e-6 * 500 * 250, 1e-9);
  // The engine's front end (F) comes first, whatever the endpoint's state; nothing else moves.
  SluiceParams f = kP;
  f.front_end_ms = 20;
  const SluiceCost with = sluice_cost(f, in), without = sluice_cost(kP, in);
  EXPECT_NEAR(with.ttft_ms, without.ttft_ms + 20, 1e-9);
  EXPECT_NEAR(with.total() - with.ttft_ms, without.total() - without.ttft_ms, 1e-9);
}

TEST(SluiceCost, DecodeRunsAtTheBatchItJoins) {
  SluiceInputs in;
  in.input = 2000;
  in.output = 200;
  in.decoding = 40;
  in.queued = 10;
  in.kv_read = 300000;
  in.capacity_tokens = 1e9;
  const SluiceCost c = sluice_cost(kPlain, in);
  EXPECT_NEAR(c.decode_ms, 200 * engine_step(51, 300000 + 2100), 1e-9);
}

TEST(SluiceCost, InterferenceIsTheOthersRemainingTokensTimesTheStepIncrease) {
  SluiceInputs in;
  in.input = 8000;
  in.output = 100;
  in.decoding = 30;
  in.kv_read = 30 * 8000;
  in.capacity_tokens = 1e9;
  const double inc = engine_step(31, 30 * 8000 + 8050) - engine_step(30, 30 * 8000);
  EXPECT_NEAR(inc, 0.02 + 5e-5 * 8050, 1e-9);  // its batch slot and the KV its attention reads
  in.remaining = 1000;  // the others finish within our decode: all 1000 of their tokens slow down
  EXPECT_NEAR(sluice_cost(kPlain, in).interference_ms, 1000 * inc, 1e-9);
  in.remaining = 30 * 500;  // they outlive us: only the 30 x 100 tokens produced alongside ours
  EXPECT_NEAR(sluice_cost(kPlain, in).interference_ms, 3000 * inc, 1e-9);
  // Past the weight-read floor every sequence also costs beta per step.
  in.decoding = 400;
  in.kv_read = 0;
  in.remaining = 1e9;
  const double over = engine_step(401, 8050) - engine_step(400, 0);
  EXPECT_NEAR(over, 0.022 + 0.02 + 5e-5 * 8050, 1e-9);
  EXPECT_NEAR(sluice_cost(kPlain, in).interference_ms, 400 * 100 * over, 1e-6);
}

TEST(SluiceCost, DecodeIsPricedByItsLagBehindTheSloPace) {
  SluiceInputs in;
  in.input = 8000;
  in.output = 100;
  in.capacity_tokens = 1e9;
  in.decoding = 30;
  in.kv_read = 30 * 8000;
  in.remaining = 1e9;
  // A 30-sequence batch at ~22 ms a token keeps the 50 ms pace: no lag, for us or for them.
  EXPECT_EQ(sluice_cost(kLag, in).decode_ms, 0);
  EXPECT_EQ(sluice_cost(kLag, in).interference_ms, 0);
  in.decoding = 100;
  in.kv_read = 100 * 8200;  // 41 ms of KV read: ~50.5 ms before us, ~50.9 ms with us
  const double before = engine_step(100, 820000), with = engine_step(101, 828050);
  ASSERT_GT(before, 50);
  EXPECT_NEAR(sluice_cost(kLag, in).decode_ms, 100 * (with - 50), 1e-9);
  EXPECT_NEAR(sluice_cost(kLag, in).interference_ms, 100 * 100 * (with - before), 1e-6);
  in.kv_read = 100 * 8050;  // just under the pace before us, past it with us: only the excess counts
  const double b2 = engine_step(100, 805000), w2 = engine_step(101, 813050);
  ASSERT_LT(b2, 50);
  ASSERT_GT(w2, 50);
  EXPECT_NEAR(sluice_cost(kLag, in).interference_ms, 100 * 100 * (w2 - 50), 1e-6);
  in.prefill_duty = 0.5;  // prefill takes half the steps: the stream is twice as slow
  EXPECT_NEAR(sluice_cost(kLag, in).decode_ms, 100 * (2 * w2 - 50), 1e-9);
}

TEST(SluiceCost, PrefillImposedOnTheBatchIsFreeUnderTheWeightFloor) {
  SluiceInputs in;
  in.input = 6000;
  in.output = 50;
  in.capacity_tokens = 1e9;
  in.decoding = 20;
  in.queued = 5;
  const double attention = 1.5e-6 * 6000 * 3000;
  EXPECT_NEAR(sluice_cost(kP, in).prefill_imposed_ms, 25 * (0.022 * 6020 - 5.5 + attention), 1e-9);
  in.cached = 5990;  // a 10-token tail fits under W: only its attention over the prefix remains
  EXPECT_NEAR(sluice_cost(kP, in).prefill_imposed_ms, 25 * 1.5e-6 * 10 * (5990 + 5), 1e-9);
  in.decoding = 0;
  in.queued = 0;
  in.cached = 0;
  EXPECT_EQ(sluice_cost(kP, in).prefill_imposed_ms, 0);  // an idle endpoint: nobody waits
}

TEST(SluiceCost, KvRiskGrowsFromTheRiskStartAndScalesWithTheBatch) {
  SluiceInputs in;
  in.input = 1000;
  in.output = 1000;
  in.capacity_tokens = 100000;
  in.decoding = 9;
  in.kv_usage = 0.70;  // 0.72 after: below the risk start
  EXPECT_EQ(sluice_cost(kP, in).kv_ms, 0);
  in.kv_usage = 0.88;  // 0.90 after: risk 0.5
  EXPECT_NEAR(sluice_cost(kP, in).kv_ms, 0.25 * 10 * 0.022 * 2000, 1e-9);
  in.kv_usage = 0.99;  // risk 1
  EXPECT_NEAR(sluice_cost(kP, in).kv_ms, 10 * 0.022 * 2000, 1e-9);
  in.decoding = 99;
  EXPECT_NEAR(sluice_cost(kP, in).kv_ms, 100 * 0.022 * 2000, 1e-9);
}

TEST(SluiceCost, AdapterTermIsPassedThrough) {
  SluiceInputs in;
  in.input = 10;
  in.capacity_tokens = 1e6;
  in.adapter_ms = 30;
  EXPECT_EQ(sluice_cost(kP, in).adapter_ms, 30);
  SluiceInputs none = in;
  none.adapter_ms = 0;
  EXPECT_NEAR(sluice_cost(kP, in).total() - 30, sluice_cost(kP, none).total(), 1e-9);
}

// The policy's inputs from the endpoint's own accounting and fresh signals.
TEST(SluicePolicyInputs, OwnAccountingAndExternalLoad) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(1);
  pool.loads[0].in_flight = 5;
  pool.loads[0].prefill_requests = 2;
  pool.loads[0].prefill_tokens = 3000;
  pool.loads[0].decode_tokens = 700;
  pool.loads[0].live_context_tokens = 40000;
  pool.loads[0].in_flight_at_scrape = 5;  // the scrape was taken with the counts of now
  pool.loads[0].prefill_requests_at_scrape = 2;
  pool.signals[0].running = 13;  // 10 from other clients
  pool.signals[0].waiting = 2;   // all ours
  pool.signals[0].kv_capacity_blocks = 10000;
  std::string t(4000, 'x');
  std::vector<Explanation> ex;
  auto v = pool.views();
  p.explain(testing::chat(t, 1000, 100), v, Time{}, ex);
  std::map<std::string_view, double> term;
  for (auto& x : ex[0].terms) term[x.name] = x.value;
  EXPECT_EQ(term["decoding"], 3 + 10);
  EXPECT_EQ(term["queued"], 2);
  EXPECT_EQ(term["queue_tokens"], 3000);
  // The 10 external sequences at the mean context (512 prompt + 256 / 2 output) and mean output / 2.
  EXPECT_EQ(term["kv_read_tokens"], 40000 + 10 * (512 + 128));
  EXPECT_EQ(term["remaining_tokens"], 700 + 10 * 128);
  pool.stale[0] = true;  // stale: own accounting only
  v = pool.views();
  p.explain(testing::chat(t, 1000, 100), v, Time{}, ex);
  term.clear();
  for (auto& x : ex[0].terms) term[x.name] = x.value;
  EXPECT_EQ(term["decoding"], 3);
  EXPECT_EQ(term["kv_read_tokens"], 40000);
}

// Each candidate carries the TTFT its ranking expected there (Candidate::expected_ttft_ms, what the
// drivers compare the TTFT the request got with): the explanation's ttft_ms, the queue's included.
TEST(SluicePolicyInputs, EachCandidateCarriesItsExpectedTtft) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(3);
  for (size_t i = 0; i < 3; ++i) pool.signals[i].kv_capacity_blocks = 10000;
  pool.loads[1].in_flight = 3;  // decoders
  pool.loads[2].in_flight = 4;  // decoders and a queue
  pool.loads[2].prefill_requests = 2;
  pool.loads[2].prefill_tokens = 6000;
  const std::string t(4000, 'x');
  auto v = pool.views();
  std::vector<Candidate> out;
  p.rank(testing::chat(t, 1000, 100), v, Time{}, out);
  std::vector<Explanation> ex;
  p.explain(testing::chat(t, 1000, 100), v, Time{}, ex);
  ASSERT_EQ(out.size(), 3u);
  std::map<size_t, double> ttft;
  for (auto& x : ex)
    for (auto& term : x.terms)
      if (term.name == "ttft_ms") ttft[x.endpoint] = term.value;
  for (const Candidate& c : out) {
    EXPECT_GT(c.expected_ttft_ms, 0) << c.endpoint;
    EXPECT_NEAR(c.expected_ttft_ms, ttft.at(c.endpoint), 1e-3 * ttft.at(c.endpoint)) << c.endpoint;
    EXPECT_NEAR(ttft_estimate_ratio(c.expected_ttft_ms, 2.0 * c.expected_ttft_ms), 2.0, 1e-9);
  }
  EXPECT_LT(ttft.at(0), ttft.at(1));  // the decoders' step in progress
  EXPECT_LT(ttft.at(1), ttft.at(2));  // and the queue ahead
  EXPECT_LT(ttft_estimate_ratio(Candidate{}.expected_ttft_ms, 10.0), 0);  // no estimate
  EXPECT_LT(ttft_estimate_ratio(-1.0, 10.0), 0);  // (the access log's "none")
}

// Other clients' requests are the scrape's less what was ours when it was taken. Three of our
// requests were waiting at the scrape and have passed their first token since: they run now, and
// none of them is another client's waiting request (a phantom prefill queued ahead).
TEST(SluicePolicyInputs, OwnRequestsPastFirstTokenSinceTheScrapeAreNotExternalWaiting) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(1);
  pool.signals[0].kv_capacity_blocks = 10000;
  pool.loads[0].in_flight = 4;
  pool.loads[0].prefill_requests = 0;  // all four past first token now
  pool.loads[0].in_flight_at_scrape = 4;
  pool.loads[0].prefill_requests_at_scrape = 3;  // three of them were waiting then
  pool.signals[0].waiting = 3;
  pool.signals[0].running = 1;
  std::string t(4000, 'x');
  const auto terms = [&] {
    std::vector<Explanation> ex;
    auto v = pool.views();
    p.explain(testing::chat(t, 1000, 100), v, Time{}, ex);
    std::map<std::string, double> term;
    for (auto& x : ex[0].terms) term[std::string(x.name)] = x.value;
    return term;
  };
  auto term = terms();
  EXPECT_EQ(term["queued"], 0);
  EXPECT_EQ(term["queue_tokens"], 0);
  EXPECT_EQ(term["decoding"], 4);
  // Two more waiting and one more running than ours at the scrape: those are other clients'.
  pool.signals[0].waiting = 5;
  pool.signals[0].running = 2;
  term = terms();
  EXPECT_EQ(term["queued"], 2);
  EXPECT_EQ(term["queue_tokens"], 2 * 512);  // at the mean prompt
  EXPECT_EQ(term["decoding"], 4 + 1);
  // The engine counts a request in its prefill step as running: an own request waiting at the
  // scrape may show as running, and the total less ours is what belongs to others.
  pool.signals[0].waiting = 1;
  pool.signals[0].running = 3;
  term = terms();
  EXPECT_EQ(term["queued"], 0);
  EXPECT_EQ(term["decoding"], 4);
}

// The head of the own prefill queue: its share done is the time since it became the head over the
// time its prefill takes alone beside the decoders (the TTFT formula with nothing ahead).
TEST(SluiceHeadProgress, IsTheElapsedShareOfTheHeadsPrefillTime) {
  // 4000 tokens alone: max(W, beta x 4000) + C0 + eps x pairs = 88 + 2 + 1.5e-6 x 8e6 = 102 ms.
  const double pairs = 4000.0 * 2000.0;
  const double alone = 0.022 * 4000 + 2.0 + 1.5e-6 * pairs;
  EXPECT_NEAR(sluice_head_progress(kP, 4000, pairs, 0, 0, alone / 4), 0.25, 1e-12);
  EXPECT_NEAR(sluice_head_progress(kP, 4000, pairs, 0, 0, alone / 2), 0.5, 1e-12);
  EXPECT_EQ(sluice_head_progress(kP, 4000, pairs, 0, 0, 3 * alone), 1.0);  // done: never more than the head
  // Decoders beside it slow it down: each step also runs them and reads their KV.
  const double with_decode = 0.022 * (4000 + 50) + 2.0 + 0.02 * 50 + 5e-5 * 100000 + 1.5e-6 * pairs;
  EXPECT_NEAR(sluice_head_progress(kP, 4000, pairs, 50, 100000, with_decode / 2), 0.5, 1e-12);
  EXPECT_EQ(sluice_head_progress(kP, 0, 0, 0, 0, 50), 0.0);     // no head
  EXPECT_EQ(sluice_head_progress(kP, 4000, pairs, 0, 0, 0), 0.0);  // just became the head
  EXPECT_EQ(sluice_head_progress(kP, 4000, pairs, 0, 0, -5), 0.0);
}

// The policy subtracts the head's done share from the queue ahead (Q and Q2).
TEST(SluicePolicyInputs, TheQueueAheadLosesTheHeadsProgress) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(1);
  pool.loads[0].in_flight = 2;
  pool.loads[0].prefill_requests = 2;
  pool.loads[0].prefill_tokens = 5000;  // the head (4000) and one behind it (1000)
  pool.loads[0].prefill_pairs = 4000.0 * 2000.0 + 1000.0 * 500.0;
  pool.loads[0].prefill_head_tokens = 4000;
  pool.loads[0].prefill_head_pairs = 4000.0 * 2000.0;
  pool.loads[0].prefill_head_since = std::chrono::milliseconds(100);
  pool.signals[0].kv_capacity_blocks = 10000;
  std::string t(4000, 'x');
  const auto terms_at = [&](Time now) {
    std::vector<Explanation> ex;
    auto v = pool.views();
    p.explain(testing::chat(t, 1000, 100), v, now, ex);
    std::map<std::string, double> term;
    for (auto& x : ex[0].terms) term[std::string(x.name)] = x.value;
    return term;
  };
  EXPECT_EQ(terms_at(std::chrono::milliseconds(100))["queue_tokens"], 5000);  // it has just become the head
  const double done = sluice_head_progress(SluiceParams{}, 4000, 4000.0 * 2000.0, 0, 0, 30.0);
  ASSERT_GT(done, 0.2);
  ASSERT_LT(done, 0.4);
  EXPECT_NEAR(terms_at(std::chrono::milliseconds(130))["queue_tokens"], 5000 - done * 4000, 1e-6);
  EXPECT_EQ(terms_at(std::chrono::seconds(5))["queue_tokens"], 1000);  // the head is done, the rest is not
}

// A 6k-token prefix cached on endpoint 1; endpoint 0 runs a batch of the same size and context
// without it. Requests stay on 1 while its extra decoders cost less than a cold prefill in 0's
// batch, then the prefix is copied to 0; once both hold it, the smaller batch wins.
void set_batch(FakePool& pool, size_t e, int64_t n) {
  pool.loads[e].in_flight = n;
  pool.loads[e].live_context_tokens = n * 6200;
  pool.loads[e].decode_tokens = n * 100;
}

TEST(SluicePolicyBehaviour, HotPrefixIsCopiedWhenItsEndpointIsCrowdedPlainMs) {
  SluicePolicy p(kPlain, PoolKind::chat);
  FakePool pool(2);
  p.on_endpoints_reset(2);
  const std::string t = std::string(24000, 'h') + std::string(400, 'q');  // a 6000-token prefix + question
  auto req = testing::chat(t, -1, 200);
  p.on_dispatch(req, 1, Time{});
  auto first = [&] { return testing::rank(p, pool, req)[0].endpoint; };
  set_batch(pool, 0, 20);
  set_batch(pool, 1, 20);
  EXPECT_EQ(first(), 1u);
  set_batch(pool, 1, 40);
  EXPECT_EQ(first(), 1u);
  set_batch(pool, 1, 80);
  EXPECT_EQ(first(), 0u);
  p.on_dispatch(req, 0, Time{});
  EXPECT_EQ(first(), 0u);
  set_batch(pool, 0, 100);
  EXPECT_EQ(first(), 1u);
}

// Decode priced by its lag behind the SLO pace: the prefix stays on its endpoint while the batch
// there keeps the pace, and is copied once it falls behind.
TEST(SluicePolicyBehaviour, HotPrefixIsCopiedWhenItsEndpointFallsBehindTheSloLagPriced) {
  SluicePolicy p(kLag, PoolKind::chat);
  FakePool pool(2);
  p.on_endpoints_reset(2);
  const std::string t = std::string(24000, 'h') + std::string(400, 'q');
  auto req = testing::chat(t, -1, 200);
  p.on_dispatch(req, 1, Time{});
  auto first = [&] { return testing::rank(p, pool, req)[0].endpoint; };
  set_batch(pool, 0, 20);
  set_batch(pool, 1, 80);  // 80 x 6.2k tokens: ~34 ms a token, within the pace
  EXPECT_EQ(first(), 1u);
  set_batch(pool, 1, 150);  // ~56 ms a token: behind it
  EXPECT_EQ(first(), 0u);
  p.on_dispatch(req, 0, Time{});
  set_batch(pool, 1, 20);  // demand fell: both hold it, both keep the pace; the cheaper TTFT wins
  set_batch(pool, 0, 60);
  EXPECT_EQ(first(), 1u);
}

// n samples of one 8k-token prompt inside one scrape interval (fresh, unchanged signals), the
// prompt warm on endpoint 1 of 4: a small burst stays together there (one prefill, batched
// decode); a large one spills over, the warm endpoint keeping the largest share.
std::map<size_t, int> burst_of(int n, const SluiceParams& params = {}) {
  SluicePolicy p(params, PoolKind::chat);
  FakePool pool(4);
  p.on_endpoints_reset(4);
  std::string t(32000, 'b');
  auto req = testing::chat(t, -1, 20);
  p.on_dispatch(req, 1, Time{});
  std::map<size_t, int> count;
  for (int i = 0; i < n; ++i) {
    auto out = testing::rank(p, pool, req);
    pool.dispatch(out[0].endpoint, req, out[0].predicted_cached_tokens);
    p.on_dispatch(req, out[0].endpoint, Time{});
    count[out[0].endpoint]++;
  }
  return count;
}

TEST(SluicePolicyBehaviour, BurstOfOnePromptStaysTogetherWhileTheWarmEndpointAbsorbsIt) {
  // Lag-priced: together while the warm endpoint keeps the SLO pace and its queue is below the limit
  // (64 not yet past first token: FakePool never starts them), then the next endpoint takes the rest.
  auto small = burst_of(8, kLag);
  EXPECT_EQ(small[1], 8);
  auto large = burst_of(200, kLag);
  EXPECT_GE(large[1], 60);
  EXPECT_LE(large[1], 130);
  EXPECT_GE(large.size(), 2u);
  // The default (SLO-priced): 8 stay together.
  EXPECT_EQ(burst_of(8)[1], 8);
  // Decode in plain ms: the decoders' KV reads make copies dearer from the start; 7 of 8 stay
  // (the 8th makes one copy: 8 in no time forecast 16 more over the copy credit's 4 s), 200 spread
  // over all four.
  EXPECT_GE(burst_of(8, kPlain)[1], 7);
  auto plain = burst_of(200, kPlain);
  EXPECT_EQ(plain.size(), 4u);
  EXPECT_GE(plain[1], 40);
  for (size_t e : {0u, 2u, 3u}) EXPECT_GE(plain[e], 20) << e;
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(SluiceCost, QueuedPrefillAttentionCountsInTtft) {
  SluiceInputs in;
  in.input = 100;
  in.output = 10;
  in.capacity_tokens = 1e6;
  in.queue_tokens = 100000;  // a 100k-token document ahead: its attention dwarfs its linear layers
  const double without = sluice_cost(kP, in).ttft_ms;
  in.queue_pairs = 100000.0 * 50000.0;
  EXPECT_NEAR(sluice_cost(kP, in).ttft_ms - without, 1.5e-6 * 100000.0 * 50000.0, 1e-6);
}

TEST(SluiceSlo, ItlIsTheStepItJoinsStretchedByPrefillDutyPlusItsOwnPrefill) {
  SluiceInputs in;
  in.input = 2000;
  in.cached = 2000;
  in.output = 100;
  in.decoding = 50;
  in.kv_read = 50 * 4000;
  in.capacity_tokens = 1e9;
  const double step = engine_step(51, 50 * 4000 + 2050);
  EXPECT_NEAR(sluice_itl_ms(kP, in), step, 1e-9);
  in.prefill_duty = 0.5;
  EXPECT_NEAR(sluice_itl_ms(kP, in), 2 * step, 1e-9);
  in.prefill_duty = 5;  // capped at 0.9
  EXPECT_NEAR(sluice_itl_ms(kP, in), 10 * step, 1e-9);
  in.prefill_duty = 0;
  in.cached = 0;  // cold: its 2000-token prefill lands in the batch's steps
  EXPECT_NEAR(sluice_itl_ms(kP, in), step + (0.022 * 2050 - 5.5 + 1.5e-6 * 2000 * 1000) / 100, 1e-9);
}

// Two endpoints: the request's 2,000-token prefix is cached at endpoint 1, whose batch (100
// sequences of 9k context) is past the ITL SLO; endpoint 0 (60 of them) is cold and under it.
// terms[i]: the policy's explanation of endpoint i.
struct WarmPastThePace {
  SluicePolicy p;
  FakePool pool{2};
  std::string text = std::string(8000, 'w');  // req's text is a view of it
  PickRequest req = testing::chat(text, -1, 100);
  std::map<std::string_view, double> terms[2];  // names are static strings
  explicit WarmPastThePace(const SluiceParams& params) : p(params, PoolKind::chat) {
    p.on_endpoints_reset(2);
    p.on_dispatch(req, 1, Time{});
    pool.loads[1].in_flight = 100;
    pool.loads[1].live_context_tokens = 100 * 9000;
    pool.loads[1].decode_tokens = 100 * 20;
    pool.loads[0].in_flight = 60;
    pool.loads[0].live_context_tokens = 60 * 9000;
    pool.loads[0].decode_tokens = 60 * 20;
    std::vector<Explanation> ex;
    auto v = pool.views();
    p.explain(req, v, Time{}, ex);
    for (size_t i = 0; i < 2; ++i)
      for (auto& x : ex[i].terms) terms[i][x.name] = x.value;
  }
};

TEST(SluiceSlo, MissingTheSloRanksLastWhateverTheCost) {
  SluiceInputs in;
  in.input = 1000;
  in.output = 100;
  in.capacity_tokens = 1e9;
  SluiceCost c = sluice_cost(kP, in);
  EXPECT_TRUE(sluice_meets_slo(kP, in, c));
  in.decoding = 100;
  in.kv_read = 100 * 9000;  // 45 ms of KV read per step: past the 50 ms ITL SLO
  c = sluice_cost(kP, in);
  EXPECT_GT(sluice_itl_ms(kP, in), 50);
  EXPECT_FALSE(sluice_meets_slo(kP, in, c));
  in = SluiceInputs{};
  in.input = 1000;
  in.output = 100;
  in.capacity_tokens = 1e9;
  in.queue_tokens = 60000;  // > 1 s of prefill queued ahead
  c = sluice_cost(kP, in);
  EXPECT_GT(c.ttft_ms, 1000);
  EXPECT_FALSE(sluice_meets_slo(kP, in, c));

  // In the policy, with the hard tier (miss_price 0): an endpoint holding the prefix whose batch is
  // past the ITL SLO loses to a cold one where the request meets it, although its cost (no prefill)
  // is lower in plain ms.
  SluiceParams hard = kPlain;
  hard.miss_price = 0;
  WarmPastThePace w(hard);
  ASSERT_LT(w.terms[1]["cost_ms"], w.terms[0]["cost_ms"]);
  ASSERT_EQ(w.terms[1]["meets_slo"], 0);
  ASSERT_EQ(w.terms[0]["meets_slo"], 1);
  EXPECT_EQ(testing::rank(w.p, w.pool, w.req)[0].endpoint, 0u);
}

// The default (miss_price 0.25): a miss costs a quarter of the request's latency budget,
// ttft_slo_ms + O x itl_slo_ms, on top of the endpoint's cost; the cheaper endpoint where it misses
// wins only when its cost is lower by more than that.
TEST(SluiceSlo, AMissCostsAQuarterOfTheRequestsSloBudget) {
  EXPECT_EQ(SluiceParams{}.miss_price, 0.25);
  for (const double budget_share : {0.25, 0.01}) {
    SluiceParams params = kPlain;
    params.miss_price = budget_share;
    WarmPastThePace w(params);  // O = 100: the budget is 1000 + 100 x 50 ms
    auto& t0 = w.terms[0];
    auto& t1 = w.terms[1];
    ASSERT_EQ(t1["meets_slo"], 0);
    ASSERT_EQ(t0["meets_slo"], 1);
    const double miss = budget_share * (1000 + 100 * 50);
    const auto ranked = testing::rank(w.p, w.pool, w.req);
    ASSERT_EQ(ranked.size(), 2u);
    for (const Candidate& c : ranked)
      EXPECT_NEAR(c.score, c.endpoint == 1 ? -t1["cost_ms"] - miss : -t0["cost_ms"], 1e-6) << budget_share;
    // Endpoint 1 (warm, past the pace) is cheaper by less than a quarter of the budget, by more
    // than a hundredth.
    const double advantage = t0["cost_ms"] - t1["cost_ms"];
    ASSERT_GT(advantage, 0.01 * 6000);
    ASSERT_LT(advantage, 0.25 * 6000);
    EXPECT_EQ(ranked[0].endpoint, budget_share == 0.25 ? 0u : 1u) << budget_share;
  }
}

// Where the request misses its SLO, the miss price stands for it: its own decode lag (O x the lag
// of the batch it would join) is not charged on top; the lag it adds to the others still is. Where
// it meets the SLO nothing changes.
TEST(SluiceSlo, WhereTheRequestMissesItsOwnDecodeLagIsNotChargedOnTopOfTheMiss) {
  SluiceParams hard;  // lag-priced (decode_price 2), every term charged (the hard tier)
  hard.miss_price = 0;
  WarmPastThePace all(hard), priced(SluiceParams{});
  auto& a1 = all.terms[1];
  auto& p1 = priced.terms[1];
  ASSERT_EQ(p1["meets_slo"], 0);
  ASSERT_EQ(priced.terms[0]["meets_slo"], 1);
  ASSERT_GT(a1["decode_ms"], 100);  // endpoint 1's batch is past the pace: 100 tokens behind it
  EXPECT_EQ(p1["decode_ms"], 0);
  EXPECT_EQ(p1["interference_ms"], a1["interference_ms"]);
  EXPECT_EQ(p1["ttft_ms"], a1["ttft_ms"]);
  EXPECT_NEAR(p1["cost_ms"], a1["cost_ms"] - a1["decode_ms"], 1e-6);
  for (const char* term : {"decode_ms", "cost_ms"}) EXPECT_EQ(priced.terms[0][term], all.terms[0][term]) << term;
}

}  // namespace
}  // namespace sluice

// ---- decode priced by its expected lag behind the SLO's pace (decode_price 2), and evictions ----

namespace sluice {
namespace {

SluiceParams slo_priced() {
  SluiceParams p;
  p.decode_price = 2;
  return p;
}
const SluiceParams kSlo = slo_priced();

TEST(SluiceSloPrice, IsTheDefault) { EXPECT_EQ(SluiceParams{}.decode_price, 2); }

TEST(SluiceSloPrice, ExpectedExcessIsTheLagOfAnUncertainItl) {
  // Certain: the plain excess.
  EXPECT_EQ(sluice_expected_excess(60, 0, 50), 10);
  EXPECT_EQ(sluice_expected_excess(40, 0, 50), 0);
  // At the limit: sd x phi(0) = sd / sqrt(2 pi).
  EXPECT_NEAR(sluice_expected_excess(50, 4, 50), 4 / std::sqrt(2 * M_PI), 1e-12);
  // Far past it: the plain excess; far below: nothing.
  EXPECT_NEAR(sluice_expected_excess(90, 4, 50), 40, 1e-9);
  EXPECT_LT(sluice_expected_excess(10, 4, 50), 1e-12);
  // Below the limit it is positive and grows as the mean nears it.
  EXPECT_GT(sluice_expected_excess(46, 4, 50), 0);
  EXPECT_LT(sluice_expected_excess(42, 4, 50), sluice_expected_excess(46, 4, 50));
  // P(X > limit): a half at the limit, 0.8413 one sd past it.
  EXPECT_NEAR(sluice_excess_probability(50, 4, 50), 0.5, 1e-12);
  EXPECT_NEAR(sluice_excess_probability(54, 4, 50), 0.841344746, 1e-8);
  EXPECT_EQ(sluice_excess_probability(49, 0, 50), 0);
  // The derivative of the expected excess is the probability of excess.
  const double h = 1e-5;
  EXPECT_NEAR((sluice_expected_excess(47 + h, 3, 50) - sluice_expected_excess(47 - h, 3, 50)) / (2 * h),
              sluice_excess_probability(47, 3, 50), 1e-6);
}

TEST(SluiceSloPrice, BatchItlVariesLikeAPoissonCountOfSequences) {
  const SluiceItl none = sluice_batch_itl(kSlo, 0, 0, 0);
  EXPECT_NEAR(none.mean_ms, engine_step(0, 0), 1e-12);
  EXPECT_EQ(none.sd_ms, 0);
  // 64 sequences of 6k context: sd = sqrt(64) x (the step of one more sequence at the mean context).
  const SluiceItl b = sluice_batch_itl(kSlo, 64, 64 * 6000, 0);
  EXPECT_NEAR(b.mean_ms, engine_step(64, 64 * 6000), 1e-12);
  EXPECT_NEAR(b.sd_ms, 8 * (engine_step(65, 65 * 6000) - engine_step(64, 64 * 6000)), 1e-9);
  EXPECT_NEAR(b.sd_ms, 8 * (0.02 + 5e-5 * 6000), 1e-9);  // under the weight floor: no beta
  // The prefill duty stretches both.
  const SluiceItl s = sluice_batch_itl(kSlo, 64, 64 * 6000, 0.2);
  EXPECT_NEAR(s.mean_ms, b.mean_ms / 0.8, 1e-9);
  EXPECT_NEAR(s.sd_ms, b.sd_ms / 0.8, 1e-9);
}

// A 20,000-token agent context (150 output tokens) joining 8 decoders of the same length: ~16 ms a
// token, far under the 50 ms pace.
SluiceInputs long_context_joining_eight() {
  SluiceInputs in;
  in.input = 20000;
  in.output = 150;
  in.capacity_tokens = 1e9;
  in.decoding = 8;
  in.kv_read = 8 * 20000;
  in.remaining = 1e9;
  return in;
}

TEST(SluiceSloPrice, DecodeFarFromThePaceCostsNothingNearItItsExpectedLag) {
  SluiceInputs in = long_context_joining_eight();
  const SluiceCost c = sluice_cost(kSlo, in);
  EXPECT_LT(c.decode_ms, 1e-9);
  EXPECT_LT(c.interference_ms, 1e-9);
  EXPECT_GT(sluice_cost(kPlain, in).decode_ms, 150 * 15);  // plain ms would count every one of them
  // Near the pace: O x the expected excess of the batch it joins, and the batch's increase.
  in.decoding = 40;
  in.kv_read = 40 * 20000;
  const SluiceItl w = sluice_batch_itl(kSlo, 41, 40 * 20000 + 20075, 0);
  const SluiceItl wo = sluice_batch_itl(kSlo, 40, 40 * 20000, 0);
  ASSERT_GT(w.mean_ms, 45);
  const double lag1 = sluice_expected_excess(w.mean_ms, w.sd_ms, 50);
  const double lag0 = sluice_expected_excess(wo.mean_ms, wo.sd_ms, 50);
  EXPECT_GT(lag1, lag0);
  const SluiceCost n = sluice_cost(kSlo, in);
  EXPECT_NEAR(n.decode_ms, 150 * lag1, 1e-9);
  EXPECT_NEAR(n.interference_ms, 40 * 150 * (lag1 - lag0), 1e-6);
}

// The requests that arrive while it decodes (lambda x O x its ITL of them) each wait one step of
// the batch longer by what it adds to the step, in their TTFT: counted in plain ms even far under
// the pace, where the lag terms are 0; nothing without arrivals.
TEST(SluiceSloPrice, ArrivalsDuringTheDecodeWaitALongerStep) {
  SluiceInputs in = long_context_joining_eight();
  EXPECT_LT(sluice_cost(kSlo, in).interference_ms, 1e-9);  // no arrivals: the lag alone, 0 here
  in.arrivals_per_ms = 0.002;                               // 2 requests/s to this endpoint
  const double k1 = 8 * 20000 + 20000 + 75;
  const SluiceItl w = sluice_batch_itl(kSlo, 9, k1, 0);
  const double step_increase = engine_step(9, k1) - engine_step(8, 8 * 20000);
  ASSERT_GT(step_increase, 1.0);  // its 20k-token context read every step: ~1 ms
  const SluiceCost c = sluice_cost(kSlo, in);
  EXPECT_NEAR(c.interference_ms, 0.002 * 150 * w.mean_ms * step_increase, 1e-6);
  EXPECT_LT(c.decode_ms, 1e-9);  // its own tokens are still under the pace
  // Twice the arrivals, twice the price; a short context adds less to the step and costs less.
  in.arrivals_per_ms = 0.004;
  EXPECT_NEAR(sluice_cost(kSlo, in).interference_ms, 2 * c.interference_ms, 1e-6);
  in.input = 200;
  EXPECT_LT(sluice_cost(kSlo, in).interference_ms, c.interference_ms / 4);
}

// A 6000-token cold prefill (50 output tokens) joining 20 decoders with 50 tokens left each and 5
// queued requests, KV unbounded; kColdPrefillStall is the time it adds to the steps it shares.
SluiceInputs cold_prefill_into_a_short_batch() {
  SluiceInputs in;
  in.input = 6000;
  in.output = 50;
  in.capacity_tokens = 1e9;
  in.decoding = 20;
  in.queued = 5;
  in.remaining = 25 * 50;  // 50 tokens left each: about 100 tokens each in all
  return in;
}
const double kColdPrefillStall = 0.022 * 6020 - 5.5 + 1.5e-6 * 6000 * 3000;

TEST(SluiceSloPrice, PrefillStallCostsTheQueueItsMsAndTheDecodersOnlyTheirLag) {
  SluiceInputs in = cold_prefill_into_a_short_batch();
  const double stall = kColdPrefillStall;
  // 20 short decoders far under the pace: only the 5 queued requests pay the stall.
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, 5 * stall, 1e-9);
  // Requests arriving during the stall (lambda x stall of them) wait stall / 2 each.
  in.arrivals_per_ms = 0.01;
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, (5 + 0.01 * stall / 2) * stall, 1e-9);
  in.arrivals_per_ms = 0;
  // Decoders near the pace pay the expected lag the stall adds, spread over their ~100 tokens each.
  in.decoding = 100;
  in.kv_read = 100 * 8000;
  in.remaining = 105 * 50;
  const double stall2 = 0.022 * 6100 - 5.5 + 1.5e-6 * 6000 * 3000;
  const SluiceItl wo = sluice_batch_itl(kSlo, 105, 100 * 8000, 0);
  const double shift = sluice_expected_excess(wo.mean_ms + stall2 / 100, wo.sd_ms, 50) -
                       sluice_expected_excess(wo.mean_ms, wo.sd_ms, 50);
  ASSERT_GT(shift, 0.1);
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, 5 * stall2 + 100 * 100 * shift, 1e-6);
  // In plain ms every member of the batch pays the whole stall.
  EXPECT_NEAR(sluice_cost(kPlain, in).prefill_imposed_ms, 105 * stall2, 1e-6);
}

TEST(SluiceSloPrice, AFullKvMakesTheWholeBatchPayTheStall) {
  // The stall also holds the batch's KV: past what the queue and the decoders' lag pay, the batch
  // pays u^3 x B x stall (u = KV usage), all of it when the KV is full.
  SluiceInputs in = cold_prefill_into_a_short_batch();
  const double stall = kColdPrefillStall;
  // Room in the KV: 0.3^3 x 25 = 0.675 < the 5 queued requests' price, which stays.
  in.kv_usage = 0.3;
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, 5 * stall, 1e-9);
  // 0.85 full: 0.614 x 25 = 15.4 requests' worth of the stall.
  in.kv_usage = 0.85;
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, 0.85 * 0.85 * 0.85 * 25 * stall, 1e-9);
  // Full: the plain-ms price, every member of the batch.
  in.kv_usage = 1.0;
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, 25 * stall, 1e-9);
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, sluice_cost(kPlain, in).prefill_imposed_ms, 1e-9);
}

// The work price (decode_bound_price 1, the default): as the pool nears the ITL SLO's pace (phi, the
// pool's mean batch ITL over the SLO), the stall is charged to the batch at w x B x stall and the
// slower steps to the others' tokens at w x min(R, B O) x the step increase, w = e x min(1, phi^2),
// e = the share of the step that grows with the batch.
TEST(SluiceWorkPrice, TheStallCostsTheBatchByItsDecodeShareAsThePoolNearsThePace) {
  EXPECT_EQ(SluiceParams{}.decode_bound_price, 1);
  SluiceInputs in = cold_prefill_into_a_short_batch();
  const double stall = kColdPrefillStall;
  in.pace_share = 1;
  // 25 sequences reading no KV: the step is the weight floor, 2 + 5.5 + 0.5 ms, of which only
  // delta B = 0.5 ms grows with the batch: e = 0.0625, 1.56 requests' worth < the 5 queued.
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, 5 * stall, 1e-9);
  // Long contexts: 25 x 20k tokens read each step, gamma K = 25 ms of a 33 ms step.
  in.kv_read = 25 * 20000;
  const double grows = 0.02 * 25 + 5e-5 * 25 * 20000;
  const double e = grows / (2 + 5.5 + grows);
  EXPECT_NEAR(e, 0.773, 1e-3);
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, e * 25 * stall, 1e-9);
  // phi^2: at 0.7 of the pace about half of it; past the pace no more than at it.
  in.pace_share = 0.7;
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, e * 0.49 * 25 * stall, 1e-9);
  in.pace_share = 1.4;
  EXPECT_NEAR(sluice_cost(kSlo, in).prefill_imposed_ms, e * 25 * stall, 1e-9);
  // A pool far from the pace, or the price off: the queued requests and the decoders' lag (33 ms
  // under a 50 ms pace: little).
  in.pace_share = 0;
  const double slo_priced = sluice_cost(kSlo, in).prefill_imposed_ms;
  EXPECT_GT(slo_priced, 5 * stall);
  EXPECT_LT(slo_priced, e * 25 * stall / 3);
  SluiceParams off = kSlo;
  off.decode_bound_price = 0;
  in.pace_share = 1;
  EXPECT_EQ(sluice_cost(off, in).prefill_imposed_ms, slo_priced);
}

TEST(SluiceWorkPrice, TheOthersTokensPayTheSlowerStepByTheSameWeight) {
  // 24 sequences of 20k context with 100 tokens left each, far under the pace (33 ms): the lag
  // prices joining them at 0.
  SluiceInputs in;
  in.input = 2000;
  in.cached = 2000;
  in.output = 100;
  in.capacity_tokens = 1e9;
  in.decoding = 24;
  in.kv_read = 24 * 20000;
  in.remaining = 24 * 100;
  EXPECT_LT(sluice_cost(kSlo, in).interference_ms, 1e-9);
  const double B = 24;
  const double step0 = 2 + 5.5 + 0.02 * B + 5e-5 * in.kv_read;
  const double with = 2 + 5.5 + 0.02 * (B + 1) + 5e-5 * (in.kv_read + 2000 + 50);
  const double e = (0.02 * B + 5e-5 * in.kv_read) / step0;
  for (const double phi : {0.3, 0.8, 1.0}) {
    in.pace_share = phi;
    const double w = e * std::min(1.0, phi * phi);
    // min(R, B O) = 2400 of the others' tokens, each a step slower by what this request adds.
    EXPECT_NEAR(sluice_cost(kSlo, in).interference_ms, w * 2400 * (with - step0), 1e-6) << phi;
  }
  // The bound is min(R, B O): with 10 tokens left each, only 240 of them are slowed.
  in.remaining = 240;
  EXPECT_NEAR(sluice_cost(kSlo, in).interference_ms, e * 240 * (with - step0), 1e-6);
  SluiceParams off = kSlo;
  off.decode_bound_price = 0;
  EXPECT_LT(sluice_cost(off, in).interference_ms, 1e-9);
  // It is in the later turns' price too: followup_ms counts the interference.
  in.followups = 2;
  const SluiceCost c = sluice_cost(kSlo, in);
  EXPECT_GT(c.followup_ms, 2 * c.interference_ms);
}

TEST(SluiceEviction, BlocksPastTheFreeCacheEvictOthersAtThePoolsReuse) {
  SluiceInputs in;
  in.input = 4000;
  in.output = 100;
  in.capacity_tokens = 1e9;
  in.reuse = 0.4;
  in.cache_free_tokens = 1e6;  // room for it: nothing evicted
  EXPECT_EQ(sluice_cost(kP, in).eviction_ms, 0);
  in.cache_free_tokens = 1000;  // 3100 of its 4100 tokens evict prefixes found again 40% of the time
  EXPECT_NEAR(sluice_cost(kP, in).eviction_ms, 0.022 * 3100 * 0.4, 1e-12);
  in.cached = 3000;  // warm: only its 1000 uncached tokens and the output are allocated
  EXPECT_NEAR(sluice_cost(kP, in).eviction_ms, 0.022 * 100 * 0.4, 1e-12);
  in.reuse = 0;  // nothing is ever found cached: evicting costs nothing
  EXPECT_EQ(sluice_cost(kP, in).eviction_ms, 0);
  SluiceParams off = plain_ms();
  off.eviction_price = 0;
  in.reuse = 0.4;
  EXPECT_EQ(sluice_cost(off, in).eviction_ms, 0);
  EXPECT_NEAR(sluice_cost(kP, in).total() - sluice_cost(off, in).total(), 0.022 * 100 * 0.4, 1e-9);
}

// The policy's inputs to the eviction term: the free room of each endpoint's learned prefix LRU
// (capacity from cache_config_info), and the pool's share of input tokens predicted cached.
TEST(SluiceEviction, FreeRoomAndReuseComeFromThePrefixIndexAndTheOwnAccounting) {
  SluicePolicy p({}, PoolKind::chat);
  FakePool pool(2);
  p.on_endpoints_reset(2);
  for (auto& s : pool.signals) s.kv_capacity_blocks = 1000, s.block_size = 16;
  auto term = [&](const PickRequest& r, size_t e, std::string_view name, Time now) {
    std::vector<Explanation> ex;
    auto v = pool.views();
    p.explain(r, v, now, ex);
    for (auto& x : ex[e].terms)
      if (x.name == name) return x.value;
    return -1.0;
  };
  const std::string a(64 * 600, 'a');  // 600 blocks of 16 tokens
  auto ra = testing::chat(a, 9600, 0);
  EXPECT_EQ(term(ra, 0, "eviction_ms", Time{}), 0);  // no reuse seen yet
  p.on_dispatch(ra, 0, Time{});
  // Half of the input tokens dispatched in the next second were found cached.
  pool.loads[0].input_tokens_total = 40000;
  pool.loads[0].predicted_cached_tokens_total = 20000;
  term(ra, 0, "eviction_ms", Time{} + std::chrono::seconds(1));
  const double h = 0.5 * 1000.0 / 3000.0;  // one 1 s step of the 2 s average toward 0.5
  const std::string b(64 * 600, 'b');
  auto rb = testing::chat(b, 9600, 0);
  // Endpoint 0 holds a's blocks (600 and the chat's framing) of 1000: b's 9600 tokens evict what does
  // not fit in the rest; endpoint 1 is empty.
  const double held = static_cast<double>(p.prefix().index().entries(0));
  ASSERT_GE(held, 600);
  ASSERT_LT(held, 700);
  // (its output: no bound given, the default 256 tokens)
  EXPECT_NEAR(term(rb, 0, "eviction_ms", Time{} + std::chrono::seconds(1)), 0.022 * (9600 + 256 - (1000 - held) * 16) * h, 1e-9);
  EXPECT_EQ(term(rb, 1, "eviction_ms", Time{} + std::chrono::seconds(1)), 0);
  EXPECT_EQ(term(ra, 0, "eviction_ms", Time{} + std::chrono::seconds(1)), 0);  // a is cached there
}

// followup_ms: the later turns that will extend this context, each at this endpoint's decode and
// interference and one step of its batch before its first token; g from the continuation share.
TEST(SluiceCost, FollowupsPayTheEndpointsDecodeAndOneStepEach) {
  EXPECT_EQ(sluice_followups(0), 0);
  EXPECT_NEAR(sluice_followups(0.5), 0.25 / 0.75, 1e-12);
  EXPECT_NEAR(sluice_followups(1.0), 0.95 * 0.95 / (1 - 0.95 * 0.95), 1e-12) << "c is capped at 0.95";
  EXPECT_EQ(sluice_followups(-1), 0);
  SluiceInputs in;
  in.input = 2000;
  in.cached = 500;
  in.output = 100;
  in.capacity_tokens = 432000;
  in.decoding = 30;
  in.kv_read = 300000;
  in.remaining = 3000;
  in.queue_tokens = 4000;  // the follow-ups' step has no queue ahead and nothing uncached
  const SluiceCost none = sluice_cost(kPlain, in);
  EXPECT_EQ(none.followup_ms, 0);
  in.followups = 3;
  const SluiceCost c = sluice_cost(kPlain, in);
  // One step of the batch, max(W, beta D) + C0 + delta D + gamma K, after the rest of the step in
  // progress when it arrives (half of one).
  const double step = std::max(5.5, 0.022 * 30) + 2 + 0.02 * 30 + 5e-5 * 300000;
  EXPECT_NEAR(c.followup_ms, 3 * (none.decode_ms + none.interference_ms + 1.5 * step), 1e-9);
  EXPECT_GT(none.decode_ms + none.interference_ms, 0);
  EXPECT_NEAR(c.total(), none.total() + c.followup_ms, 1e-9);
  // The other terms are this request's own, unchanged.
  EXPECT_EQ(c.ttft_ms, none.ttft_ms);
  EXPECT_EQ(c.prefill_imposed_ms, none.prefill_imposed_ms);
  // No output (an embedding): nothing follows.
  in.output = 0;
  EXPECT_EQ(sluice_cost(kPlain, in).followup_ms, 0);
}

// Agent sessions at light load (kind 1 of the hard suite's failures): a 20k-token context warm on
// endpoint 1 with 8 decoders there, endpoint 0 idle. Plain ms copies the context to the idle endpoint
// to save decode time no SLO needs (paying a cold prefill in TTFT); SLO-priced, it stays warm.
TEST(SluicePolicyBehaviour, LongContextStaysWarmWhileTheBatchKeepsThePaceSloPriced) {
  auto pick = [](const SluiceParams& params, int64_t decoders) {
    SluicePolicy p(params, PoolKind::chat);
    FakePool pool(2);
    p.on_endpoints_reset(2);
    const std::string t = std::string(80000, 's') + std::string(6000, 't');
    auto req = testing::chat(t, -1, 150);
    p.on_dispatch(testing::chat(std::string(80000, 's'), -1, 150), 1, Time{});
    pool.loads[1].in_flight = decoders;
    pool.loads[1].live_context_tokens = decoders * 20000;
    pool.loads[1].decode_tokens = decoders * 75;
    return testing::rank(p, pool, req)[0].endpoint;
  };
  EXPECT_EQ(pick(kPlain, 8), 0u);
  EXPECT_EQ(pick(kSlo, 8), 1u);
  // Once the warm batch is past the pace, the context is copied.
  EXPECT_EQ(pick(kSlo, 60), 0u);
}

}  // namespace
}  // namespace sluice
