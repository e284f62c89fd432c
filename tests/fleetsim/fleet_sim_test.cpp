#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "fleetsim/fleet_sim.h"

namespace sluice::fleetsim {
namespace {

FleetConfig small_fleet(const std::string& policy, double rate = 8) {
  FleetConfig c;
  c.replicas = 4;
  c.engine.num_blocks = 1500;  // ~24k tokens per replica: the prefixes do not fit everywhere
  c.policy = policy;
  c.workload = "shared_prefix,groups=16,prompts=4,system=1500,question=100,output=20";
  c.arrivals.rate = rate;
  c.limits.max_requests = 400;
  c.seed = 3;
  return c;
}

FleetResult run_ok(const FleetConfig& c) {
  auto r = run_fleet(c);
  if (auto* e = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *e;
    return {};
  }
  return std::get<0>(std::move(r));
}

TEST(FleetSim, EveryRequestCompletes) {
  auto r = run_ok(small_fleet("round_robin"));
  EXPECT_EQ(r.figures.requests, 400u);
  EXPECT_EQ(r.figures.ok, 400u);
  EXPECT_EQ(r.figures.ttft.n, 400u);
  EXPECT_GT(r.figures.output_tokens_per_s, 0);
  EXPECT_EQ(r.picks_min, 100);  // round robin: exactly even
  EXPECT_EQ(r.picks_max, 100);
  EXPECT_GT(r.prefix_hit_rate, 0.0);
  EXPECT_GT(r.virtual_seconds, 40.0);  // 400 requests at 8/s
}

// The trace: one JSON line per request, each where it went and what it found; tracing (with the
// pick's explanation too) changes nothing a deterministic policy does.
TEST(FleetSim, TraceHasOneLinePerRequestAndChangesNothing) {
  const auto plain = run_ok(small_fleet("sluice"));
  EXPECT_TRUE(plain.trace.empty());
  for (int level : {1, 2}) {
    auto c = small_fleet("sluice");
    c.trace = level;
    const auto r = run_ok(c);
    EXPECT_EQ(workload::to_json(r.figures), workload::to_json(plain.figures));
    std::istringstream in(r.trace);
    simdjson::dom::parser parser;
    size_t lines = 0;
    int64_t engine_cached = 0, predicted = 0;
    std::map<int64_t, int> per_endpoint;
    for (std::string line; std::getline(in, line); ++lines) {
      simdjson::dom::element e;
      ASSERT_EQ(parser.parse(line).get(e), simdjson::SUCCESS) << line;
      EXPECT_EQ(std::string_view(e["policy"]), "sluice");
      EXPECT_EQ(int64_t(e["status"]), 200);
      EXPECT_GT(double(e["ttft_ms"]), 0);
      EXPECT_GE(double(e["e2e_ms"]), double(e["ttft_ms"]));
      EXPECT_FALSE(std::string_view(e["group"]).empty());
      engine_cached += int64_t(e["engine_cached_tokens"]);
      predicted += int64_t(e["predicted_cached_tokens"]);
      per_endpoint[int64_t(e["endpoint"])] += 1;
      simdjson::dom::element ex;
      EXPECT_EQ(e["explain"].get(ex) == simdjson::SUCCESS, level == 2);
      if (level == 2) {
        EXPECT_EQ(simdjson::dom::array(ex["candidates"]).size(), 4u);
      }
    }
    EXPECT_EQ(lines, 400u);
    EXPECT_EQ(engine_cached, r.engine_cached_tokens);
    EXPECT_EQ(predicted, r.predicted_cached_tokens);
    int64_t picks = 0;
    for (const auto& [endpoint, n] : per_endpoint) {
      EXPECT_GE(endpoint, 0);
      EXPECT_LT(endpoint, 4);
      picks += n;
    }
    EXPECT_EQ(picks, 400);
  }
}

// A mixed fleet: the last replicas run their steps slow_factor times longer (everything else equal).
// Under round robin (each replica gets the same requests), their requests' end-to-end times are
// about that much longer, and the first replicas' are as in a uniform fleet.
// Whole answers (not streamed): a share of the requests drawn per request id from the seed, the
// same requests whatever the policy; the gateway hears of them at their end, and the sluice
// policy's view of its queues (the expected first token) keeps its placements as good as with
// streams.
TEST(FleetSim, WholeAnswersAreTheSameRequestsForEveryPolicyAndServedAlike) {
  const auto whole_ids = [](const FleetResult& r) {
    std::set<int64_t> ids;
    std::istringstream in(r.trace);
    simdjson::dom::parser parser;
    for (std::string line; std::getline(in, line);) {
      simdjson::dom::element e;
      EXPECT_EQ(parser.parse(line).get(e), simdjson::SUCCESS) << line;
      if (bool(e["whole"])) ids.insert(int64_t(e["id"]));
    }
    return ids;
  };
  auto cfg = small_fleet("sluice");
  cfg.trace = 1;
  cfg.whole_answers = 0.5;
  const auto sl = run_ok(cfg);
  cfg.policy = "round_robin";
  const auto rr = run_ok(cfg);
  const auto ids = whole_ids(sl);
  EXPECT_GT(ids.size(), 160u);
  EXPECT_LT(ids.size(), 240u);
  EXPECT_EQ(ids, whole_ids(rr));
  EXPECT_EQ(sl.figures.ok, 400u);
  // All whole answers against all streamed, sluice: the same service within noise.
  cfg.policy = "sluice";
  cfg.trace = 0;
  cfg.whole_answers = 1;
  const auto whole = run_ok(cfg);
  cfg.whole_answers = 0;
  const auto streamed = run_ok(cfg);
  EXPECT_EQ(whole.figures.ok, 400u);
  EXPECT_LT(whole.figures.ttft.p90, 1.3 * streamed.figures.ttft.p90);
  EXPECT_GT(whole.prefix_hit_rate, 0.9 * streamed.prefix_hit_rate);
  for (double bad : {-0.1, 1.5}) {
    cfg.whole_answers = bad;
    EXPECT_TRUE(std::holds_alternative<std::string>(run_fleet(cfg))) << bad;
  }
}

TEST(FleetSim, AMixedFleetsSlowReplicasServeSlower) {
  auto uniform = small_fleet("round_robin");
  uniform.trace = 1;
  auto mixed = uniform;
  mixed.slow_replicas = 2;
  mixed.slow_factor = 3;
  const auto per_endpoint_e2e = [](const FleetResult& r) {
    std::map<int64_t, std::pair<double, int>> sum;
    std::istringstream in(r.trace);
    simdjson::dom::parser parser;
    for (std::string line; std::getline(in, line);) {
      simdjson::dom::element e;
      EXPECT_EQ(parser.parse(line).get(e), simdjson::SUCCESS) << line;
      auto& [ms, n] = sum[int64_t(e["endpoint"])];
      ms += double(e["e2e_ms"]);
      n += 1;
    }
    std::map<int64_t, double> mean;
    for (const auto& [endpoint, s] : sum) mean[endpoint] = s.first / s.second;
    return mean;
  };
  const auto u = per_endpoint_e2e(run_ok(uniform));
  const auto m = per_endpoint_e2e(run_ok(mixed));
  ASSERT_EQ(u.size(), 4u);
  ASSERT_EQ(m.size(), 4u);
  for (int64_t i : {0, 1}) EXPECT_NEAR(m.at(i), u.at(i), 0.1 * u.at(i)) << i;
  for (int64_t i : {2, 3}) {
    EXPECT_GT(m.at(i), 2.5 * u.at(i)) << i;
    EXPECT_LT(m.at(i), 3.5 * u.at(i)) << i;
  }
  // A least-loaded policy sends the slow replicas less (they hold each request longer).
  mixed.policy = "least_request";
  mixed.trace = 0;
  const auto lr = run_ok(mixed);
  EXPECT_EQ(lr.figures.ok, 400u);
  EXPECT_LT(lr.picks_min, 90);
  EXPECT_GT(lr.picks_max, 110);
  // Out of range: more slow replicas than replicas, a factor of 0.
  auto bad = small_fleet("sluice");
  bad.slow_replicas = 5;
  EXPECT_TRUE(std::holds_alternative<std::string>(run_fleet(bad)));
  bad.slow_replicas = 1;
  bad.slow_factor = 0;
  EXPECT_TRUE(std::holds_alternative<std::string>(run_fleet(bad)));
}

TEST(FleetSim, DeterministicForASeed) {
  auto a = run_ok(small_fleet("sluice"));
  auto b = run_ok(small_fleet("sluice"));
  EXPECT_EQ(workload::to_json(a.figures), workload::to_json(b.figures));
  EXPECT_EQ(a.steps, b.steps);
  auto c = small_fleet("sluice");
  c.seed = 4;
  EXPECT_NE(workload::to_json(run_ok(c).figures), workload::to_json(a.figures));
}

TEST(FleetSim, CacheAwarePoliciesHitMoreThanRoundRobin) {
  const auto rr = run_ok(small_fleet("round_robin"));
  const auto sl = run_ok(small_fleet("sluice"));
  const auto orc = run_ok(small_fleet("oracle"));
  EXPECT_GT(sl.prefix_hit_rate, rr.prefix_hit_rate + 0.1);
  EXPECT_GE(orc.prefix_hit_rate, rr.prefix_hit_rate);
  EXPECT_LT(sl.figures.ttft.mean, rr.figures.ttft.mean);
}

TEST(FleetSim, EveryPolicyRuns) {
  for (const char* p : {"random", "least_request", "power_of_two", "cache_aware", "llmd_default"}) {
    auto r = run_ok(small_fleet(p));
    EXPECT_EQ(r.figures.ok, 400u) << p;
  }
}

TEST(FleetSim, GatewayQueueHoldsRequestsAtTheCap) {
  auto c = small_fleet("least_request", 50);
  c.max_in_flight_per_endpoint = 2;
  auto r = run_ok(c);
  EXPECT_EQ(r.figures.ok, 400u);
  EXPECT_GT(r.figures.queue.max, 0.1);  // some waited at the gateway
  auto open = run_ok(small_fleet("least_request", 50));
  EXPECT_EQ(open.figures.queue.max, 0.0);
}

// The gateway queue is first come, first placed, as the live one: past capacity the engines' signals
// saturate the pool (16 waiting everywhere), requests queue, and a scrape that shows room lets an
// arrival be placed while older ones still wait unless it joins the queue behind them (fleetsim
// placed it first: round_robin at 40 req/s on shared_prefix came out at 0.78-0.84 of the live gateway's).
TEST(FleetSim, TheGatewayQueueIsFirstComeFirstPlaced) {
  auto c = small_fleet("round_robin", 40);
  c.workload = "shared_prefix,groups=32,prompts=8,system=2000,question=200,output=100";  // twice its capacity
  c.max_in_flight_per_endpoint = 256;  // the live default: the signals' saturation gates
  c.trace = 1;
  const auto r = run_ok(c);
  std::istringstream in(r.trace);
  simdjson::dom::parser parser;
  std::vector<std::pair<double, double>> arrived_placed;
  size_t queued = 0;
  for (std::string line; std::getline(in, line);) {
    simdjson::dom::element e;
    ASSERT_EQ(parser.parse(line).get(e), simdjson::SUCCESS) << line;
    const double arrival = double(e["arrival_ms"]), queue = double(e["queue_ms"]);
    queued += queue > 0;
    arrived_placed.emplace_back(arrival, arrival + queue);
  }
  ASSERT_EQ(arrived_placed.size(), 400u);
  EXPECT_GT(queued, 50u);  // the gate held many
  std::sort(arrived_placed.begin(), arrived_placed.end());
  size_t overtaken = 0;
  for (size_t i = 1; i < arrived_placed.size(); ++i) overtaken += arrived_placed[i].second < arrived_placed[i - 1].second - 0.002;  // the trace rounds to 1 us
  EXPECT_EQ(overtaken, 0u);
}

TEST(FleetSim, ClosedLoopConcurrency) {
  auto c = small_fleet("round_robin");
  c.arrivals.kind = workload::ArrivalKind::concurrency;
  c.arrivals.concurrency = 3;
  c.limits.max_requests = 60;
  auto r = run_ok(c);
  EXPECT_EQ(r.figures.ok, 60u);
}

TEST(FleetSim, TenantsAndLoraAndEmbeddings) {
  auto c = small_fleet("sluice");
  c.workload = "lora_mix,adapters=6,system=200,question=50,output=10";
  EXPECT_EQ(run_ok(c).figures.ok, 400u);
  c.workload = "tenants,input=100,output=10";
  auto t = run_ok(c);
  EXPECT_EQ(t.figures.tenants.size(), 4u);
  EXPECT_GT(t.figures.tenants["noisy"].requests, t.figures.tenants["tenant-1"].requests * 5);
}

TEST(FleetSim, TooLongPromptIsRejectedNotFatal) {
  auto c = small_fleet("round_robin");
  c.engine.max_model_len = 1000;
  auto r = run_ok(c);
  EXPECT_EQ(r.figures.ok, 0u);
  EXPECT_EQ(r.figures.by_status[400], 400u);
}

TEST(FleetSim, BadConfigIsAnError) {
  auto c = small_fleet("no_such_policy");
  auto r = run_fleet(c);
  ASSERT_TRUE(std::holds_alternative<std::string>(r));
  EXPECT_NE(std::get<std::string>(r).find("unknown policy"), std::string::npos);
  c = small_fleet("sluice");
  c.workload = "shared_prefix:nope";
  EXPECT_TRUE(std::holds_alternative<std::string>(run_fleet(c)));
  c = small_fleet("sluice");
  c.replicas = 0;
  EXPECT_TRUE(std::holds_alternative<std::string>(run_fleet(c)));
}

}  // namespace
}  // namespace sluice::fleetsim

