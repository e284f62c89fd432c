#include "sim/metrics_format.h"

#include <fmt/format.h>

#include <cmath>

#include "core/prom_writer.h"
#include "sim/openai_format.h"

namespace sluice::sim {

std::optional<MetricsFlavor> parse_metrics_flavor(std::string_view s) {
  if (s == "vllm") return MetricsFlavor::vllm;
  if (s == "sglang") return MetricsFlavor::sglang;
  if (s == "trtllm") return MetricsFlavor::trtllm;
  return std::nullopt;
}

void LoraInfoHistory::update(std::string running, std::string waiting, double unix_now) {
  for (auto it = samples_.begin(); it != samples_.end(); ++it) {
    if (it->running == running && it->waiting == waiting) {
      samples_.erase(it);
      break;
    }
  }
  samples_.push_back({std::move(running), std::move(waiting), unix_now});
  if (samples_.size() > kKeep) samples_.erase(samples_.begin());
}

std::string prom_float(double v) { return format_prom_value(v, PromFloats::python); }

namespace {

// One histogram family: HELP/TYPE, then its samples. `labels` are placed before le (le sorts
// after engine, before model_name in vLLM; order is free).
void histogram_family(PromWriter& w, std::string_view name, std::string_view help, std::string_view labels,
                      const HistogramData& h) {
  w.family(name, "histogram", help);
  w.histogram(name, labels, h);
}

std::string label_value(std::string_view v) {
  std::string q;
  append_prom_label_value(q, v);
  return q;
}

void render_dcgm(PromWriter& w, const MetricsInput& in) {
  const std::string labels = fmt::format(R"(device="nvidia{}",gpu="{}")", in.gpu_index, in.gpu_index);
  w.family("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.");
  w.sample("DCGM_FI_PROF_GR_ENGINE_ACTIVE", labels, in.duty_cycle);
  w.family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).");
  w.sample("DCGM_FI_DEV_GPU_UTIL", labels, std::round(in.duty_cycle * 100.0));
}

void render_vllm(PromWriter& w, const MetricsInput& in) {
  const auto& s = *in.stats;
  const auto& c = s.counters;
  const std::string L = fmt::format(R"(engine="0",model_name="{}")", label_value(in.model_name));
  w.family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
  w.sample("vllm:num_requests_running", L, double(s.num_running));
  w.family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  w.sample("vllm:num_requests_waiting", L, double(s.num_waiting));
  w.family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
  w.sample("vllm:kv_cache_usage_perc", L, s.kv_usage);
  w.family("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.");
  w.sample("vllm:prefix_cache_queries_total", L, double(c.prefix_queries));
  w.family("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.");
  w.sample("vllm:prefix_cache_hits_total", L, double(c.prefix_hits));
  w.family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.");
  w.sample("vllm:num_preemptions_total", L, double(c.preemptions));
  w.family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
  w.sample("vllm:prompt_tokens_total", L, double(c.prompt_tokens));
  w.family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
  w.sample("vllm:generation_tokens_total", L, double(c.generation_tokens));
  w.family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  const std::pair<const char*, int64_t> reasons[] = {
      {"stop", c.finished_stop}, {"length", c.finished_length}, {"abort", c.finished_abort}};
  for (auto [reason, n] : reasons)
    w.sample("vllm:request_success_total",
             fmt::format(R"(engine="0",finished_reason="{}",model_name="{}")", reason, label_value(in.model_name)),
             double(n));
  histogram_family(w, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
              s.histograms.ttft);
  histogram_family(w, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", L,
              s.histograms.itl);
  histogram_family(w, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", L,
              s.histograms.e2e);
  histogram_family(w, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", L,
              s.histograms.queue);
  w.family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  w.sample("vllm:cache_config_info",
           fmt::format(R"(block_size="{}",cache_dtype="auto",enable_prefix_caching="{}",engine="0",)"
                       R"(gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="{}")",
                       in.block_size, in.prefix_caching ? "True" : "False", s.num_blocks),
           1.0);
  if (in.max_loras > 0 && in.lora) {
    w.family("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
    for (const auto& smp : in.lora->samples())
      w.sample("vllm:lora_requests_info",
               fmt::format(R"(max_lora="{}",running_lora_adapters="{}",waiting_lora_adapters="{}")", in.max_loras,
                           label_value(smp.running), label_value(smp.waiting)),
               smp.unix_time);
  }
}

void render_sglang(PromWriter& w, const MetricsInput& in) {
  const auto& s = *in.stats;
  const auto& c = s.counters;
  const std::string L = fmt::format(R"(model_name="{}")", label_value(in.model_name));
  w.family("sglang:num_running_reqs", "gauge", "The number of running requests.");
  w.sample("sglang:num_running_reqs", L, double(s.num_running));
  w.family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.");
  w.sample("sglang:num_queue_reqs", L, double(s.num_waiting));
  w.family("sglang:token_usage", "gauge", "The token usage.");
  w.sample("sglang:token_usage", L, s.kv_usage);
  w.family("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.");
  w.sample("sglang:cache_hit_rate", L, c.prefix_queries ? double(c.prefix_hits) / double(c.prefix_queries) : 0.0);
  w.family("sglang:cache_config_info", "gauge", "Cache configuration.");
  w.sample("sglang:cache_config_info",
           fmt::format(R"(model_name="{}",num_pages="{}",page_size="{}")", label_value(in.model_name), s.num_blocks,
                       in.block_size),
           1.0);
  w.family("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
  w.sample("sglang:prompt_tokens_total", L, double(c.prompt_tokens));
  w.family("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.");
  w.sample("sglang:generation_tokens_total", L, double(c.generation_tokens));
  w.family("sglang:num_requests_total", "counter", "The number of processed requests.");
  w.sample("sglang:num_requests_total", L, double(c.finished_stop + c.finished_length + c.finished_abort));
  histogram_family(w, "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
              s.histograms.ttft);
  histogram_family(w, "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", L,
              s.histograms.itl);
  histogram_family(w, "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", L,
              s.histograms.e2e);
}

void render_trtllm(PromWriter& w, const MetricsInput& in) {
  const auto& s = *in.stats;
  const auto& c = s.counters;
  const std::string L = fmt::format(R"(model_name="{}")", label_value(in.model_name));
  w.family("trtllm_num_requests_waiting", "gauge", "Number of requests waiting.");
  w.sample("trtllm_num_requests_waiting", L, double(s.num_waiting));
  w.family("trtllm_num_requests_running", "gauge", "Number of requests running.");
  w.sample("trtllm_num_requests_running", L, double(s.num_running));
  w.family("trtllm_kv_cache_utilization", "gauge", "KV cache utilization, 0..1.");
  w.sample("trtllm_kv_cache_utilization", L, s.kv_usage);
  w.family("trtllm_kv_cache_tokens_per_block", "gauge", "Tokens per KV cache block.");
  w.sample("trtllm_kv_cache_tokens_per_block", L, double(in.block_size));
  w.family("trtllm_kv_cache_max_blocks", "gauge", "Maximum number of KV cache blocks.");
  w.sample("trtllm_kv_cache_max_blocks", L, double(s.num_blocks));
  w.family("trtllm_request_success_total", "counter", "Count of successfully processed requests.");
  w.sample("trtllm_request_success_total", L, double(c.finished_stop + c.finished_length));
  histogram_family(w, "trtllm_time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
              s.histograms.ttft);
  histogram_family(w, "trtllm_e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", L,
              s.histograms.e2e);
}

}  // namespace

std::string render_metrics(MetricsFlavor flavor, const MetricsInput& in) {
  std::string out;
  out.reserve(16384);
  PromWriter w(out, PromFloats::python);  // Python-client number style, like the engines imitated
  switch (flavor) {
    case MetricsFlavor::vllm: render_vllm(w, in); break;
    case MetricsFlavor::sglang: render_sglang(w, in); break;
    case MetricsFlavor::trtllm: render_trtllm(w, in); break;
  }
  render_dcgm(w, in);
  w.family("sluice_sim_schedule_lag_dropped_seconds_total", "counter",
           "Engine time the simulator's step schedule gave up because the host woke it too late.");
  w.sample("sluice_sim_schedule_lag_dropped_seconds_total", std::string_view{}, in.lag_dropped_s);
  return out;
}

}  // namespace sluice::sim
