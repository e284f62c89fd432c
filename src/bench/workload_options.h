// The workload, arrival and SLO options that `sluice bench` (real time, against a URL) and
// `sluice fleetsim` (virtual time, simulated engines) share: declared and read in one place, so the
// two tools take the same workload spec the same way.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "model/workload/stats.h"
#include "model/workload/workload.h"

namespace CLI {
class App;
}

namespace sluice {

struct WorkloadOptions {
  std::string workload = "shared_prefix:small";
  std::string arrival = "poisson";
  std::vector<double> rates;  // the sweep (one run per rate; ignored with --arrival concurrency)
  double burstiness = 1.0;
  int concurrency = 8;
  int64_t requests = 100;
  double duration_s = 0;
  uint64_t seed = 1;
  double slo_ttft_ms = 1000, slo_itl_ms = 50;
};

// What differs between the tools: the help of the options whose meaning does.
struct WorkloadOptionsHelp {
  std::string workload, requests, duration, seed;
};

void add_workload_options(CLI::App& cmd, WorkloadOptions& o, const WorkloadOptionsHelp& help);

// One run's arrivals (rate 0: set per run), limits and SLO.
struct WorkloadRun {
  workload::ArrivalSpec arrivals;
  workload::WorkloadLimits limits;
  workload::SloSpec slo;
};

// The offered rates of the sweep: {0} (one run) for a closed loop.
std::vector<double> sweep_rates(const WorkloadOptions& o, const workload::ArrivalSpec& arrivals);
// A run's rate in the figures' labels: the offered rate, or c<concurrency> for a closed loop.
std::string rate_label(const workload::ArrivalSpec& arrivals);

// The options read into a run, or the error message of a bad one.
std::variant<WorkloadRun, std::string> workload_run(const WorkloadOptions& o);

}  // namespace sluice