namespace sluice::fleetsim {
namespace {

// The noisy-neighbour mix at 120 req/s on 4 replicas capped at 4 in flight: a gateway queue forms.
FleetConfig saturated_tenants() {
  auto c = small_fleet("least_request", 120);
  c.workload = "tenants,tenants=4,factor=10,input=300,output=50";
  c.max_in_flight_per_endpoint = 4;
  c.limits.max_requests = 1500;
  return c;
}

TEST(FleetSim, FairQueueProtectsQuietTenants) {
  auto c = saturated_tenants();
  auto fifo = run_ok(c);
  c.fair_queue = true;
  auto fair = run_ok(c);
  const auto quiet_fifo = fifo.figures.tenants["tenant-1"].ttft.p90;
  const auto quiet_fair = fair.figures.tenants["tenant-1"].ttft.p90;
  EXPECT_GT(fifo.figures.queue.max, 0.5);
  EXPECT_LT(quiet_fair, quiet_fifo / 2) << "fifo " << quiet_fifo << " fair " << quiet_fair;
  // The noisy tenant pays for its excess.
  EXPECT_GT(fair.figures.tenants["noisy"].ttft.p90, quiet_fair);
}

// The queue-time budget (--queue-ttl-ms): past it a queued request leaves with 503 instead of waiting
// on; no request that did get an endpoint waited longer than the budget. With the fair queue, and
// without tenants: the live gateway's implicit gate is the same AdmissionQueue (fleetsim's own FIFO
// before it waited without limit, where the live gateway answers 503 queue_timeout after 30 s).
TEST(FleetSim, QueueTimeBudgetShedsWhatWaitsTooLong) {
  for (const bool fair : {true, false}) {
    auto c = saturated_tenants();
    c.fair_queue = fair;
    const char* gate = fair ? "fair queue" : "implicit gate";
    auto patient = run_ok(c);  // the default budget, 30 s
    c.queue_ttl = std::chrono::milliseconds(200);
    auto shed = run_ok(c);
    EXPECT_EQ(patient.figures.by_status[503], 0u) << gate;
    EXPECT_GT(patient.figures.queue.max, 0.5) << gate;
    EXPECT_GT(shed.figures.by_status[503], 0u) << gate;
    EXPECT_LE(shed.figures.queue.max, 0.2 + 1e-9) << gate;
    EXPECT_LT(shed.figures.ttft.p90, patient.figures.ttft.p90) << gate;
    EXPECT_EQ(shed.figures.ok + shed.figures.by_status[503], 1500u) << gate;
  }
}

// Each gateway replica has its own admission queue (as live replicas do): the fair queue runs with
// several, and keeps protecting the quiet tenants on each.
TEST(FleetSim, EveryGatewayReplicaHasItsOwnFairQueue) {
  auto c = saturated_tenants();
  c.gateways = 2;
  auto fifo = run_ok(c);
  c.fair_queue = true;
  auto fair = run_ok(c);
  EXPECT_EQ(fair.figures.ok, 1500u);
  EXPECT_GT(fifo.figures.queue.max, 0.5);
  const auto quiet_fifo = fifo.figures.tenants["tenant-1"].ttft.p90;
  const auto quiet_fair = fair.figures.tenants["tenant-1"].ttft.p90;
  EXPECT_LT(quiet_fair, quiet_fifo / 2) << "fifo " << quiet_fifo << " fair " << quiet_fair;
}

// Light tenants (the noisy one sends 30x each of their tokens): with the VTC order alone their
// requests still wait for one of the noisy tenant's slots to free; the fair share of the slots keeps
// one ready (the live gateway's rule, admission/fair_share.h). The noisy tenant pays in throughput.
TEST(FleetSim, FairSharesKeepSlotsForLightTenants) {
  auto c = small_fleet("least_request", 60);
  c.workload = "tenants,tenants=4,factor=30,input=300,output=50";
  c.max_in_flight_per_endpoint = 4;
  c.limits.max_requests = 1500;
  c.fair_queue = true;
  c.fair_share = false;
  auto vtc_only = run_ok(c);
  c.fair_share = true;
  auto shares = run_ok(c);
  for (const char* t : {"tenant-1", "tenant-2", "tenant-3"}) {
    const auto& without = vtc_only.figures.tenants[t].ttft;
    const auto& with = shares.figures.tenants[t].ttft;
    EXPECT_LT(with.p50, without.p50 / 2) << t << ": p50 vtc only " << without.p50 << " s, fair shares " << with.p50;
    EXPECT_LT(with.p90, without.p90 / 1.5) << t << ": p90 vtc only " << without.p90 << " s, fair shares " << with.p90;
  }
  EXPECT_GT(shares.figures.tenants["noisy"].ttft.p90, vtc_only.figures.tenants["noisy"].ttft.p90);
}

}  // namespace
}  // namespace sluice::fleetsim

