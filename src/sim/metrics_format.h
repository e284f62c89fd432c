// Renders one simulated replica's /metrics in Prometheus text format (0.0.4), named like vLLM v1
// (default), SGLang or trtllm-serve, so the gateway's metric mapping can be tested against each.
//
// vLLM: every engine series carries labels engine="0" and model_name; counters are exposed with
// `_total`; histograms use vLLM's buckets; `vllm:cache_config_info` is a gauge of value 1;
// `vllm:lora_requests_info` (only with LoRA enabled, no model_name label) has the unix time of
// its last update as value, with one sample per label set seen recently (readers take the largest).
// All flavours add the duty cycle as DCGM_FI_PROF_GR_ENGINE_ACTIVE (fraction) and
// DCGM_FI_DEV_GPU_UTIL (percent), and the simulator's own sluice_sim_schedule_lag_dropped_seconds_total
// (engine time lost to a host too loaded to keep the step schedule; what `sluice bench` reports).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/engine/engine.h"

namespace sluice::sim {

enum class MetricsFlavor { vllm, sglang, trtllm };
std::optional<MetricsFlavor> parse_metrics_flavor(std::string_view s);

// Label sets of vllm:lora_requests_info with the unix time each was last current.
class LoraInfoHistory {
 public:
  struct Sample {
    std::string running, waiting;
    double unix_time = 0;
  };
  void update(std::string running, std::string waiting, double unix_now);
  const std::vector<Sample>& samples() const { return samples_; }

 private:
  std::vector<Sample> samples_;  // most recent last; at most kKeep
  static constexpr size_t kKeep = 8;
};

struct MetricsInput {
  const engine::EngineStats* stats = nullptr;
  std::string model_name;
  int gpu_index = 0;
  int block_size = 16;
  bool prefix_caching = true;
  int max_loras = 0;  // 0 = LoRA disabled
  const LoraInfoHistory* lora = nullptr;
  double duty_cycle = 0;  // fraction of recent time spent in steps
  double lag_dropped_s = 0;  // engine time the step schedule gave up to late wake-ups (replica.h)
};

std::string render_metrics(MetricsFlavor flavor, const MetricsInput& in);

// Prometheus/Python style float: 3 -> "3.0", +Inf -> "+Inf".
std::string prom_float(double v);

}  // namespace sluice::sim
