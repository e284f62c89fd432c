#include "model/engine/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

namespace sluice::engine {
namespace {

using namespace std::chrono_literals;

std::vector<TokenId> toks(size_t n, TokenId start = 1) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), start);
  return t;
}

EngineRequest req(RequestId id, size_t prompt, int64_t out, TokenId start = 1) {
  EngineRequest r;
  r.id = id;
  r.prompt = toks(prompt, start);
  r.max_output_tokens = out;
  return r;
}

EngineConfig small_config() {
  EngineConfig c;
  c.num_blocks = 64;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 256;
  c.max_model_len = 1024;
  return c;
}

// Runs steps in virtual time until idle; returns all outputs keyed by request.
struct Run {
  std::map<RequestId, std::vector<RequestOutput>> outs;
  std::vector<RequestId> finish_order;
  Time now{};
  int steps = 0;
};
Run drain(Engine& e, Time start = {}, int max_steps = 100000) {
  Run run;
  run.now = start;
  while (e.has_work() && run.steps < max_steps) {
    auto r = e.step(run.now);
    ++run.steps;
    run.now = r.end;
    for (auto& o : r.outputs) {
      run.outs[o.id].push_back(o);
      if (o.finished) run.finish_order.push_back(o.id);
    }
  }
  return run;
}

TEST(EngineScheduler, SingleRequestLifecycle) {
  Engine e(small_config());
  ASSERT_EQ(e.submit(req(1, 40, 5), Time{}), SubmitError::none);
  EXPECT_EQ(e.num_waiting(), 1u);
  auto d = e.begin_step(Time{});
  ASSERT_TRUE(d);
  EXPECT_TRUE(e.step_in_flight());
  EXPECT_EQ(e.num_running(), 1u);
  auto r = e.end_step(*d);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_TRUE(r.outputs[0].first_token);
  EXPECT_EQ(r.outputs[0].prompt_tokens, 40);
  auto run = drain(e, *d);
  auto& o = run.outs[1];
  ASSERT_EQ(o.size(), 4u);
  EXPECT_EQ(o.back().output_tokens, 5);
  EXPECT_EQ(o.back().finished, FinishReason::length);
  EXPECT_FALSE(e.has_work());
  EXPECT_EQ(e.counters().generation_tokens, 5);
  EXPECT_EQ(e.counters().prompt_tokens, 40);
  EXPECT_EQ(e.counters().finished_length, 1);
  EXPECT_EQ(e.histograms().ttft.count, 1u);
  EXPECT_EQ(e.histograms().itl.count, 4u);
  EXPECT_EQ(e.histograms().e2e.count, 1u);
  EXPECT_EQ(e.blocks().num_free(), 64);
  EXPECT_DOUBLE_EQ(e.stats(run.now).kv_usage, 0.0);
}

TEST(EngineScheduler, StopReasonAndArrivalCountsInTtft) {
  Engine e(small_config());
  auto r = req(1, 10, 2);
  r.finish_reason = FinishReason::stop;
  r.arrival = Time{} - 20ms;  // front-end overhead before submit
  e.submit(r, Time{});
  auto run = drain(e);
  EXPECT_EQ(run.outs[1].back().finished, FinishReason::stop);
  EXPECT_EQ(e.counters().finished_stop, 1);
  EXPECT_GT(e.histograms().ttft.sum, 0.020);
}

TEST(EngineScheduler, PrefixHitInTokensAndFullHitRecomputesLastToken) {
  Engine e(small_config());
  e.submit(req(1, 40, 1), Time{});
  drain(e);
  EXPECT_EQ(e.counters().prefix_queries, 40);
  EXPECT_EQ(e.counters().prefix_hits, 0);
  e.submit(req(2, 40, 1), Time{});  // same prompt: 2 full blocks cached
  auto run = drain(e);
  EXPECT_EQ(run.outs[2][0].cached_tokens, 32);
  EXPECT_EQ(e.counters().prefix_queries, 80);
  EXPECT_EQ(e.counters().prefix_hits, 32);
  // Exactly 32 tokens, all cached: the last block is recomputed so the last token is.
  e.submit(req(3, 32, 1), Time{});
  run = drain(e);
  EXPECT_EQ(run.outs[3][0].cached_tokens, 16);
  // Another adapter or salt never shares cache.
  auto salted = req(4, 40, 1);
  salted.cache_salt = "tenant-b";
  e.submit(salted, Time{});
  run = drain(e);
  EXPECT_EQ(run.outs[4][0].cached_tokens, 0);
}

