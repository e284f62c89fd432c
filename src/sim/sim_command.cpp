// `sluice sim`: N simulated vLLM replicas in one process, one loopback port each, all on one
// single-threaded io_context. Prints "replica i listening on HOST:PORT" per replica (flushed), so
// a test that asked for ephemeral ports (--base-port 0) can read them.
#include "sim/sim_command.h"

#include <CLI/CLI.hpp>
#include <boost/asio.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sys/resource.h>

#include <cstdio>
#include <memory>

#include "core/engine/cost_model.h"
#include "sim/replica.h"

namespace sluice {

namespace {

struct SimFlags {
  int replicas = 1;
  int base_port = 0;
  std::string host = "127.0.0.1";
  double time_scale = 1.0;
  std::string profile{engine::kDefaultProfile};
  int64_t kv_blocks = 0, max_num_seqs = 0, max_num_batched_tokens = 0, max_model_len = 0, long_prefill_token_threshold = 0;
  int max_loras = 4;
  double lora_load_ms = 30;
  int slow_replicas = 0;
  double slow_factor = 2.0;
  std::string model = "meta-llama/Llama-3.1-8B-Instruct";
  std::vector<std::string> adapters;
  std::string output_len = "lognormal:128:0.7";
  std::string prefix_caching = "on";
  std::string scheduling = "fcfs";
  std::string metrics_format = "vllm";
  uint64_t seed = 1;
  double jitter = 0.05;
  double frontend_overhead_ms = 20;
  std::string tokenizer = "sluice";
  // faults
  std::string fault_error_rate, fault_latency_spike, fault_metrics = "ok";
  bool fault_hang = false;
  double fault_exit_after = 0, fault_metrics_delay_ms = 1000;
  std::vector<int> fault_replicas;
  std::string kv_events_config, kv_events_encoding = "maps";
};

[[noreturn]] void fail(const std::string& msg) {
  fmt::print(stderr, "sluice sim: {}\n", msg);
  throw CLI::RuntimeError(2);
}

std::vector<sim::ReplicaConfig> build_configs(const SimFlags& f) {
  if (f.replicas < 1 || f.replicas > 1024) fail("--replicas must be within [1, 1024]");
  if (f.base_port < 0 || f.base_port + f.replicas - 1 > 65535) fail("--base-port out of range");
  if (!(f.time_scale > 0 && f.time_scale <= 1e6)) fail("--time-scale must be > 0");
  auto profile = engine::find_profile(f.profile);
  if (!profile) {
    std::string names;
    for (auto& n : engine::profile_names()) names += " " + n;
    fail("unknown --profile '" + f.profile + "' (known:" + names + ")");
  }
  engine::EngineConfig ec = engine::EngineConfig::from_profile(*profile);
  if (f.kv_blocks) ec.num_blocks = f.kv_blocks;
  if (f.max_num_seqs) ec.max_num_seqs = f.max_num_seqs;
  if (f.max_num_batched_tokens) ec.max_num_batched_tokens = f.max_num_batched_tokens;
  if (f.max_model_len) ec.max_model_len = f.max_model_len;
  ec.long_prefill_token_threshold = f.long_prefill_token_threshold;
  ec.max_loras = f.max_loras;
  ec.lora_load_ms = f.lora_load_ms;
  ec.cost.jitter_sigma = f.jitter;
  if (f.prefix_caching == "on") ec.prefix_caching = !ec.embedding;
  else if (f.prefix_caching == "off") ec.prefix_caching = false;
  else fail("--prefix-caching must be on or off");
  if (f.scheduling == "fcfs") ec.policy = engine::SchedulingPolicy::fcfs;
  else if (f.scheduling == "priority") ec.policy = engine::SchedulingPolicy::priority;
  else fail("--scheduling must be fcfs or priority");
  if (auto err = ec.validate(); !err.empty()) fail(err);
  if (f.slow_replicas < 0 || f.slow_replicas > f.replicas) fail("--slow-replicas must be within [0, --replicas]");
  if (!(f.slow_factor >= 0.1 && f.slow_factor <= 100)) fail("--slow-factor must be within [0.1, 100]");
  std::string err;
  auto out_len = engine::OutputLengthDist::parse(f.output_len, &err);
  if (!out_len) fail(err);
  auto flavor = sim::parse_metrics_flavor(f.metrics_format);
  if (!flavor) fail("--metrics-format must be vllm, sglang or trtllm");
  if (f.frontend_overhead_ms < 0) fail("--frontend-overhead-ms must be >= 0");
  if (f.tokenizer != "sluice" && f.tokenizer != "foreign") fail("--tokenizer must be sluice or foreign");
  if (f.model.empty()) fail("--model must not be empty");
  if (!f.adapters.empty() && f.max_loras == 0) fail("--adapters needs --max-loras > 0");

  sim::FaultConfig faults;
  if (!f.fault_error_rate.empty())
    if (auto e = faults.set_error_rates(f.fault_error_rate)) fail(*e);
  if (!f.fault_latency_spike.empty())
    if (auto e = faults.set_latency_spike(f.fault_latency_spike)) fail(*e);
  auto mf = sim::parse_metrics_fault(f.fault_metrics);
  if (!mf) fail("--fault-metrics must be ok, freeze, fail or slow");
  faults.metrics = *mf;
  faults.metrics_delay_ms = f.fault_metrics_delay_ms;
  faults.hang = f.fault_hang;
  for (int r : f.fault_replicas)
    if (r < 0 || r >= f.replicas) fail(fmt::format("--fault-replicas: no replica {}", r));

  sim::KvEventsConfig kv;
  if (!f.kv_events_config.empty()) {
    std::string err;
    auto parsed = sim::parse_kv_events_config(f.kv_events_config, err);
    if (!parsed) fail(err);
    kv = *parsed;
  }
  if (f.kv_events_encoding == "arrays") kv.encoding = kv::Encoding::arrays;
  else if (f.kv_events_encoding == "maps") kv.encoding = kv::Encoding::maps;
  else fail("--kv-events-encoding must be arrays or maps");

  std::vector<sim::ReplicaConfig> out;
  for (int i = 0; i < f.replicas; ++i) {
    sim::ReplicaConfig rc;
    rc.index = i;
    rc.host = f.host;
    rc.port = static_cast<uint16_t>(f.base_port ? f.base_port + i : 0);
    rc.engine = ec;
    if (i + f.slow_replicas >= f.replicas) rc.engine.cost = ec.cost.scaled(f.slow_factor);
    rc.engine.seed = f.seed * 1000003 + static_cast<uint64_t>(i);
    rc.model_name = f.model;
    rc.adapters = f.adapters;
    rc.output_len = *out_len;
    rc.time_scale = f.time_scale;
    rc.frontend_overhead_ms = f.frontend_overhead_ms;
    rc.foreign_tokenizer = f.tokenizer == "foreign";
    rc.metrics_flavor = *flavor;
    rc.seed = f.seed * 7919 + static_cast<uint64_t>(i);
    rc.kv_events = kv;
    const bool faulted =
        f.fault_replicas.empty() || std::find(f.fault_replicas.begin(), f.fault_replicas.end(), i) != f.fault_replicas.end();
    if (faulted) {
      rc.faults = faults;
      rc.exit_after_s = f.fault_exit_after;
    }
    out.push_back(std::move(rc));
  }
  return out;
}

// Thousands of concurrent streams need as many sockets: lift the soft descriptor limit to the hard one.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

void run(const SimFlags& flags) {
  auto configs = build_configs(flags);
  raise_fd_limit();
  boost::asio::io_context io(1);
  std::vector<std::unique_ptr<sim::Replica>> replicas;
  for (auto& rc : configs) {
    auto r = std::make_unique<sim::Replica>(io, rc);
    if (auto err = r->listen()) fail(fmt::format("replica {}: {}", rc.index, *err));
    std::printf("replica %d listening on %s:%u\n", rc.index, rc.host.c_str(), static_cast<unsigned>(r->port()));
    if (const auto* kv = r->kv_publisher())
      std::printf("replica %d kv events on %s replay %s\n", rc.index, kv->pub_address().c_str(),
                  kv->replay_address().empty() ? "-" : kv->replay_address().c_str());
    replicas.push_back(std::move(r));
  }
  std::fflush(stdout);
  for (auto& r : replicas) r->start();
  spdlog::info("sim: {} replica(s) of {} (profile {}), time scale {}", replicas.size(), flags.model, flags.profile,
               flags.time_scale);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec) return;
    for (auto& r : replicas) r->stop();
    io.stop();
  });
  io.run();
}

}  // namespace

