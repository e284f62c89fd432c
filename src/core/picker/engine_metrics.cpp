#include "core/picker/engine_metrics.h"

#include <charconv>
#include <cmath>

namespace sluice {
namespace {

// Sum / mean of the finite values of the samples matching a predicate.
struct Acc {
  double sum = 0;
  int n = 0;
  void add(double v) {
    if (std::isfinite(v)) {
      sum += v;
      ++n;
    }
  }
  bool any() const { return n > 0; }
  double mean() const { return n ? sum / n : 0; }
};

Acc collect(const PromText& m, std::string_view name, std::string_view label = {}, std::string_view label_value = {}) {
  Acc a;
  for (const auto& s : m.samples) {
    if (s.name != name) continue;
    if (!label.empty()) {
      const std::string* v = s.label(label);
      if (!v || *v != label_value) continue;
    }
    a.add(s.value);
  }
  return a;
}

std::optional<int64_t> to_int(const std::string* s) {
  if (!s) return std::nullopt;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
  if (ec != std::errc() || p != s->data() + s->size() || v < 0) return std::nullopt;
  return v;
}

std::vector<std::string> split_csv(const std::string* s) {
  std::vector<std::string> out;
  if (!s) return out;
  size_t b = 0;
  while (b <= s->size()) {
    size_t e = s->find(',', b);
    if (e == std::string::npos) e = s->size();
    std::string part = s->substr(b, e - b);
    while (!part.empty() && part.front() == ' ') part.erase(part.begin());
    while (!part.empty() && part.back() == ' ') part.pop_back();
    if (!part.empty()) out.push_back(std::move(part));
    b = e + 1;
  }
  return out;
}

double clamp01(double v) { return v < 0 ? 0 : (v > 1 ? 1 : v); }

// cache_config_info-style series: block size from the first sample, blocks summed over ranks.
void read_cache_config(const PromText& m, std::string_view name, std::string_view size_label,
                       std::string_view blocks_label, EngineSignals& out) {
  int64_t blocks = 0;
  bool size_set = false;
  for (const auto& s : m.samples) {
    if (s.name != name) continue;
    if (auto bs = to_int(s.label(size_label)); bs && *bs > 0 && *bs <= 1 << 20 && !size_set) {
      out.block_size = static_cast<int>(*bs);
      size_set = true;
    }
    if (auto nb = to_int(s.label(blocks_label)); nb && *nb < (int64_t{1} << 40)) blocks += *nb;
  }
  if (blocks > 0) out.kv_capacity_blocks = blocks;
}

// An inter-token latency histogram's _sum and _count, summed over its series (data-parallel ranks,
// models): both present, finite and not negative, or left unknown.
void read_itl(const PromText& m, std::string_view name, EngineSignals& out) {
  const std::string base(name);
  const Acc sum = collect(m, base + "_sum"), count = collect(m, base + "_count");
  if (!sum.any() || !count.any() || sum.sum < 0 || count.sum < 0) return;
  out.itl_sum_s = sum.sum;
  out.itl_count = count.sum;
}

bool map_vllm(const PromText& m, EngineSignals& out) {
  Acc waiting = collect(m, "vllm:num_requests_waiting"), running = collect(m, "vllm:num_requests_running");
  if (!waiting.any() && !running.any()) return false;
  out.waiting = waiting.sum;
  out.running = running.sum;
  Acc kv = collect(m, "vllm:kv_cache_usage_perc");
  if (!kv.any()) kv = collect(m, "vllm:gpu_cache_usage_perc");
  out.kv_usage = clamp01(kv.mean());
  read_cache_config(m, "vllm:cache_config_info", "block_size", "num_gpu_blocks", out);
  Acc q = collect(m, "vllm:prefix_cache_queries_total"), h = collect(m, "vllm:prefix_cache_hits_total");
  if (!q.any()) q = collect(m, "vllm:gpu_prefix_cache_queries_total");
  if (!h.any()) h = collect(m, "vllm:gpu_prefix_cache_hits_total");
  out.prefix_queries = q.sum;
  out.prefix_hits = h.sum;
  read_itl(m, "vllm:inter_token_latency_seconds", out);
  if (out.itl_count < 0) read_itl(m, "vllm:time_per_output_token_seconds", out);  // its name before vLLM 0.11
  // LoRA: the sample with the largest value (the time of its last update) is the current one.
  const PromSample* lora = nullptr;
  for (const auto& s : m.samples)
    if (s.name == "vllm:lora_requests_info" && std::isfinite(s.value) && (!lora || s.value > lora->value)) lora = &s;
  if (lora) {
    out.max_lora = static_cast<int>(to_int(lora->label("max_lora")).value_or(0));
    out.lora_running = split_csv(lora->label("running_lora_adapters"));
    out.lora_waiting = split_csv(lora->label("waiting_lora_adapters"));
  }
  return true;
}

bool map_sglang(const PromText& m, EngineSignals& out) {
  Acc waiting = collect(m, "sglang:num_queue_reqs"), running = collect(m, "sglang:num_running_reqs");
  if (!waiting.any() && !running.any()) return false;
  out.waiting = waiting.sum;
  out.running = running.sum;
  out.kv_usage = clamp01(collect(m, "sglang:token_usage").mean());
  read_cache_config(m, "sglang:cache_config_info", "page_size", "num_pages", out);
  if (Acc hr = collect(m, "sglang:cache_hit_rate"); hr.any()) out.prefix_hit_rate = clamp01(hr.mean());
  read_itl(m, "sglang:inter_token_latency_seconds", out);
  return true;
}

bool map_trtllm(const PromText& m, EngineSignals& out) {
  Acc waiting = collect(m, "trtllm_num_requests_waiting"), running = collect(m, "trtllm_num_requests_running");
  if (waiting.any() || running.any()) {
    out.waiting = waiting.sum;
    out.running = running.sum;
    out.kv_usage = clamp01(collect(m, "trtllm_kv_cache_utilization").mean());
    if (Acc bs = collect(m, "trtllm_kv_cache_tokens_per_block"); bs.any() && bs.mean() >= 1 && bs.mean() <= 1 << 20)
      out.block_size = static_cast<int>(bs.mean());
    if (Acc nb = collect(m, "trtllm_kv_cache_max_blocks"); nb.any() && nb.sum >= 1 && nb.sum < 1e12)
      out.kv_capacity_blocks = static_cast<int64_t>(nb.sum);
    return true;
  }
  // Triton's TensorRT-LLM backend.
  const char* req = "nv_trt_llm_request_metrics";
  const char* kvm = "nv_trt_llm_kv_cache_block_metrics";
  waiting = collect(m, req, "request_type", "waiting");
  running = collect(m, req, "request_type", "scheduled");
  if (!waiting.any() && !running.any()) return false;
  out.waiting = waiting.sum;
  out.running = running.sum;
  out.kv_usage = clamp01(collect(m, kvm, "kv_cache_block_type", "fraction").mean());
  if (Acc bs = collect(m, kvm, "kv_cache_block_type", "tokens_per"); bs.any() && bs.mean() >= 1 && bs.mean() <= 1 << 20)
    out.block_size = static_cast<int>(bs.mean());
  if (Acc nb = collect(m, kvm, "kv_cache_block_type", "max"); nb.any() && nb.sum >= 1 && nb.sum < 1e12)
    out.kv_capacity_blocks = static_cast<int64_t>(nb.sum);
  return true;
}

bool map_kind(const PromText& m, EngineKind kind, EngineSignals& out) {
  switch (kind) {
    case EngineKind::vllm: return map_vllm(m, out);
    case EngineKind::sglang: return map_sglang(m, out);
    case EngineKind::trtllm: return map_trtllm(m, out);
  }
  return false;
}

}  // namespace

std::optional<double> map_duty_cycle(const PromText& m, const std::vector<std::string>& gpus) {
  auto of = [&](std::string_view name) {
    if (gpus.empty()) return collect(m, name);
    Acc a;
    for (const auto& g : gpus) {
      const Acc one = collect(m, name, "gpu", g);
      a.sum += one.sum;
      a.n += one.n;
    }
    return a;
  };
  if (Acc a = of("DCGM_FI_PROF_GR_ENGINE_ACTIVE"); a.any()) return clamp01(a.mean());
  if (Acc a = of("DCGM_FI_DEV_GPU_UTIL"); a.any()) return clamp01(a.mean() / 100.0);
  return std::nullopt;
}

EngineMetricsResult map_engine_metrics(const PromText& metrics, EngineKind kind) {
  EngineMetricsResult r;
  const EngineKind order[] = {kind, EngineKind::vllm, EngineKind::sglang, EngineKind::trtllm};
  for (EngineKind k : order) {
    EngineSignals s;
    if (map_kind(metrics, k, s)) {
      r.signals = std::move(s);
      r.recognized = true;
      r.detected = k;
      break;
    }
  }
  if (!r.recognized) {
    r.error = "no waiting/running request gauge of a known engine in the metrics";
    if (metrics.errors) r.error += " (" + std::to_string(metrics.errors) + " malformed lines; first: " + metrics.first_error + ")";
    return r;
  }
  if (auto d = map_duty_cycle(metrics)) r.signals.duty_cycle = *d;
  return r;
}

}  // namespace sluice
