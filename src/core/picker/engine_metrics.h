// Maps an engine's Prometheus metrics to EngineSignals (model-server-contract.md).
//
//   signal        vLLM                                   SGLang                  trtllm-serve / Triton TRT-LLM
//   waiting       vllm:num_requests_waiting              sglang:num_queue_reqs   trtllm_num_requests_waiting / nv_trt_llm_request_metrics{request_type="waiting"}
//   running       vllm:num_requests_running              sglang:num_running_reqs trtllm_num_requests_running / {request_type="scheduled"}
//   KV usage      vllm:kv_cache_usage_perc, fallback     sglang:token_usage      trtllm_kv_cache_utilization / nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}
//                 vllm:gpu_cache_usage_perc
//   block size    vllm:cache_config_info{block_size}     sglang:cache_config_info{page_size}   trtllm_kv_cache_tokens_per_block / {kv_cache_block_type="tokens_per"}
//   KV blocks     vllm:cache_config_info{num_gpu_blocks} sglang:cache_config_info{num_pages}   trtllm_kv_cache_max_blocks / {kv_cache_block_type="max"}
//   LoRA          vllm:lora_requests_info{max_lora,running_lora_adapters,waiting_lora_adapters}:
//                 the sample with the largest value (unix time of its update) wins
//   prefix cache  vllm:prefix_cache_queries_total / _hits_total (tokens; fallback vllm:gpu_prefix_cache_*);
//                 SGLang: the sglang:cache_hit_rate gauge goes to prefix_hit_rate
//   duty cycle    DCGM_FI_PROF_GR_ENGINE_ACTIVE (fraction), else DCGM_FI_DEV_GPU_UTIL / 100 (mean over GPUs)
//
// Several samples of one gauge (data-parallel ranks, label `engine`) are summed for request counts,
// counters and KV blocks, and averaged for fractions. The endpoint's configured engine kind is tried
// first; when none of its waiting/running names is present the other kinds are tried, so a
// mislabelled endpoint still maps. No waiting/running series at all is an error (not an engine).
#pragma once
#include <optional>
#include <vector>
#include <string>

#include "core/config.h"
#include "core/picker/endpoint_state.h"
#include "core/prom_text.h"

namespace sluice {

struct EngineMetricsResult {
  EngineSignals signals;  // `present` and `scraped_at` are left for the caller
  bool recognized = false;
  EngineKind detected = EngineKind::vllm;
  std::string error;  // when !recognized
};

EngineMetricsResult map_engine_metrics(const PromText& metrics, EngineKind kind);

// The duty cycle from DCGM exporter gauges, when present (they may come from the engine's own
// /metrics in a simulator, or from a separate exporter URL).
// `gpus`: only samples whose `gpu` label is one of these (an endpoint's own GPUs on a node's
// exporter); empty: every GPU.
std::optional<double> map_duty_cycle(const PromText& metrics, const std::vector<std::string>& gpus = {});

}  // namespace sluice
