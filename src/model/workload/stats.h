// The figures every benchmark reports (../shared/reference/workloads.md), computed from one record
// per request, the same way for the live load generator and the fleet simulator:
//   TTFT, ITL = (E2E - TTFT) / (output tokens - 1) per request, E2E, gateway queue time:
//   p50 / p90 / p99 and mean over successful requests (percentiles interpolate linearly);
//   requests/s, input and output tokens/s over the run's span (first arrival to last completion);
//   goodput: successful requests/s that met every SLO (TTFT <= 1 s and ITL <= 50 ms by default;
//   ITL is not checked for single-token outputs); reject rate by status; engine-reported prefix hit
//   rate when the driver knows it; and per-tenant figures.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/time.h"

namespace sluice::workload {

struct RequestRecord {
  std::string tenant = "default";
  int status = 200;                // HTTP status; 0 = no response (connection error, timeout)
  Duration arrival{};              // when it was sent, from the run's start
  std::optional<Duration> ttft;    // send to first token (absent: no token arrived)
  Duration e2e{};                  // send to last byte
  Duration queue{};                // time waiting in the gateway before dispatch, when known
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  bool ok() const { return status >= 200 && status < 300; }
};

struct SloSpec {
  Duration ttft = std::chrono::seconds(1);
  Duration itl = std::chrono::milliseconds(50);
};

struct Distribution {
  size_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // seconds
};
Distribution distribution_of(std::vector<double> values);
// Linear interpolation between closest ranks, q in [0, 1]; `sorted` must be sorted.
double percentile(const std::vector<double>& sorted, double q);

struct TenantFigures {
  size_t requests = 0, ok = 0;
  int64_t input_tokens = 0, output_tokens = 0;
  double output_tokens_per_s = 0, goodput_rps = 0;
  Distribution ttft, e2e;
};

struct Figures {
  std::vector<std::pair<std::string, std::string>> labels;  // e.g. {"policy","sluice"}, {"rate","10"}
  size_t requests = 0, ok = 0;
  std::map<int, size_t> by_status;
  double span_s = 0;
  double requests_per_s = 0, input_tokens_per_s = 0, output_tokens_per_s = 0;
  double goodput_rps = 0, slo_attainment = 0;  // attainment: fraction of all requests meeting SLOs
  double reject_rate = 0;                      // fraction of requests without a 2xx
  Distribution ttft, itl, e2e, queue;
  std::optional<double> prefix_hit_rate;
  std::map<std::string, TenantFigures> tenants;
};

Figures summarize(std::span<const RequestRecord> records, const SloSpec& slo);

// {"labels":{...},"requests":..,"ttft_s":{"p50":..},...} on one line.
std::string to_json(const Figures& f);
// A fixed-width table, one row per Figures (label columns first).
std::string to_table(std::span<const Figures> rows);
// Per-tenant table of one run.
std::string tenant_table(const Figures& f);

}  // namespace sluice::workload