TEST(EngineScheduler, DecodeBlocksAreCachedToo) {
  Engine e(small_config());
  e.submit(req(1, 16, 20), Time{});
  drain(e);
  // 16 prompt tokens + 20 generated -> 35 computed (last sampled token not fed): 2 full blocks.
  EXPECT_EQ(e.blocks().num_cached(), 2);
}

TEST(EngineScheduler, CachedPrefixMakesPrefillCheaper) {
  Engine e(small_config());
  e.submit(req(1, 200, 1), Time{});
  auto cold = e.step(Time{});
  e.submit(req(2, 200, 1), cold.end);
  auto warm = e.step(cold.end);
  EXPECT_EQ(cold.shape.num_tokens, 200);
  EXPECT_EQ(warm.shape.num_tokens, 200 - 192);
  EXPECT_LT(warm.end - warm.start, cold.end - cold.start);
}

TEST(EngineScheduler, BlocksAreCachedWhenTheirStepIsScheduled) {
  // As vLLM v1 (allocate_slots caches the blocks the step will compute): a second request for the
  // same prompt scheduled in the same step finds the first one's blocks, and so does one that
  // arrives while that step runs; the prefix is computed once.
  Engine e(small_config());
  e.submit(req(1, 100, 1), Time{});
  e.submit(req(2, 100, 1), Time{});
  auto first = e.step(Time{});
  EXPECT_EQ(first.shape.num_tokens, 100 + (100 - 96));
  e.submit(req(3, 100, 1), first.start);  // arrives mid-step: scheduled by the next one
  auto run = drain(e, first.end);
  ASSERT_EQ(run.outs[3].size(), 1u);
  EXPECT_EQ(run.outs[3][0].cached_tokens, 96);
  EXPECT_EQ(e.counters().prefix_hits, 96 + 96);
  // A chunked prefill caches each chunk's blocks as that chunk is scheduled.
  auto c = small_config();
  c.max_num_batched_tokens = 40;
  Engine chunked(c);
  chunked.submit(req(1, 100, 1, 500), Time{});
  auto one = chunked.step(Time{});
  EXPECT_EQ(one.shape.num_tokens, 40);
  EXPECT_EQ(chunked.blocks().num_cached(), 2);  // 40 tokens: 2 full blocks
}

TEST(EngineScheduler, ChunkedPrefillWithinTokenBudget) {
  auto c = small_config();
  c.max_num_batched_tokens = 32;
  Engine e(c);
  e.submit(req(1, 100, 2), Time{});
  int steps_before_first = 0;
  Time now{};
  for (;;) {
    auto r = e.step(now);
    now = r.end;
    EXPECT_LE(r.shape.num_tokens, 32);
    ++steps_before_first;
    if (!r.outputs.empty()) break;
  }
  EXPECT_EQ(steps_before_first, 4);  // 32 + 32 + 32 + 4
}


