// Reproduces the reference table of engine-cost-model.md in virtual time, within +/-20%:
// batch-1 decode ms/token, and the saturation request rate of the ~200-token shared-prefix
// workload (64 output tokens, ~128 requests in flight) with and without prefix caching.
#include <gtest/gtest.h>

#include <random>

#include "model/engine/engine.h"

namespace sluice::engine {
namespace {

// 204-token prompts: a 128-token prefix shared by every request plus 76 unique tokens.
std::vector<TokenId> shared_prefix_prompt(std::mt19937_64& rng) {
  std::vector<TokenId> p;
  for (TokenId i = 0; i < 128; ++i) p.push_back(1000 + i);
  std::uniform_int_distribution<TokenId> tok(0, kVocabSize - 1);
  for (int i = 0; i < 76; ++i) p.push_back(tok(rng));
  return p;
}

// Closed loop: keeps `concurrency` requests in flight; returns completed requests per second
// measured after a warm-up. The first `concurrency` requests are ramped in two per step, as
// arrivals spread over time would be, so that the batch does not move in lock-step waves
// (128 prefills at once, then 63 pure-decode steps) that no real arrival process produces.
double saturation_rate(bool prefix_caching, int concurrency = 128, int total = 3000, int warmup = 500) {
  EngineConfig c;
  c.prefix_caching = prefix_caching;
  Engine e(c);
  std::mt19937_64 rng(42);
  RequestId next = 1;
  Time now{};
  auto submit_one = [&] {
    EngineRequest r;
    r.id = next++;
    r.prompt = shared_prefix_prompt(rng);
    r.max_output_tokens = 64;
    EXPECT_EQ(e.submit(std::move(r), now), SubmitError::none);
  };
  int ramped = 0;
  int done = 0;
  Time t_warm{};
  while (done < total) {
    for (int k = 0; k < 2 && ramped < concurrency; ++k, ++ramped) submit_one();
    auto res = e.step(now);
    now = res.end;
    for (auto& o : res.outputs) {
      if (!o.finished) continue;
      if (++done == warmup) t_warm = now;
      submit_one();
    }
  }
  return double(total - warmup) / to_seconds(now - t_warm);
}

TEST(EngineCalibration, Batch1DecodeMsPerToken) {
  Engine e(EngineConfig{});
  EngineRequest r;
  r.id = 1;
  std::mt19937_64 rng(1);
  r.prompt = shared_prefix_prompt(rng);
  r.max_output_tokens = 64;
  e.submit(r, Time{});
  Time now{}, first{};
  while (e.has_work()) {
    auto s = e.step(now);
    now = s.end;
    for (auto& o : s.outputs)
      if (o.first_token) first = now;
  }
  const double ms_per_token = to_millis(now - first) / 63.0;
  EXPECT_NEAR(ms_per_token, 7.5, 7.5 * 0.2);
  EXPECT_NEAR(e.histograms().itl.sum / double(e.histograms().itl.count) * 1000, 7.5, 1.5);
}

TEST(EngineCalibration, SaturationRateWithPrefixCache) {
  const double rate = saturation_rate(true);
  RecordProperty("req_per_s", std::to_string(rate));
  EXPECT_NEAR(rate, 163.0, 163.0 * 0.2);
}

TEST(EngineCalibration, SaturationRateWithoutPrefixCache) {
  const double rate = saturation_rate(false);
  RecordProperty("req_per_s", std::to_string(rate));
  EXPECT_NEAR(rate, 112.0, 112.0 * 0.2);
  EXPECT_LT(rate, saturation_rate(true));
}

TEST(EngineCalibration, PrefixCacheHitRateOnSharedPrefixWorkload) {
  EngineConfig c;
  Engine e(c);
  std::mt19937_64 rng(3);
  Time now{};
  for (RequestId id = 1; id <= 50; ++id) {
    EngineRequest r;
    r.id = id;
    r.prompt = shared_prefix_prompt(rng);
    r.max_output_tokens = 4;
    e.submit(r, now);
    while (e.has_work()) now = e.step(now).end;
  }
  const double hit = double(e.counters().prefix_hits) / double(e.counters().prefix_queries);
  EXPECT_NEAR(hit, 128.0 / 204.0, 0.03);  // every request but the first hits the 8 shared blocks
}

}  // namespace
}  // namespace sluice::engine
