#include "core/engine/cost_model.h"

#include <gtest/gtest.h>

namespace sluice::engine {
namespace {

TEST(EngineCostModel, ReferenceCases) {
  CostModel m;  // llama-3-8b-h100 defaults
  // Batch-1 decode of a ~250-token context: 2 + 5.5 + 0.02 + 0.0125 = 7.53 ms.
  StepShape decode1{1, 1, 250, 0.0, 0};
  EXPECT_NEAR(m.step_ms(decode1), 7.53, 0.01);
  // 128 running + 152 prefill tokens.
  StepShape mixed{128 + 152, 130, 128 * 236, 2 * 76 * (128 + 38.0), 0};
  EXPECT_NEAR(m.step_ms(mixed), 12.3, 0.3);
  // No prefix cache: 536 tokens per step.
  StepShape nocache{536, 130, 128 * 236, 2 * 204 * 102.0, 0};
  EXPECT_NEAR(m.step_ms(nocache), 17.9, 0.3);
}

TEST(EngineCostModel, LongPromptCostGap) {
  CostModel m;
  // A 100k-token prompt prefilled in 8192-token chunks: ~2.2 s linear + ~7.5 s attention.
  double total = 0;
  for (int64_t p = 0; p < 100000; p += 8192) {
    const int64_t c = std::min<int64_t>(8192, 100000 - p);
    total += m.step_ms({c, 1, 0, double(c) * (double(p) + double(c) / 2.0), 0});
  }
  EXPECT_GT(total, 7000.0);
  EXPECT_LT(total, 11000.0);
  // A 100-token prompt: ~8 ms.
  EXPECT_NEAR(m.step_ms({100, 1, 0, 100 * 50.0, 0}), 7.5, 1.0);
}

TEST(EngineCostModel, LoraLoadAddsLatency) {
  CostModel m({}, 30.0);
  StepShape s{1, 1, 0, 0, 0};
  const double base = m.step_ms(s);
  s.num_lora_loads = 2;
  EXPECT_DOUBLE_EQ(m.step_ms(s), base + 60.0);
}

TEST(EngineCostModel, JitterIsSeededAndMeanPreserving) {
  CostParams p;
  p.jitter_sigma = 0.08;
  CostModel m(p);
  StepShape s{1, 1, 0, 0, 0};
  std::mt19937_64 a(7), b(7);
  double sum = 0;
  bool varied = false;
  const Duration first = m.step_duration(s, a);
  for (int i = 0; i < 20000; ++i) {
    const Duration d = m.step_duration(s, b);
    if (i == 0) {
      EXPECT_EQ(d, first);  // same seed, same draw
    }
    if (d != first) varied = true;
    sum += to_millis(d);
  }
  EXPECT_TRUE(varied);
  EXPECT_NEAR(sum / 20000, m.step_ms(s), 0.05);
}

TEST(EngineCostModel, Profiles) {
  auto p8 = find_profile("llama-3-8b-h100");
  ASSERT_TRUE(p8);
  EXPECT_DOUBLE_EQ(p8->cost.w_ms, 5.5);
  auto p70 = find_profile("llama-3-70b-tp4");
  ASSERT_TRUE(p70);
  EXPECT_GT(p70->cost.w_ms, 14.5);
  EXPECT_GT(CostModel(p70->cost).step_ms({1, 1, 0, 0, 0}), CostModel(p8->cost).step_ms({1, 1, 0, 0, 0}));
  auto emb = find_profile("embedding");
  ASSERT_TRUE(emb);
  EXPECT_TRUE(emb->embedding);
  EXPECT_FALSE(find_profile("gpt-5"));
  EXPECT_EQ(profile_names().size(), 3u);
}

}  // namespace
}  // namespace sluice::engine