namespace sluice::fleetsim {
namespace {

// The work price (sluice's decode_bound_price, on by default): agent sessions whose contexts grow
// past 16k tokens, at 8 replicas, just past the fleet's decode capacity (36 req/s). Without it the
// policy's cold copies and crowded batches each looked free below the ITL pace, the extra prefill
// took the fleet over it together, and most requests missed the SLO (round 18's cliff). Until round
// 37 it tipped at 32 req/s (seed 4: attainment 0.43 without the price, 1.00 with it); since the
// pace is learned from streamed decodes too, an endpoint whose batch runs slower than the model
// says is priced so, and at 32 req/s the price-less run holds (1.00); at 36 it tips (seeds 4-6:
// 0.33-0.35 without the price, 0.81-0.88 with it). Shedding by the batch's expected misses (shed 2,
// the default) also holds the batches under the pace and hides the price's effect: both runs use
// shed 1, and with shed 2 the price-less run stays near the SLO too, having shed what the price
// would have spread. So does the ITL calibration (the price-less run with it: 0.74): both runs turn
// it off.
TEST(FleetSim, TheWorkPriceKeepsAgentSessionsInTheSloNearCapacity) {
  FleetConfig c;
  c.replicas = 8;
  c.policy = "sluice";
  c.workload = "agent_sessions,sessions=64";
  c.arrivals.rate = 36;
  c.limits.max_requests = 2000;
  c.seed = 4;
  c.policy_params["shed"] = 1;
  c.policy_params["itl_calibration"] = 0;
  const FleetResult on = run_ok(c);
  c.policy_params["decode_bound_price"] = 0;
  const FleetResult off = run_ok(c);
  EXPECT_GT(on.figures.slo_attainment, 0.75);
  EXPECT_LT(off.figures.slo_attainment, 0.5);
  EXPECT_GT(on.figures.goodput_rps, 2 * off.figures.goodput_rps);
  c.policy_params.erase("shed");
  const FleetResult off_shed2 = run_ok(c);
  EXPECT_GT(off_shed2.figures.slo_attainment, 0.75);
  EXPECT_GT(off_shed2.figures.reject_rate, on.figures.reject_rate);
  // Seed 4 alone sits near the line (0.78-0.80 since round 41's half step in progress); over seeds
  // 4-6 the price-less run with shed 2 holds 0.86.
  double attainment = off_shed2.figures.slo_attainment;
  for (const uint64_t seed : {5, 6}) {
    c.seed = seed;
    attainment += run_ok(c).figures.slo_attainment;
  }
  EXPECT_GT(attainment / 3, 0.8);
}

// Past its capacity, a fleet with half its replicas 2x slower under KV pressure (kv_pressure on
// 12,000-block replicas: ~45 req/s within the SLO) is held at its capacity by shedding only if the
// ITL that shedding tests is the one streams see: the model's read ~41 ms where the fast replicas'
// full KV (waits, preemptions) made it ~55 and the slow ones' ~100 (their pace read 1.5x), so sluice
// admitted ~60 req/s of which almost none met the SLO (seed 44 at 75 req/s: goodput 2.6; 45.4 with
// the calibration). Seeds 4-6 at 75 req/s: 43.4-46.0 with it, 3.1-3.3 without.
// The sluice policy on 8 replicas, 4 of them 2x slower, seed 4, 3,000 requests of `workload` at
// `rate` req/s: run as configured and again with the policy parameter `off` set to 0.
std::pair<FleetResult, FleetResult> mixed_fleet_on_off(const std::string& workload, double rate, const char* off,
                                                       int64_t num_blocks = 0, double whole_answers = 0) {
  FleetConfig c;
  c.replicas = 8;
  c.policy = "sluice";
  c.workload = workload;
  c.whole_answers = whole_answers;
  if (num_blocks > 0) c.engine.num_blocks = num_blocks;
  c.slow_replicas = 4;
  c.slow_factor = 2;
  c.arrivals.rate = rate;
  c.limits.max_requests = 3000;
  c.seed = 4;
  FleetResult on = run_ok(c);
  c.policy_params[off] = 0;
  return {std::move(on), run_ok(c)};
}

TEST(FleetSim, TheItlCalibrationHoldsAMixedFleetUnderKvPressureAtItsCapacity) {
  const auto [on, off] = mixed_fleet_on_off("kv_pressure,prefixes=1200", 75, "itl_calibration", 12000);
  EXPECT_GT(on.figures.goodput_rps, 35.0);
  EXPECT_GT(on.figures.slo_attainment, 0.5);
  EXPECT_LT(off.figures.goodput_rps, 0.5 * on.figures.goodput_rps);
}

// Lost causes (sluice_policy.h, the SLO): past capacity, a cost mix on a half-slow fleet (1% of
// requests are 50k-100k-token documents, 4-10 s of prefill each, most of the GPU time) holds its
// goodput when a document is held to its own time alone plus the SLO and refused as any request is;
// when documents were never refused they queued behind each other and crowded out the chats, which
// were refused instead (seeds 4-6 at 100 req/s: goodput 44.2-54.5 with it, 10.2-31.3 without; the
// requests refused 0.3-1.5% against 1.3-17%). The test asks seed 4 for > 35, under half without,
// and fewer refusals.
TEST(FleetSim, ACostMixHoldsPastCapacityWhenItsDocumentsAreHeldToTheirTimeAlone) {
  const auto [on, off] = mixed_fleet_on_off("cost_mix", 100, "lost_causes");
  EXPECT_GT(on.figures.goodput_rps, 35.0);
  EXPECT_LT(off.figures.goodput_rps, 0.5 * on.figures.goodput_rps);
  EXPECT_LT(on.figures.reject_rate, 0.03);
  EXPECT_LT(on.figures.reject_rate, off.figures.reject_rate);
}

// The engines' own ITL as the pace's samples (sluice_policy.h, pace): with no request streamed, a
// half-slow fleet's slow replicas showed the policy nothing until their first whole answers (~20
// s), and were priced as fast meanwhile: at 200 req/s of the hot prefix, past capacity, they served
// at ~2x the ITL SLO (seeds 4-6: goodput 55-58 with the engines' ITL, 42-44 without).
TEST(FleetSim, AHalfSlowFleetWithoutStreamsIsPricedFromTheEnginesItl) {
  const auto [on, off] = mixed_fleet_on_off("hot_prefix", 200, "engine_itl", 0, 1.0);
  EXPECT_GT(on.figures.goodput_rps, 50.0);
  EXPECT_LT(off.figures.goodput_rps, 0.85 * on.figures.goodput_rps);
}

// The picker's TTFT estimates against the TTFTs they were for (the live gateway's
// sluice_ttft_estimate_ratio): on a half-slow fleet, learned from the engines, the median request
// gets the TTFT it was expected to (1.0-1.04 on seeds 71-73 while it was written; round 41 removed a
// 1.1-1.4x bias); a profile that takes the engines for twice as fast as they are reads ~2x (2.09 with
// the engines' front end learned or held at 0: F would take a share of an error every prefill has, and
// is checked to stay past 1.15x). A policy without estimates has none (round robin).
TEST(FleetSim, TheTtftEstimatesAreCalibrated) {
  for (const char* w : {"hot_prefix", "agent_sessions", "tool_agent"}) {
    FleetConfig c;
    c.replicas = 8;
    c.policy = "sluice";
    c.workload = w;
    c.arrivals.rate = 40;
    c.limits.max_requests = 1500;
    c.seed = 74;
    c.slow_replicas = 4;
    c.slow_factor = 2;
    const auto r = run_ok(c);
    EXPECT_GT(r.ttft_estimate.requests, 1000) << w;  // (some shed on the half-slow fleet)
    EXPECT_GT(r.ttft_estimate.p50, 0.92) << w;
    EXPECT_LT(r.ttft_estimate.p50, 1.1) << w;
    EXPECT_LT(r.ttft_estimate.p90, 1.6) << w;
    EXPECT_LE(r.ttft_estimate.p10, r.ttft_estimate.p50);
    EXPECT_LE(r.ttft_estimate.p50, r.ttft_estimate.p90);
    if (std::string(w) == "agent_sessions") {
      c.slow_replicas = 0;
      auto fast = c;  // the engine model's step times halved in the policy's profile
      for (const auto& [k, v] : std::map<std::string, double>{{"c0_ms", 1.0}, {"w_ms", 2.75}, {"beta_ms", 0.011},
                                                              {"delta_ms", 0.01}, {"gamma_ms", 2.5e-5}, {"eps_ms", 7.5e-7}})
        fast.policy_params[k] = v;
      const auto right = run_ok(c), wrong = run_ok(fast);
      EXPECT_LT(right.ttft_estimate.p50, 1.1);
      EXPECT_GT(wrong.ttft_estimate.p50, 1.15);
      fast.policy_params["frontend_ms"] = 0;
      // The pool's own prefill pace (k) takes most of the profile's error away; without it the
      // estimate reads the whole of it.
      const double with_k = run_ok(fast).ttft_estimate.p50;
      EXPECT_LT(with_k, 1.55);
      fast.policy_params["pool_pace"] = 0;
      const double without_k = run_ok(fast).ttft_estimate.p50;
      EXPECT_GT(without_k, 1.6);
      EXPECT_LT(with_k, without_k - 0.3);
      c.policy = "round_robin";
      EXPECT_EQ(run_ok(c).ttft_estimate.requests, 0);
    }
  }
}

// The hot-prefix probe counts the replicas whose KV holds the hot prefix: round robin copies it onto
// every replica, and the JSON carries the series.
TEST(FleetSim, HotPrefixHoldersAreReported) {
  FleetConfig c;
  c.replicas = 4;
  c.policy = "round_robin";
  c.workload = "hot_prefix,hot_system=2000,groups=10,system=500,question=50,output=10";
  c.arrivals.rate = 40;
  c.limits.max_requests = 200;
  auto r = run_fleet(c);
  ASSERT_TRUE(std::holds_alternative<FleetResult>(r));
  const auto& res = std::get<FleetResult>(r);
  EXPECT_EQ(res.hot_group, "hot");
  EXPECT_GE(res.hot_prefix_blocks, 2000 / 16 - 1);
  EXPECT_EQ(res.hot_holders_max(), 4);
  EXPECT_NE(result_json(c, res).find("\"hot_prefix\":{\"group\":\"hot\""), std::string::npos);
}

// Issue 13, item 2: a hot prefix spreads when its demand rises and contracts when it falls. Its
// share of a constant 160 req/s rises from 10% to 70% for 10 s and falls back, on 16 replicas whose
// KV is under pressure (500 other groups of 2k on 4,000-block replicas, so a copy that is no longer
// used is evicted). sluice holds it on 3 replicas, copies it onto 10-12 in the surge, and afterwards
// sends it to fewer than hold it, so the unused copies age out (seeds 1-5: 8.7-9.9 holders over the
// last 10 s against a peak of 10-12). A policy that kept every copy busy (round robin: 14-16
// holders throughout) would keep them all.
TEST(FleetSim, AHotPrefixSpreadsInASurgeAndContractsAfterIt) {
  FleetConfig c;
  c.replicas = 16;
  c.policy = "sluice";
  c.workload = "hot_prefix,hot_share=0.1,surge_share=0.7,surge_start=1600,surge_end=3200,groups=500";
  c.engine.num_blocks = 4000;
  c.arrivals.rate = 160;
  c.limits.max_requests = 6400;
  const FleetResult r = run_ok(c);
  int before = 0, peak = 0;
  double late = 0;
  int late_n = 0;
  for (const HotPrefixSample& s : r.hot_samples) {
    if (s.t_s < 10) before = std::max(before, s.holders);
    else if (s.t_s < 20) peak = std::max(peak, s.holders);
    else if (s.t_s >= 30 && s.t_s < 40) late += s.holders, ++late_n;
  }
  ASSERT_GT(late_n, 5);
  late /= late_n;
  EXPECT_LE(before, 4);
  EXPECT_GE(peak, before + 5);  // spread by the surge
  EXPECT_LT(late, peak - 1.0);  // and contracted after it
}

// Issue 15: gateway replicas, each with its own index. With the learned index each gateway sees a
// quarter of the traffic and guesses; with the engines' KV events every gateway sees every
// engine's cache, and its predictions follow what the engines then report.
TEST(FleetSim, GatewayReplicasWithKvEventsRouteAsOne) {
  auto one = small_fleet("sluice");
  auto four = one;
  four.gateways = 4;
  auto four_ev = four;
  four_ev.kv_events = true;
  const auto r1 = run_ok(one);
  const auto r4 = run_ok(four);
  const auto r4e = run_ok(four_ev);
  for (const auto* r : {&r1, &r4, &r4e}) EXPECT_EQ(r->figures.ok, 400u);
  EXPECT_EQ(r4.kv_event_batches, 0);
  EXPECT_GT(r4e.kv_event_batches, 100);
  EXPECT_LT(r4.prefix_hit_rate, r1.prefix_hit_rate - 0.05);  // separate learned indexes collapse
  EXPECT_GT(r4e.prefix_hit_rate, r4.prefix_hit_rate + 0.05);
  EXPECT_GE(r4e.prefix_hit_rate, 0.95 * r1.prefix_hit_rate);
  ASSERT_GT(r4e.engine_cached_tokens, 0);
  const double pe = double(r4e.predicted_cached_tokens) / double(r4e.engine_cached_tokens);
  const double pl = double(r4.predicted_cached_tokens) / double(r4.engine_cached_tokens);
  EXPECT_LT(std::abs(pe - 1.0), std::abs(pl - 1.0));
  // Deterministic, and the delay is a real input.
  EXPECT_EQ(workload::to_json(run_ok(four_ev).figures), workload::to_json(r4e.figures));
  auto late = four_ev;
  late.kv_event_delay = std::chrono::seconds(5);
  EXPECT_NE(workload::to_json(run_ok(late).figures), workload::to_json(r4e.figures));
  auto bad = four;
  bad.gateways = 0;
  EXPECT_TRUE(std::holds_alternative<std::string>(run_fleet(bad)));
}

}  // namespace
}  // namespace sluice::fleetsim

