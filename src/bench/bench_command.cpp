// `sluice bench --url http://127.0.0.1:8080 --workload shared_prefix:small --rates 5,10
//               --metrics-url http://127.0.0.1:8001/metrics,...`
// For each rate: reads the engines' prefix-cache counters, sends the workload, reads them again,
// and prints one table row (or a JSON line) with the figures and the engine-reported hit rate.
#include "bench/bench_command.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <fstream>

#include "bench/load_client.h"
#include "bench/workload_options.h"
#include "core/json_escape.h"
#include "core/picker/engine_metrics.h"
#include "core/prom_text.h"

namespace sluice {
namespace {

struct Flags {
  std::string url;
  std::string label = "target";
  WorkloadOptions w{.rates = {2.0}};
  std::vector<std::string> metrics_urls;
  double timeout_s = 600;
  double time_scale = 1.0;
  bool json = false, tenants = false, tenant_keys = false;
  std::string api_key, json_out, model;
};

struct PrefixCounters {
  double queries = 0, hits = 0;
  // `sluice sim`'s engine time lost to late wake-ups (sim/replica.h), summed over the replicas: a
  // live run on a loaded host whose simulator fell behind the step schedule; absent from real engines.
  double lag_dropped_s = 0;
  size_t read = 0;
};

PrefixCounters read_counters(const std::vector<std::string>& urls) {
  PrefixCounters c;
  for (const auto& u : urls) {
    std::string err;
    auto text = bench::http_get(u, err);
    if (!err.empty()) {
      fmt::print(stderr, "bench: metrics {}: {}\n", u, err);
      continue;
    }
    const auto prom = parse_prom_text(text);
    for (const auto& sample : prom.samples)
      if (sample.name == "sluice_sim_schedule_lag_dropped_seconds_total") c.lag_dropped_s += sample.value;
    auto m = map_engine_metrics(prom, EngineKind::vllm);
    if (!m.recognized) {
      fmt::print(stderr, "bench: metrics {}: {}\n", u, m.error);
      continue;
    }
    c.queries += m.signals.prefix_queries;
    c.hits += m.signals.prefix_hits;
    c.read += 1;
  }
  return c;
}

// The first model GET <url>/v1/models lists, for a run without --model (a workload's own base
// model name is rarely one the gateway serves); "" when the listing cannot be read (said on
// stderr). With tenants the listing needs a key: --api-key's, and it lists that key's models.
std::string first_listed_model(const std::string& url, const std::string& api_key) {
  std::string err;
  std::string base = url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (base.size() >= 3 && base.compare(base.size() - 3, 3, "/v1") == 0) base.resize(base.size() - 3);
  const auto text = bench::http_get(base + "/v1/models", err, std::chrono::seconds(5), api_key);
  if (!err.empty()) {
    fmt::print(stderr, "bench: no --model and {}/v1/models cannot be read ({}{}): sending the workload's model names\n",
               base, err, err == "status 401" && api_key.empty() ? "; the gateway wants a key: --api-key" : "");
    return {};
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(text).get(doc)) return {};
  simdjson::dom::array data;
  if (doc["data"].get_array().get(data) || data.size() == 0) return {};
  std::string_view id;
  if (data.at(0)["id"].get_string().get(id)) return {};
  return std::string(id);
}

int run(const Flags& f_in) {
  Flags f = f_in;
  auto target = bench::http_target(f.url);
  if (auto* e = std::get_if<std::string>(&target)) {
    fmt::print(stderr, "bench: --url: {}\n", *e);
    return 2;
  }
  if (f.model.empty()) {
    f.model = first_listed_model(f.url, f.api_key);
    if (!f.model.empty())
      fmt::print(stderr, "bench: no --model: sending `{}`, the first model {}/v1/models lists\n", f.model, f.url);
  }
  if (!(f.time_scale > 0)) {
    fmt::print(stderr, "bench: --time-scale must be positive\n");
    return 2;
  }
  bench::LoadOptions opt;
  opt.target = std::get<0>(target);
  opt.timeout = from_seconds(f.timeout_s);
  opt.time_scale = f.time_scale;
  opt.tenant_as_api_key = f.tenant_keys;
  opt.api_key = f.api_key;
  opt.model = f.model;
  if (!f.json) opt.progress_every_s = 10;  // a line every 10 s on stderr during long runs
  auto spec = workload_run(f.w);
  if (auto* e = std::get_if<std::string>(&spec)) {
    fmt::print(stderr, "bench: {}\n", *e);
    return 2;
  }
  const WorkloadRun& plan = std::get<0>(spec);
  workload::ArrivalSpec arr = plan.arrivals;

  std::vector<workload::Figures> rows;
  std::string json_lines, description;
  for (double rate : sweep_rates(f.w, arr)) {
    arr.rate = rate;
    auto wl = workload::make_workload(f.w.workload, arr, plan.limits, f.w.seed);
    if (auto* e = std::get_if<std::string>(&wl)) {
      fmt::print(stderr, "bench: {}\n", *e);
      return 2;
    }
    auto& w = *std::get<0>(wl);
    description = w.describe();
    const auto before = read_counters(f.metrics_urls);
    auto result = bench::run_load(w, opt);
    const auto after = read_counters(f.metrics_urls);
    auto fig = workload::summarize(result.records, plan.slo);
    fig.labels = {{"target", f.label}, {"rate", rate_label(arr)}};
    if (!f.metrics_urls.empty() && after.read == f.metrics_urls.size() && before.read == after.read &&
        after.queries > before.queries)
      fig.prefix_hit_rate = (after.hits - before.hits) / (after.queries - before.queries);
    if (!f.json) {
      std::string statuses;
      for (const auto& [st, n] : fig.by_status) statuses += fmt::format(" {}:{}", st == 0 ? "no-response" : std::to_string(st), n);
      fmt::print(stderr, "  {} @ {}: {} requests in {:.1f} s, status{}\n", f.label, arr.describe(), fig.requests,
                 result.wall_seconds, statuses);
    }
    const double lag_dropped = after.lag_dropped_s - before.lag_dropped_s;
    if (!f.json && lag_dropped > 0)
      fmt::print(stderr, "  the simulated fleet fell behind its step schedule: {:.2f} s of engine time lost (a loaded host)\n",
                 lag_dropped);
    std::string line = "{\"label\":" + json_string(f.label) + ",\"url\":" + json_string(f.url) +
                       ",\"workload\":" + json_string(description) + ",\"arrivals\":" + json_string(arr.describe()) +
                       fmt::format(",\"offered_rate\":{},\"seed\":{},\"time_scale\":{},\"wall_s\":{:.3f},", rate,
                                   f.w.seed, f.time_scale, result.wall_seconds) +
                       (f.metrics_urls.empty() ? std::string()
                                               : fmt::format("\"sim_lag_dropped_s\":{:.3f},", lag_dropped)) +
                       "\"figures\":" + workload::to_json(fig) + "}";
    json_lines += line + "\n";
    if (f.json) fmt::print("{}\n", line);
    rows.push_back(std::move(fig));
  }
  if (!f.json) {
    fmt::print("workload: {}\n{}", description, workload::to_table(rows));
    if (f.tenants)
      for (const auto& r : rows) fmt::print("\n{} @ {}\n{}", r.labels[0].second, r.labels[1].second, workload::tenant_table(r));
  }
  if (!f.json_out.empty()) {
    std::ofstream out(f.json_out);
    out << json_lines;
    if (!out) {
      fmt::print(stderr, "bench: cannot write {}\n", f.json_out);
      return 1;
    }
  }
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto flags = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("bench", "Open-loop HTTP load generator with the field's workloads");
  cmd->add_option("--url", flags->url, "Base URL of the gateway or engine, e.g. http://127.0.0.1:8080")->required();
  cmd->add_option("--label", flags->label, "Name of this target in the output")->capture_default_str();
  add_workload_options(*cmd, flags->w,
                       {.workload = "Workload spec name[:preset][,key=value...] (see sluice fleetsim --help)",
                        .requests = "Requests per rate",
                        .duration = "Stop sending after this many seconds (engine time)",
                        .seed = "Workload seed"});
  cmd->add_option("--metrics-url", flags->metrics_urls,
                  "Engine /metrics URLs (comma-separated) for the engine-reported prefix hit rate")
      ->delimiter(',');
  cmd->add_option("--timeout", flags->timeout_s, "Per-request timeout in seconds (real time)")->capture_default_str();
  cmd->add_option("--time-scale", flags->time_scale,
                  "The simulator's --time-scale: send this many times faster, report in engine time")
      ->capture_default_str();
  cmd->add_flag("--tenant-keys", flags->tenant_keys, "Send each request's tenant name as its Bearer API key");
  cmd->add_option("--api-key", flags->api_key, "Bearer API key for every request");
  cmd->add_option("--model", flags->model,
                  "Model name to send instead of the workload's base model (default: the first model the target's "
                  "/v1/models lists)");
  cmd->add_flag("--json", flags->json, "Print one JSON object per rate instead of the table");
  cmd->add_option("--json-out", flags->json_out, "Also write the JSON lines to this file");
  cmd->add_flag("--tenants", flags->tenants, "Print per-tenant figures");
  cmd->callback([flags] {
    if (int rc = run(*flags); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace sluice