// A short prompt queued behind a long one: without a cap the long prefill takes each step's whole
// budget and the short one waits for all of it; with long_prefill_token_threshold the long one takes
// at most that many tokens a step and the short one is prefilled in the first step beside it.
TEST(EngineScheduler, LongPrefillTokenThresholdLetsAShortPrefillThrough) {
  const auto first_token_step = [](int64_t threshold) {
    auto c = small_config();
    c.max_num_batched_tokens = 64;
    c.long_prefill_token_threshold = threshold;
    Engine e(c);
    e.submit(req(1, 600, 2), Time{});         // long: 600 tokens
    e.submit(req(2, 20, 2, 5000), Time{});    // short, other tokens, queued behind it
    Time now{};
    std::map<RequestId, int> first;
    for (int step = 1; e.has_work() && step < 1000; ++step) {
      auto r = e.step(now);
      now = r.end;
      EXPECT_LE(r.shape.num_tokens, 64);
      for (auto& o : r.outputs) first.emplace(o.id, step);
    }
    return first;
  };
  const auto off = first_token_step(0);
  EXPECT_EQ(off.at(1), 10);  // 600 / 64: 9 full steps and 24 tokens in the 10th
  EXPECT_EQ(off.at(2), 10);  // ... where the short one gets the 40 left: it waited the whole prefill
  const auto on = first_token_step(32);
  EXPECT_EQ(on.at(2), 1);    // 32 for the long one, 20 for the short one, in the first step
  EXPECT_EQ(on.at(1), 19);   // 600 / 32: 18 full steps and 24 tokens
  EngineConfig bad = small_config();
  bad.long_prefill_token_threshold = -1;
  EXPECT_FALSE(bad.validate().empty());
  bad.long_prefill_token_threshold = bad.max_model_len + 1;
  EXPECT_FALSE(bad.validate().empty());
}
TEST(EngineScheduler, MaxNumSeqsAndRunningFirst) {
  auto c = small_config();
  c.max_num_seqs = 2;
  Engine e(c);
  for (RequestId i = 1; i <= 3; ++i) e.submit(req(i, 10, 3, TokenId(i * 100)), Time{});
  e.step(Time{});
  EXPECT_EQ(e.num_running(), 2u);
  EXPECT_EQ(e.num_waiting(), 1u);
  auto run = drain(e);
  EXPECT_EQ(run.finish_order.back(), 3u);
}

TEST(EngineScheduler, PreemptsNewestWhenBlocksRunOut) {
  auto c = small_config();
  c.num_blocks = 6;  // 96 tokens
  Engine e(c);
  e.submit(req(1, 30, 30, 1), Time{});     // needs up to 60 tokens = 4 blocks
  e.submit(req(2, 30, 30, 1000), Time{});  // same
  auto run = drain(e);
  EXPECT_GT(e.counters().preemptions, 0);
  ASSERT_EQ(run.finish_order.size(), 2u);
  EXPECT_EQ(run.finish_order[0], 1u);  // the older request kept running
  EXPECT_EQ(run.outs[2].back().output_tokens, 30);
  EXPECT_EQ(e.blocks().num_free(), 6);
  // Output tokens are never duplicated by the recompute.
  int64_t n = 0;
  for (auto& o : run.outs[2]) n += o.new_tokens;
  EXPECT_EQ(n, 30);
}

TEST(EngineScheduler, AbortFreesBlocksAtOnceEvenMidStep) {
  Engine e(small_config());
  e.submit(req(1, 100, 50), Time{});
  e.step(Time{});
  EXPECT_GT(e.stats(Time{}).kv_usage, 0.0);
  auto d = e.begin_step(1s);
  ASSERT_TRUE(d);
  EXPECT_TRUE(e.abort(1, 1s + 1ms));
  EXPECT_EQ(e.blocks().num_free(), 64);
  auto r = e.end_step(1s + *d);
  EXPECT_TRUE(r.outputs.empty());
  EXPECT_FALSE(e.has_work());
  EXPECT_EQ(e.counters().finished_abort, 1);
  EXPECT_FALSE(e.abort(1, 2s));
  // Its computed blocks stay reusable.
  e.submit(req(2, 100, 1), 2s);
  auto run = drain(e, 2s);
  EXPECT_EQ(run.outs[2][0].cached_tokens, 96);
}

TEST(EngineScheduler, AbortWaitingRequest) {
  auto c = small_config();
  c.max_num_seqs = 1;
  Engine e(c);
  e.submit(req(1, 10, 5), Time{});
  e.submit(req(2, 10, 5), Time{});
  e.step(Time{});
  EXPECT_TRUE(e.abort(2, Time{}));
  EXPECT_EQ(e.num_waiting(), 0u);
  auto run = drain(e);
  EXPECT_EQ(run.finish_order, std::vector<RequestId>{1});
}

