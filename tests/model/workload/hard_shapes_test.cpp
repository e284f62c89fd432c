// The hard workload shapes (core/workload/hard_shapes.cpp): each has the property it is named for.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "model/workload/workload.h"

namespace sluice::workload {
namespace {

std::vector<WorkloadRequest> take(const std::string& spec, int64_t n, uint64_t seed = 5) {
  ArrivalSpec a;
  a.rate = 50;
  WorkloadLimits lim;
  lim.max_requests = n;
  auto w = make_workload(spec, a, lim, seed);
  if (auto* e = std::get_if<std::string>(&w)) {
    ADD_FAILURE() << *e;
    return {};
  }
  std::vector<WorkloadRequest> out;
  while (auto r = std::get<0>(w)->next()) out.push_back(std::move(*r));
  return out;
}

TEST(HardShapes, HotPrefixCarriesItsShareOnOnePrefix) {
  auto rs = take("hot_prefix", 2000);
  ASSERT_EQ(rs.size(), 2000u);
  std::map<std::string, int> groups;
  std::set<std::string> hot_systems;
  for (const auto& r : rs) {
    groups[r.group]++;
    if (r.group == "hot") hot_systems.insert(r.messages[0].content);
  }
  EXPECT_NEAR(groups["hot"] / 2000.0, 0.5, 0.04);
  EXPECT_EQ(hot_systems.size(), 1u);
  EXPECT_EQ(hot_systems.begin()->size(), 6000u * 4);
  EXPECT_GT(groups.size(), 90u);  // the rest spread over the 100 groups
}

// A surge: the hot prompt's share is surge_share for requests surge_start..surge_end - 1 only.
TEST(HardShapes, HotPrefixSurgeRaisesItsShareForThoseRequestsOnly) {
  auto rs = take("hot_prefix,hot_share=0.1,surge_share=0.7,surge_start=1000,surge_end=2000", 3000);
  ASSERT_EQ(rs.size(), 3000u);
  int hot[3] = {0, 0, 0};
  for (size_t i = 0; i < rs.size(); ++i) hot[i / 1000] += rs[i].group == "hot";
  EXPECT_NEAR(hot[0] / 1000.0, 0.1, 0.03);
  EXPECT_NEAR(hot[1] / 1000.0, 0.7, 0.04);
  EXPECT_NEAR(hot[2] / 1000.0, 0.1, 0.03);
  ArrivalSpec a;
  EXPECT_TRUE(std::holds_alternative<std::string>(make_workload("hot_prefix,surge_start=5,surge_end=4", a, {}, 1)));
}

TEST(HardShapes, AgentSessionContextsGrowPast16kTokens) {
  auto rs = take("agent_sessions,sessions=4", 200);
  int64_t longest = 0;
  std::map<std::string, int64_t> last;
  bool grows = true;
  for (const auto& r : rs) {
    const int64_t n = r.input_tokens();
    longest = std::max(longest, n);
    if (last.count(r.group)) grows &= n > last[r.group] + 1000;  // >= 1k tokens of tool output a turn
    last[r.group] = n;
  }
  EXPECT_GT(longest, 16000);
  EXPECT_TRUE(grows);
}

TEST(HardShapes, ToolAgentHasZipfPopularLongPrefixesAndShortOutputs) {
  auto rs = take("tool_agent", 3000);
  std::map<std::string, int> groups;
  for (const auto& r : rs) {
    groups[r.group]++;
    EXPECT_GE(r.max_tokens, 16);
    EXPECT_LE(r.max_tokens, 64);
    EXPECT_GE(r.messages[0].content.size(), 8000u * 4);
    EXPECT_LE(r.messages[0].content.size(), 16000u * 4);
  }
  int most = 0;
  for (const auto& [g, n] : groups) most = std::max(most, n);
  EXPECT_EQ(groups["p0"], most);           // the first prefix is the most popular
  EXPECT_GT(groups["p0"], 3000 / 10);      // Zipf(1) over 200: ~17%
}

TEST(HardShapes, FanOutSendsIdenticalSamplesInARow) {
  auto rs = take("fan_out,samples=8", 64);
  for (size_t i = 0; i < rs.size(); i += 8)
    for (size_t j = i + 1; j < i + 8; ++j) EXPECT_EQ(rs[j].rendered(), rs[i].rendered()) << j;
  EXPECT_NE(rs[0].rendered(), rs[8].rendered());
}

TEST(HardShapes, KvPressurePrefixesTotalWhatTheyAreAskedTo) {
  ArrivalSpec a;
  auto w = make_workload("kv_pressure,prefixes=1200", a, WorkloadLimits{}, 1);
  ASSERT_TRUE(std::holds_alternative<std::unique_ptr<Workload>>(w));
  // 1200 prefixes of 3000..5000 tokens: ~4.8M tokens, more than 8 x 12,000-block replicas (1.5M).
  EXPECT_NE(std::get<0>(w)->describe().find("(4.8M in all)"), std::string::npos) << std::get<0>(w)->describe();
}

}  // namespace
}  // namespace sluice::workload
