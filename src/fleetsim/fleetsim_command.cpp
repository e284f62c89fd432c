// `sluice fleetsim --policy round_robin,sluice --rates 2,4,8 --workload shared_prefix:llmd`
// runs every (policy, rate) pair on the same seed and workload, one after another (or --jobs in
// parallel), and prints one table row per run (or JSON lines with --json).
#include "fleetsim/fleetsim_command.h"

#include <atomic>
#include <fmt/format.h>
#include <fstream>
#include <mutex>
#include <thread>

#include "core/engine/cost_model.h"
#include "bench/workload_options.h"
#include "core/picker/policy_factory.h"
#include "fleetsim/fleet_sim.h"

namespace sluice {
namespace {

struct Flags {
  size_t replicas = 8;
  std::vector<std::string> policies{"sluice"};
  std::vector<std::string> policy_params;
  WorkloadOptions w{.rates = {4.0}, .concurrency = 16, .requests = 1000};
  std::string profile = std::string(engine::kDefaultProfile);
  int64_t kv_blocks = 0, max_num_seqs = 0, max_num_batched_tokens = 0, long_prefill_token_threshold = 0;
  int max_loras = 4;
  double lora_load_ms = 30, jitter = 0;
  size_t slow_replicas = 0;
  double slow_factor = 2.0;
  double whole_answers = 0;
  std::string prefix_caching = "on";
  double scrape_ms = 50, stale_ms = 500;
  int max_in_flight = 0;
  bool fair_queue = false;
  bool no_fair_share = false;
  double queue_ttl_ms = 30000;
  bool json = false, tenants = false;
  std::string json_out;
  std::string trace;
  bool trace_explain = false;
  int jobs = 1;
  std::vector<size_t> gateways{1};
  std::vector<std::string> index{"learned"};
  double kv_event_delay_ms = 10, kv_recent_window_ms = 2000;
  bool share_load = false;
  double share_load_delay_ms = 2, share_load_interval_ms = 5;
  int client_retries = 0;
};

std::variant<fleetsim::FleetConfig, std::string> base_config(const Flags& f) {
  fleetsim::FleetConfig c;
  c.replicas = f.replicas;
  if (f.slow_replicas > f.replicas) return std::string("--slow-replicas must be at most --replicas");
  if (!(f.slow_factor >= 0.1 && f.slow_factor <= 100)) return std::string("--slow-factor must be in [0.1, 100]");
  c.slow_replicas = f.slow_replicas;
  c.slow_factor = f.slow_replicas > 0 ? f.slow_factor : 1.0;
  if (!(f.whole_answers >= 0 && f.whole_answers <= 1)) return std::string("--whole-answers must be a share in [0, 1]");
  c.whole_answers = f.whole_answers;
  auto prof = engine::find_profile(f.profile);
  if (!prof) return "unknown profile '" + f.profile + "'";
  c.engine = engine::EngineConfig::from_profile(*prof);
  if (f.kv_blocks > 0) c.engine.num_blocks = f.kv_blocks;
  if (f.max_num_seqs > 0) c.engine.max_num_seqs = f.max_num_seqs;
  if (f.max_num_batched_tokens > 0) c.engine.max_num_batched_tokens = f.max_num_batched_tokens;
  c.engine.long_prefill_token_threshold = f.long_prefill_token_threshold;
  c.engine.max_loras = f.max_loras;
  c.engine.lora_load_ms = f.lora_load_ms;
  c.engine.cost.jitter_sigma = f.jitter;
  if (f.prefix_caching != "on" && f.prefix_caching != "off") return std::string("--prefix-caching is on|off");
  c.engine.prefix_caching = f.prefix_caching == "on";
  c.engine.seed = f.w.seed;
  for (const auto& kv : f.policy_params) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) return "--policy-param expects name=value, got '" + kv + "'";
    char* end = nullptr;
    const double v = std::strtod(kv.c_str() + eq + 1, &end);
    if (end == kv.c_str() + eq + 1 || *end) return "--policy-param " + kv + ": not a number";
    c.policy_params[kv.substr(0, eq)] = v;
  }
  c.scrape_interval = from_millis(f.scrape_ms);
  c.stale_after = from_millis(f.stale_ms);
  c.max_in_flight_per_endpoint = f.max_in_flight;
  c.fair_queue = f.fair_queue;
  c.fair_share = !f.no_fair_share;
  if (!(f.queue_ttl_ms > 0)) return std::string("--queue-ttl-ms must be positive");
  c.queue_ttl = from_millis(f.queue_ttl_ms);
  if (f.fair_queue && f.max_in_flight <= 0) return std::string("--fair-queue needs --max-in-flight (the gateway queue)");
  c.workload = f.w.workload;
  auto spec = workload_run(f.w);
  if (auto* e = std::get_if<std::string>(&spec)) return *e;
  c.arrivals = std::get<0>(spec).arrivals;
  c.limits = std::get<0>(spec).limits;
  c.slo = std::get<0>(spec).slo;
  c.seed = f.w.seed;
  c.kv_event_delay = from_millis(f.kv_event_delay_ms);
  c.kv_recent_window = from_millis(f.kv_recent_window_ms);
  c.share_load = f.share_load;
  c.share_load_delay = from_millis(f.share_load_delay_ms);
  c.share_load_interval = from_millis(f.share_load_interval_ms);
  if (f.client_retries < 0 || f.client_retries > 10) return std::string("--client-retries must be in [0, 10]");
  c.client_retries = f.client_retries;
  for (const auto& i : f.index)
    if (i != "learned" && i != "events") return "--index is learned|events, got '" + i + "'";
  return c;
}

