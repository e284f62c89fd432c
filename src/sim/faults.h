// Fault injection for one simulated replica: set by flags at start and changed at run time
// through `POST /admin/faults` (JSON, below). Every field is optional in an update; absent fields
// keep their value, `{"reset":true}` clears everything first.
//
//   {"error_rate": {"429": 0.1, "500": 0.05, "503": 0, "400": 0.02},  // per inference request
//    "latency_spike": {"probability": 0.1, "ms": 800},                // extra delay before queueing
//    "hang": true,            // accept requests, never answer (except /admin/*)
//    "exit": "replica"|"process",  // replica closes listener + connections / process exits
//    "metrics": "ok"|"freeze"|"fail"|"slow",                          // /metrics behaviour
//    "metrics_delay_ms": 500, // delay used by "slow"
//    "render": "ok"|"error"|"garbage"|"slow"|"missing",  // the render routes (/v1/*/completions/render):
//             500, a 200 that is not JSON, late by render_delay_ms, or 404 (a vLLM without them)
//    "render_delay_ms": 500,  // delay used by "slow"
//    "reset": true}
// "400" errors are vLLM's context-length error. Decisions draw from a seeded generator.
#pragma once
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace sluice::sim {

enum class MetricsFault { ok, freeze, fail, slow };
enum class ExitFault { none, replica, process };
enum class RenderFault { ok, error, garbage, slow, missing };

struct FaultConfig {
  double rate_429 = 0, rate_500 = 0, rate_503 = 0, rate_400 = 0;
  double spike_probability = 0;
  double spike_ms = 0;
  bool hang = false;
  ExitFault exit = ExitFault::none;
  MetricsFault metrics = MetricsFault::ok;
  double metrics_delay_ms = 1000;
  RenderFault render = RenderFault::ok;
  double render_delay_ms = 500;

  // Applies a JSON update; returns an error message (and changes nothing) when it is invalid.
  std::optional<std::string> apply_json(std::string_view body);
  // Parses "500=0.1,429=0.05" into the error rates.
  std::optional<std::string> set_error_rates(std::string_view spec);
  // Parses "P:MS", e.g. "0.1:800".
  std::optional<std::string> set_latency_spike(std::string_view spec);
  std::string to_json() const;
};

std::optional<MetricsFault> parse_metrics_fault(std::string_view s);

// Outcome for one inference request.
struct FaultDecision {
  int error_status = 0;   // 0 = no injected error
  double extra_delay_ms = 0;
};
FaultDecision decide(const FaultConfig& f, std::mt19937_64& rng);

}  // namespace sluice::sim
