// The workload options shared by `sluice bench` and `sluice fleetsim` (bench/workload_options.h).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "bench/workload_options.h"

namespace sluice {
namespace {

WorkloadOptions parse(std::vector<std::string> args, WorkloadOptions o = {}) {
  CLI::App app;
  add_workload_options(app, o, {"workload", "requests", "duration", "seed"});
  std::vector<const char*> argv{"test"};
  for (const auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return o;
}

TEST(WorkloadOptions, ReadIntoOneRun) {
  const auto o = parse({"--workload", "tool_agent", "--rates", "2,4", "--arrival", "gamma", "--burstiness", "0.5",
                        "--requests", "300", "--duration", "12", "--seed", "9", "--slo-ttft-ms", "500", "--slo-itl-ms", "40"});
  EXPECT_EQ(o.workload, "tool_agent");
  EXPECT_EQ(o.seed, 9u);
  auto r = workload_run(o);
  ASSERT_TRUE(std::holds_alternative<WorkloadRun>(r));
  const auto& run = std::get<WorkloadRun>(r);
  EXPECT_EQ(run.arrivals.kind, workload::ArrivalKind::gamma);
  EXPECT_DOUBLE_EQ(run.arrivals.burstiness, 0.5);
  EXPECT_EQ(run.limits.max_requests, 300);
  ASSERT_TRUE(run.limits.max_duration.has_value());
  EXPECT_EQ(*run.limits.max_duration, std::chrono::seconds(12));
  EXPECT_EQ(run.slo.ttft, std::chrono::milliseconds(500));
  EXPECT_EQ(run.slo.itl, std::chrono::milliseconds(40));
  EXPECT_EQ(sweep_rates(o, run.arrivals), (std::vector<double>{2, 4}));
  auto at = run.arrivals;
  at.rate = 2.5;
  EXPECT_EQ(rate_label(at), "2.5");
}

TEST(WorkloadOptions, AClosedLoopRunsOnceWhateverTheRates) {
  const auto o = parse({"--arrival", "concurrency", "--concurrency", "5", "--rates", "2,4"});
  const auto run = std::get<WorkloadRun>(workload_run(o));
  EXPECT_EQ(run.arrivals.kind, workload::ArrivalKind::concurrency);
  EXPECT_EQ(run.arrivals.concurrency, 5);
  EXPECT_EQ(sweep_rates(o, run.arrivals), (std::vector<double>{0}));
  EXPECT_EQ(rate_label(run.arrivals), "c5");
}

TEST(WorkloadOptions, ABadArrivalIsAnError) {
  const auto r = workload_run(parse({"--arrival", "bursty"}));
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_NE(std::get<std::string>(r).find("'bursty'"), std::string::npos);
}

TEST(WorkloadOptions, EachToolKeepsItsOwnDefaults) {
  const auto o = parse({}, WorkloadOptions{.rates = {4.0}, .concurrency = 16, .requests = 1000});
  EXPECT_EQ(o.rates, (std::vector<double>{4.0}));
  EXPECT_EQ(o.concurrency, 16);
  EXPECT_EQ(o.requests, 1000);
  EXPECT_FALSE(std::get<WorkloadRun>(workload_run(o)).limits.max_duration.has_value());
}

}  // namespace
}  // namespace sluice