namespace sluice::fleetsim {
namespace {

// A burst refused across gateway replicas (share_load) comes back spread as one replica's would:
// each refusal's work reaches the other replicas' shed backlog (peer_load.h), so their Retry-Afters
// add it. 40 distinct 4,000-token prompts at once over 4 gateways and 2 replicas, a 150 ms TTFT SLO,
// 2 client retries: 34 served (20 when each replica counted only its own refusals; 40 through 1).
TEST(FleetSim, ABurstRefusedAcrossGatewaysComesBackSpread) {
  FleetConfig c;
  c.replicas = 2;
  c.gateways = 4;
  c.share_load = true;
  c.policy = "sluice";
  c.policy_params = {{"ttft_slo_ms", 150}, {"itl_slo_ms", 50}};
  c.workload = "shared_prefix,groups=40,prompts=1,system=4000,question=16,output=4";
  c.arrivals.kind = workload::ArrivalKind::concurrency;
  c.arrivals.concurrency = 40;
  c.limits.max_requests = 40;
  c.client_retries = 2;
  const FleetResult r = run_ok(c);
  EXPECT_GE(r.figures.ok, 30u);
}

// Client retries (FleetConfig::client_retries): a request sluice sheds (429 over_slo) comes back
// after its Retry-After (the gateway's 1 s base, jittered), up to the limit, and only its last
// outcome is recorded. Some come back to a pool with room and are served, with the wait in their
// TTFT; without retries every shed request is simply gone. 3,000 requests (15 s of arrivals): in a
// run of 1,200 the shedding starts near its end and on most seeds every retry came back into the
// overload (0-3 served; 40-130 of 3,000 on seeds 1-5).
TEST(FleetSim, ShedRequestsComeBackAfterTheirRetryAfter) {
  FleetConfig c;
  c.replicas = 8;
  c.policy = "sluice";
  c.workload = "hot_prefix";
  c.arrivals.rate = 200;  // past the 8 replicas' ~115 req/s within the SLO
  c.limits.max_requests = 3000;
  c.seed = 3;
  const FleetResult gone = run_ok(c);
  c.client_retries = 2;
  c.trace = 1;
  const FleetResult back = run_ok(c);
  const FleetResult again = run_ok(c);
  ASSERT_GT(gone.figures.by_status.count(429), 0u) << "the load must be past what sluice serves within the SLO";
  const size_t shed = gone.figures.by_status.at(429);
  EXPECT_EQ(gone.client_retries, 0);
  EXPECT_EQ(back.figures.requests, 3000u);  // one record per request, however often it was sent
  EXPECT_GT(back.client_retries, 0);
  // Past capacity the retries' load takes about as many places as it fills (served retries are
  // counted below): the pool serves as much as without them, not less.
  EXPECT_GE(static_cast<double>(back.figures.ok), 0.98 * static_cast<double>(gone.figures.ok));
  // ... each after waiting out its Retry-After(s) (at least one engine step, 7.5 ms, each), which
  // its TTFT counts from the first attempt.
  std::istringstream lines(back.trace);
  int64_t served_retries = 0, traced_retries = 0;
  for (std::string line; std::getline(lines, line);) {
    simdjson::dom::parser parser;
    simdjson::dom::element e = parser.parse(line);
    const int64_t retries = e["retries"].get_int64();
    traced_retries += retries;
    if (retries > 0 && e["status"].get_int64() == 200) {
      ++served_retries;
      EXPECT_GE(double(e["ttft_ms"]), 7.5 * double(retries)) << line;
    }
  }
  EXPECT_GT(served_retries, 0);
  EXPECT_EQ(traced_retries, back.client_retries);
  const size_t still_shed = back.figures.by_status.count(429) ? back.figures.by_status.at(429) : 0;
  EXPECT_LE(back.client_retries, 2 * static_cast<int64_t>(shed + back.figures.ok));
  EXPECT_LT(still_shed, back.figures.requests - back.figures.ok + 1);
  EXPECT_EQ(again.client_retries, back.client_retries);  // deterministic for a seed
  EXPECT_EQ(again.figures.ok, back.figures.ok);
}

}  // namespace
}  // namespace sluice::fleetsim