std::string index_label(const fleetsim::FleetConfig& c) {
  return std::string(c.kv_events ? "events" : "learned") + (c.share_load ? "+load" : "");
}

int run(const Flags& f) {
  auto base = base_config(f);
  if (auto* e = std::get_if<std::string>(&base)) {
    fmt::print(stderr, "fleetsim: {}\n", *e);
    return 2;
  }
  std::vector<fleetsim::FleetConfig> runs;
  for (const auto& rate : sweep_rates(f.w, std::get<0>(base).arrivals))
    for (const auto& p : f.policies)
      for (const auto& idx : f.index)
        for (const size_t g : f.gateways) {
          auto c = std::get<0>(base);
          c.policy = p;
          c.arrivals.rate = rate;
          c.gateways = g;
          c.kv_events = idx == "events";
          c.trace = f.trace.empty() ? 0 : f.trace_explain ? 2 : 1;
          runs.push_back(c);
        }
  const bool multi =
      f.gateways.size() > 1 || f.gateways[0] != 1 || f.index.size() > 1 || f.index[0] != "learned" || f.share_load;
  std::vector<std::optional<fleetsim::FleetResult>> results(runs.size());
  std::vector<std::string> errors(runs.size());
  std::atomic<size_t> next{0};
  std::mutex print_mu;
  auto worker = [&] {
    for (size_t i; (i = next++) < runs.size();) {
      auto r = fleetsim::run_fleet(runs[i]);
      std::lock_guard lock(print_mu);
      if (auto* e = std::get_if<std::string>(&r)) {
        errors[i] = *e;
        fmt::print(stderr, "fleetsim: {} @ {}: {}\n", runs[i].policy, runs[i].arrivals.describe(), *e);
        continue;
      }
      auto& res = std::get<0>(r);
      res.figures.labels = {{"policy", runs[i].policy},
                            {"replicas", std::to_string(runs[i].replicas)},
                            {"rate", rate_label(runs[i].arrivals)}};
      if (multi) {
        res.figures.labels.emplace_back("gateways", std::to_string(runs[i].gateways));
        res.figures.labels.emplace_back("index", index_label(runs[i]));
      }
      if (!f.json)
        fmt::print(stderr, "  {} @ {}: {} requests, {:.0f} s virtual in {:.1f} s\n", runs[i].policy,
                   runs[i].arrivals.describe(), res.figures.requests, res.virtual_seconds, res.wall_seconds);
      results[i] = std::move(res);
    }
  };
  std::vector<std::thread> threads;
  for (int j = 1; j < std::max(1, f.jobs); ++j) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();

  std::vector<workload::Figures> rows;
  std::string json_lines;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!results[i]) continue;
    rows.push_back(results[i]->figures);
    json_lines += fleetsim::result_json(runs[i], *results[i]) + "\n";
  }
  if (f.json) {
    fmt::print("{}", json_lines);
  } else if (!rows.empty()) {
    fmt::print("workload: {}\n", results[0] ? results[0]->workload_description : f.w.workload);
    fmt::print("{}", workload::to_table(rows));
    const bool hot = results[0] && !results[0]->hot_group.empty();
    // The picker's calibration: first tokens' TTFT from the dispatch over the estimate (sluice).
    const bool est = std::ranges::any_of(results, [](const auto& r) { return r && r->ttft_estimate.requests > 0; });
    const auto est_cell = [](const fleetsim::FleetResult& r) {
      const auto& t = r.ttft_estimate;
      return t.requests > 0 ? fmt::format("  {:>24}", fmt::format("{:.2f}/{:.2f}/{:.2f}", t.p10, t.p50, t.p90))
                            : fmt::format("  {:>24}", "-");
    };
    fmt::print("\n{:>14}  {:>6}  {}{:>9}  {:>11}  {:>13}  {:>9}{}{}{}{}\n", "policy", "rate",
               multi ? fmt::format("{:>8}  {:>7}  ", "gateways", "index") : std::string(), "hit rate", "preemptions",
               "picks min/max", "mean kv", multi ? "  pred/engine cached" : "",
               hot ? "  hot holders mean/max (receivers/s)" : "", f.client_retries > 0 ? "  client retries" : "",
               est ? "  ttft got/expected p10/50/90" : "");
    for (size_t i = 0; i < runs.size(); ++i)
      if (results[i])
        fmt::print("{:>14}  {:>6}  {}{:>8.1f}%  {:>11}  {:>13}  {:>8.1f}%{}{}{}{}\n", runs[i].policy,
                   results[i]->figures.labels[2].second,
                   multi ? fmt::format("{:>8}  {:>7}  ", runs[i].gateways, index_label(runs[i]))
                         : std::string(),
                   results[i]->prefix_hit_rate * 100,
                   results[i]->preemptions, fmt::format("{}/{}", results[i]->picks_min, results[i]->picks_max),
                   results[i]->mean_kv_usage * 100,
                   multi ? fmt::format("  {:>18.3f}", results[i]->engine_cached_tokens
                                                         ? double(results[i]->predicted_cached_tokens) /
                                                               double(results[i]->engine_cached_tokens)
                                                         : 0.0)
                         : std::string(),
                   hot ? fmt::format("  {:>10.1f}/{} ({:.1f})", results[i]->hot_holders_mean(),
                                     results[i]->hot_holders_max(), results[i]->hot_receivers_mean())
                       : std::string(),
                   f.client_retries > 0 ? fmt::format("  {:>14}", results[i]->client_retries) : std::string(),
                   est ? est_cell(*results[i]) : std::string());
    if (f.tenants)
      for (size_t i = 0; i < runs.size(); ++i)
        if (results[i])
          fmt::print("\n{} @ {}\n{}", runs[i].policy, results[i]->figures.labels[2].second,
                     workload::tenant_table(results[i]->figures));
  }
  if (!f.json_out.empty()) {
    std::ofstream out(f.json_out);
    out << json_lines;
    if (!out) {
      fmt::print(stderr, "fleetsim: cannot write {}\n", f.json_out);
      return 1;
    }
  }
  if (!f.trace.empty()) {  // every run's requests, in the order of the runs
    std::ofstream out(f.trace);
    for (const auto& r : results)
      if (r) out << r->trace;
    if (!out) {
      fmt::print(stderr, "fleetsim: cannot write {}\n", f.trace);
      return 1;
    }
  }
  for (const auto& e : errors)
    if (!e.empty()) return 1;
  return 0;
}

}  // namespace