void add_sim_command(CLI::App& app) {
  auto flags = std::make_shared<SimFlags>();
  auto* cmd = app.add_subcommand("sim", "Serve simulated vLLM-compatible replicas (no GPU needed)");
  cmd->add_option("--replicas", flags->replicas, "Number of replicas")->capture_default_str();
  cmd->add_option("--base-port", flags->base_port, "Port of replica 0 (replica i: base+i); 0 = ephemeral")
      ->capture_default_str();
  cmd->add_option("--host", flags->host, "Listen address")->capture_default_str();
  cmd->add_option("--time-scale", flags->time_scale, "Run the engine clock this many times faster than real time")
      ->capture_default_str();
  cmd->add_option("--profile", flags->profile, "Engine profile: llama-3-8b-h100, llama-3-70b-tp4, embedding")
      ->capture_default_str();
  cmd->add_option("--kv-blocks", flags->kv_blocks, "KV cache capacity in 16-token blocks (default: profile's)");
  cmd->add_option("--max-num-seqs", flags->max_num_seqs, "Max running sequences (default: profile's)");
  cmd->add_option("--max-num-batched-tokens", flags->max_num_batched_tokens, "Token budget per step");
  cmd->add_option("--max-model-len", flags->max_model_len, "Context length limit");
  cmd->add_option("--long-prefill-token-threshold", flags->long_prefill_token_threshold,
                  "At most this many of a step's tokens for one prefill, as vLLM's option (0: no cap, its default)")
      ->capture_default_str();
  cmd->add_option("--max-loras", flags->max_loras, "LoRA adapters resident at once (0 disables LoRA)")
      ->capture_default_str();
  cmd->add_option("--lora-load-ms", flags->lora_load_ms, "Adapter load latency")->capture_default_str();
  cmd->add_option("--model", flags->model, "Served model name")->capture_default_str();
  cmd->add_option("--adapters", flags->adapters, "Preloaded LoRA adapter names")->delimiter(',');
  cmd->add_option("--output-len", flags->output_len,
                  "Output length when max_tokens is absent: N, uniform:LO:HI, lognormal:MEDIAN:SIGMA")
      ->capture_default_str();
  cmd->add_option("--prefix-caching", flags->prefix_caching, "on|off")->capture_default_str();
  cmd->add_option("--scheduling", flags->scheduling, "fcfs|priority")->capture_default_str();
  cmd->add_option("--metrics-format", flags->metrics_format, "vllm|sglang|trtllm")->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Random seed")->capture_default_str();
  cmd->add_option("--jitter", flags->jitter, "Log-normal sigma of step-time jitter (0 = none)")->capture_default_str();
  cmd->add_option("--frontend-overhead-ms", flags->frontend_overhead_ms, "Added before queueing")->capture_default_str();
  cmd->add_option("--tokenizer", flags->tokenizer,
                  "sluice (the gateway's estimate is exact) | foreign (ids no estimate predicts, as a real tokenizer's)")
      ->capture_default_str();
  cmd->add_option("--fault-error-rate", flags->fault_error_rate, "e.g. 500=0.1,429=0.05,503=0,400=0.01");
  cmd->add_option("--fault-latency-spike", flags->fault_latency_spike, "P:MS, e.g. 0.1:800");
  cmd->add_flag("--fault-hang", flags->fault_hang, "Accept requests, never answer");
  cmd->add_option("--fault-exit-after", flags->fault_exit_after, "Stop the replica(s) after this many seconds");
  cmd->add_option("--slow-replicas", flags->slow_replicas,
                  "A mixed fleet: the last N replicas run every step --slow-factor times longer (an older GPU, same KV)")
      ->capture_default_str();
  cmd->add_option("--slow-factor", flags->slow_factor, "With --slow-replicas: their step-time multiplier")
      ->capture_default_str();
  cmd->add_option("--fault-metrics", flags->fault_metrics, "ok|freeze|fail|slow")->capture_default_str();
  cmd->add_option("--fault-metrics-delay-ms", flags->fault_metrics_delay_ms, "Delay of --fault-metrics slow")
      ->capture_default_str();
  cmd->add_option("--kv-events-config", flags->kv_events_config,
                  "vLLM's KV-event publisher JSON, e.g. {\"enable_kv_cache_events\":true,\"publisher\":\"zmq\","
                  "\"endpoint\":\"tcp://*:5557\",\"replay_endpoint\":\"tcp://*:5558\",\"topic\":\"\"} (ports + replica index)");
  cmd->add_option("--kv-events-encoding", flags->kv_events_encoding, "arrays (vLLM <= 0.25) | maps (>= 0.26)")
      ->capture_default_str();
  cmd->add_option("--fault-replicas", flags->fault_replicas, "Replicas the --fault-* flags apply to (default all)")
      ->delimiter(',');
  cmd->callback([flags] { run(*flags); });
}

}  // namespace sluice
