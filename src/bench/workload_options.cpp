#include "bench/workload_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/time.h"

namespace sluice {

void add_workload_options(CLI::App& cmd, WorkloadOptions& o, const WorkloadOptionsHelp& help) {
  cmd.add_option("--workload", o.workload, help.workload)->capture_default_str();
  cmd.add_option("--arrival", o.arrival, "poisson | gamma | concurrency")->capture_default_str();
  cmd.add_option("--rate,--rates", o.rates, "Offered request rate(s) per second, comma-separated sweep")
      ->delimiter(',')
      ->capture_default_str();
  cmd.add_option("--burstiness", o.burstiness, "Gamma shape (1 = Poisson, < 1 burstier)")->capture_default_str();
  cmd.add_option("--concurrency", o.concurrency, "Requests in flight (--arrival concurrency)")->capture_default_str();
  cmd.add_option("--requests", o.requests, help.requests)->capture_default_str();
  cmd.add_option("--duration", o.duration_s, help.duration);
  cmd.add_option("--seed", o.seed, help.seed)->capture_default_str();
  cmd.add_option("--slo-ttft-ms", o.slo_ttft_ms, "Goodput SLO on TTFT")->capture_default_str();
  cmd.add_option("--slo-itl-ms", o.slo_itl_ms, "Goodput SLO on inter-token latency")->capture_default_str();
}

std::vector<double> sweep_rates(const WorkloadOptions& o, const workload::ArrivalSpec& arrivals) {
  return arrivals.kind == workload::ArrivalKind::concurrency ? std::vector<double>{0} : o.rates;
}

std::string rate_label(const workload::ArrivalSpec& arrivals) {
  return arrivals.kind == workload::ArrivalKind::concurrency ? fmt::format("c{}", arrivals.concurrency)
                                                             : fmt::format("{:g}", arrivals.rate);
}

std::variant<WorkloadRun, std::string> workload_run(const WorkloadOptions& o) {
  WorkloadRun r;
  if (!workload::parse_arrival_kind(o.arrival, r.arrivals.kind))
    return "--arrival must be poisson, gamma or concurrency, got '" + o.arrival + "'";
  r.arrivals.burstiness = o.burstiness;
  r.arrivals.concurrency = o.concurrency;
  r.limits.max_requests = o.requests;
  if (o.duration_s > 0) r.limits.max_duration = from_seconds(o.duration_s);
  r.slo.ttft = from_millis(o.slo_ttft_ms);
  r.slo.itl = from_millis(o.slo_itl_ms);
  return r;
}

}  // namespace sluice