void add_fleetsim_command(CLI::App& app) {
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("fleetsim", "Compare picker policies on a simulated fleet in virtual time");
  cmd->add_option("--replicas", flags->replicas, "Simulated replicas")->capture_default_str()->check(CLI::Range(1, 10000));
  std::string policies;
  for (const auto& p : policy_names()) policies += p + ", ";
  cmd->add_option("--policy", flags->policies, "Policies to compare, comma-separated: " + policies + "oracle")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--policy-param", flags->policy_params, "Policy parameter name=value (repeatable)");
  add_workload_options(*cmd, flags->w,
                       {.workload = "Workload spec name[:preset][,key=value...]: shared_prefix[:llmd|llmd_low_cache|sglang|small|"
                                    "repetition], multi_turn, cost_mix, lora_mix, tenants, embeddings, replay,file=F, hot_prefix, "
                                    "agent_sessions, tool_agent, kv_pressure, fan_out",
                        .requests = "Requests per run",
                        .duration = "Stop arrivals after this many (virtual) seconds",
                        .seed = "Seed of the workload, arrivals, policies and engines"});
  cmd->add_option("--profile", flags->profile, "Engine profile")->capture_default_str();
  cmd->add_option("--kv-blocks", flags->kv_blocks, "KV blocks per replica (default: profile's)");
  cmd->add_option("--max-num-seqs", flags->max_num_seqs, "Max running sequences per replica");
  cmd->add_option("--max-num-batched-tokens", flags->max_num_batched_tokens, "Token budget per step");
  cmd->add_option("--long-prefill-token-threshold", flags->long_prefill_token_threshold,
                  "At most this many of a step's tokens for one prefill, as vLLM's option (0: no cap, its default)")
      ->capture_default_str();
  cmd->add_option("--slow-replicas", flags->slow_replicas,
                  "A mixed fleet: this many of the replicas (the last ones) run every step --slow-factor times longer, "
                  "an older GPU generation in the same pool (same KV capacity and cache config)")
      ->capture_default_str();
  cmd->add_option("--slow-factor", flags->slow_factor, "With --slow-replicas: their step-time multiplier")
      ->capture_default_str();
  cmd->add_option("--whole-answers", flags->whole_answers,
                  "This share of the requests asks for a whole answer (stream false): the gateway hears of it only "
                  "when the answer is complete")
      ->capture_default_str();
  cmd->add_option("--max-loras", flags->max_loras, "LoRA adapters resident at once")->capture_default_str();
  cmd->add_option("--lora-load-ms", flags->lora_load_ms, "Adapter load latency")->capture_default_str();
  cmd->add_option("--jitter", flags->jitter, "Log-normal sigma of step-time jitter")->capture_default_str();
  cmd->add_option("--prefix-caching", flags->prefix_caching, "on|off")->capture_default_str();
  cmd->add_option("--scrape-ms", flags->scrape_ms, "Metrics scrape interval")->capture_default_str();
  cmd->add_option("--stale-ms", flags->stale_ms, "Scraped metrics older than this are stale")->capture_default_str();
  cmd->add_option("--max-in-flight", flags->max_in_flight,
                  "Gateway in-flight cap per replica; beyond it requests queue at the gateway, as they do when every "
                  "replica's fresh signals show it saturated (0 = neither; the live gateway's default is 256, "
                  "pools[].max_in_flight_per_endpoint, with that saturation queue). The queue is the live gateway's "
                  "admission queue: first come, first placed (one tenant) unless --fair-queue; TTL --queue-ttl-ms")
      ->capture_default_str();
  cmd->add_flag("--fair-queue", flags->fair_queue,
                "Order the gateway queue by the admission layer's VTC fairness between tenants (TTL: --queue-ttl-ms), "
                "with fair shares of the slots");
  cmd->add_flag("--no-fair-share", flags->no_fair_share, "With --fair-queue: VTC order only, no fair shares of the slots");
  cmd->add_option("--queue-ttl-ms", flags->queue_ttl_ms,
                  "The gateway queue's time budget; a request queued longer leaves with 503 queue_timeout (the gateway's "
                  "admission.queue TTL, 30 s also without admission)")
      ->capture_default_str();
  cmd->add_option("--client-retries", flags->client_retries,
                  "Clients retry a refused request (429/503 with a Retry-After) after its Retry-After, this many times, "
                  "as the OpenAI SDKs do (2 by default there); its TTFT counts from the first attempt (0: a refused "
                  "request is gone)")
      ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print one JSON object per run instead of the table");
  cmd->add_option("--json-out", flags->json_out, "Also write the JSON lines to this file");
  cmd->add_option("--trace", flags->trace,
                  "Write one JSON line per request to this file (policy, rate, group, arrival, endpoint, "
                  "predicted and engine-cached tokens, status, TTFT, end to end)");
  cmd->add_flag("--trace-explain", flags->trace_explain,
                "With --trace: each line also carries the pick's explanation (every candidate's score and terms; "
                "the policy ranks twice per request, so random and power_of_two draw differently)");
  cmd->add_flag("--tenants", flags->tenants, "Print per-tenant figures");
  cmd->add_option("--jobs", flags->jobs, "Runs in parallel (threads)")->capture_default_str();
  cmd->add_option("--gateways", flags->gateways,
                  "Gateway replicas, round robin between them, each with its own index (comma-separated sweep)")
      ->delimiter(',')->capture_default_str()->check(CLI::Range(1, 64));
  cmd->add_option("--index", flags->index,
                  "Prefix index of each gateway: learned (its own dispatches) | events (the engines' KV events); "
                  "comma-separated sweep")
      ->delimiter(',')->capture_default_str();
  cmd->add_option("--kv-event-delay-ms", flags->kv_event_delay_ms,
                  "With --index events: engine step to events applied at every gateway")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-recent-window-ms", flags->kv_recent_window_ms,
                  "With --index events: a gateway's own dispatches count as cached this long (until events confirm)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_flag("--share-load", flags->share_load,
                "Gateways share their in-flight load (core/picker/peer_load.h): each reports its own accounting "
                "every --share-load-interval-ms, applied at the others --share-load-delay-ms later");
  cmd->add_option("--share-load-delay-ms", flags->share_load_delay_ms, "With --share-load: report sent to applied")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--share-load-interval-ms", flags->share_load_interval_ms,
                  "With --share-load: a gateway's reports at most this often (the live peer_load.interval_ms)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  cmd->callback([flags] {
    if (int rc = run(*flags); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sluice