TEST(EngineScheduler, PriorityPolicyRunsLowerPriorityFirst) {
  auto c = small_config();
  c.max_num_seqs = 1;
  c.policy = SchedulingPolicy::priority;
  Engine e(c);
  auto a = req(1, 10, 2), b = req(2, 10, 2), d = req(3, 10, 2);
  a.priority = 5;
  b.priority = -1;
  d.priority = 0;
  e.submit(a, Time{});
  e.submit(b, Time{});
  e.submit(d, Time{});
  auto run = drain(e);
  EXPECT_EQ(run.finish_order, (std::vector<RequestId>{2, 3, 1}));
  // FCFS ignores priority.
  c.policy = SchedulingPolicy::fcfs;
  Engine f(c);
  f.submit(a, Time{});
  f.submit(b, Time{});
  f.submit(d, Time{});
  EXPECT_EQ(drain(f).finish_order, (std::vector<RequestId>{1, 2, 3}));
}

TEST(EngineScheduler, LoraSlotsLimitAdaptersInBatchAndLoadCostsTime) {
  auto c = small_config();
  c.max_loras = 1;
  c.lora_load_ms = 40;
  Engine e(c);
  auto a = req(1, 10, 3), b = req(2, 10, 3), base = req(3, 10, 3);
  a.adapter = "sql";
  b.adapter = "chat";
  e.submit(a, Time{});
  e.submit(b, Time{});
  e.submit(base, Time{});
  auto first = e.step(Time{});
  EXPECT_EQ(first.shape.num_lora_loads, 1);
  EXPECT_GE(to_millis(first.end - first.start), 40.0);
  EXPECT_EQ(e.num_running(), 2u);  // "sql" and the base-model request; "chat" waits
  auto st = e.stats(first.end);
  EXPECT_EQ(st.running_adapters, std::vector<std::string>{"sql"});
  EXPECT_EQ(st.waiting_adapters, std::vector<std::string>{"chat"});
  auto run = drain(e, first.end);
  EXPECT_EQ(run.finish_order.back(), 2u);
  EXPECT_EQ(e.counters().lora_loads, 2);
  // Same prompt under another adapter: no cache sharing.
  EXPECT_EQ(run.outs[2][0].cached_tokens, 0);
}

TEST(EngineScheduler, EmbeddingIsOnePassWithoutTokens) {
  auto c = EngineConfig::from_profile(*find_profile("embedding"));
  Engine e(c);
  auto r = req(1, 300, 0);
  e.submit(r, Time{});
  auto s = e.step(Time{});
  ASSERT_EQ(s.outputs.size(), 1u);
  EXPECT_EQ(s.outputs[0].new_tokens, 0);
  EXPECT_EQ(s.outputs[0].finished, FinishReason::stop);
  EXPECT_EQ(e.counters().generation_tokens, 0);
  EXPECT_EQ(e.blocks().num_free(), e.blocks().num_blocks());
}

TEST(EngineScheduler, SubmitErrors) {
  auto c = small_config();
  c.num_blocks = 4;
  Engine e(c);
  EXPECT_EQ(e.submit(req(1, 0, 1), Time{}), SubmitError::empty_prompt);
  EXPECT_EQ(e.submit(req(1, 1000, 100), Time{}), SubmitError::too_long);
  EXPECT_EQ(e.submit(req(1, 60, 10), Time{}), SubmitError::exceeds_kv_capacity);
  EXPECT_EQ(e.submit(req(1, 10, 10), Time{}), SubmitError::none);
  EXPECT_EQ(e.submit(req(1, 10, 10), Time{}), SubmitError::duplicate_id);
  auto lora = req(2, 10, 1);
  lora.adapter = "x";
  c.max_loras = 0;
  EXPECT_EQ(Engine(c).submit(lora, Time{}), SubmitError::lora_disabled);
  EngineConfig bad;
  bad.num_blocks = 0;
  EXPECT_FALSE(bad.validate().empty());
  EXPECT_TRUE(EngineConfig{}.validate().empty());
}

TEST(EngineScheduler, BusyTimeAccumulates) {
  Engine e(small_config());
  e.submit(req(1, 10, 3), Time{});
  auto run = drain(e);
  auto st = e.stats(run.now + 1s);
  EXPECT_EQ(st.busy_time, run.now);  // back-to-back steps from t=0
  EXPECT_EQ(st.counters.steps, run.steps);
}

}  // namespace
}  // namespace sluice::engine
