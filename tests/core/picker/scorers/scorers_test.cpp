#include <gtest/gtest.h>

#include "core/picker/scorers/adapter_locality.h"
#include "core/picker/scorers/load_estimate.h"
#include "core/picker/scorers/queue_depth.h"
#include "../picker_test_util.h"

namespace sluice {
namespace {

TEST(Scorers, QueueDepthTable) {
  struct {
    std::vector<double> q, want;
  } cases[] = {
      {{3, 3, 3}, {1, 1, 1}},
      {{0, 5, 10}, {1, 0.5, 0}},
      {{2, 4}, {1, 0}},
      {{7}, {1}},
  };
  for (const auto& c : cases) {
    std::vector<double> out(c.q.size(), -1);
    queue_depth_scores(c.q, out);
    for (size_t i = 0; i < out.size(); ++i) EXPECT_DOUBLE_EQ(out[i], c.want[i]);
  }
}

TEST(Scorers, AdapterLocalityTable) {
  struct Case {
    const char* name;
    std::vector<std::string> running, waiting;
    int max_lora;
    bool stale;
    const char* adapter;
    double want;
  } cases[] = {
      {"base model", {"x"}, {}, 1, false, "", 1.0},
      {"running", {"a", "b"}, {}, 2, false, "a", 1.0},
      {"free slot", {"b"}, {}, 2, false, "a", 0.8},
      {"waiting, no slot", {"b", "c"}, {"a"}, 2, false, "a", 0.6},
      {"no slot", {"b", "c"}, {}, 2, false, "a", 0.0},
      {"lora unknown", {}, {}, 0, false, "a", 0.8},
      {"stale: neutral", {"b", "c"}, {}, 2, true, "a", 0.8},
  };
  for (const auto& c : cases) {
    testing::FakePool pool(1);
    pool.signals[0].lora_running = c.running;
    pool.signals[0].lora_waiting = c.waiting;
    pool.signals[0].max_lora = c.max_lora;
    pool.stale[0] = c.stale;
    EXPECT_DOUBLE_EQ(adapter_locality_score(pool.views()[0], c.adapter), c.want) << c.name;
  }
}

// The staleness rule: stale scraped values are ignored in favour of the gateway's own accounting.
TEST(Scorers, StalenessRuleUsesOwnAccounting) {
  testing::FakePool pool(2);
  for (auto& s : pool.signals) {
    s.waiting = 500;  // would look saturated if trusted
    s.running = 200;
    s.kv_usage = 1.0;
    s.kv_capacity_blocks = 1000;
    s.block_size = 16;
  }
  pool.loads[0].assigned_since_scrape = 3;
  pool.loads[1] = pool.loads[0];
  pool.stale[1] = true;
  pool.loads[1].in_flight = 5;
  pool.loads[1].prefill_requests = 2;
  pool.loads[1].context_tokens = 4000;
  auto v = pool.views();
  LoadEstimate fresh = estimate_load(v[0]);
  EXPECT_TRUE(fresh.fresh);
  EXPECT_DOUBLE_EQ(fresh.waiting, 503);  // scraped + assigned since scrape
  EXPECT_DOUBLE_EQ(fresh.kv_usage, 1.0);
  LoadEstimate stale = estimate_load(v[1]);
  EXPECT_FALSE(stale.fresh);
  EXPECT_DOUBLE_EQ(stale.waiting, 2);
  EXPECT_DOUBLE_EQ(stale.running, 3);
  EXPECT_DOUBLE_EQ(stale.capacity_tokens, 16000);  // capacity is configuration: kept
  EXPECT_DOUBLE_EQ(stale.kv_usage, 0.25);
  // A stale endpoint with no own work looks idle only because it has no work from us, and an
  // endpoint never scraped at all is neither saturated nor negative.
  pool.signals[1].present = false;
  pool.loads[1] = {};
  LoadEstimate never = estimate_load(pool.views()[1]);
  EXPECT_DOUBLE_EQ(never.waiting, 0);
  EXPECT_DOUBLE_EQ(never.kv_usage, 0);
  EXPECT_DOUBLE_EQ(never.capacity_tokens, kDefaultKvCapacityTokens);
}

}  // namespace
}  // namespace sluice
