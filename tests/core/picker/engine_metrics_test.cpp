#include "core/picker/engine_metrics.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

EngineMetricsResult map(const std::string& text, EngineKind kind = EngineKind::vllm) {
  return map_engine_metrics(parse_prom_text(text), kind);
}

TEST(EngineMetrics, VllmFullSet) {
  auto r = map(
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3\n"
      "vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 2\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 10\n"
      "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"
      "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.75\n"
      "vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"1000\",enable_prefix_caching=\"True\"} 1\n"
      "vllm:prefix_cache_queries_total{engine=\"0\"} 1000\n"
      "vllm:prefix_cache_hits_total{engine=\"0\"} 600\n"
      "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 100\n"
      "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"a,b\",waiting_lora_adapters=\"c\"} 200\n"
      "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"older\",waiting_lora_adapters=\"\"} 150\n"
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\"} 0.5\n"
      "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 90\n");
  ASSERT_TRUE(r.recognized) << r.error;
  const auto& s = r.signals;
  EXPECT_DOUBLE_EQ(s.waiting, 5);
  EXPECT_DOUBLE_EQ(s.running, 10);
  EXPECT_DOUBLE_EQ(s.kv_usage, 0.5);
  EXPECT_EQ(s.block_size, 32);
  EXPECT_EQ(s.kv_capacity_blocks, 1000);
  EXPECT_DOUBLE_EQ(s.prefix_queries, 1000);
  EXPECT_DOUBLE_EQ(s.prefix_hits, 600);
  EXPECT_EQ(s.max_lora, 4);
  EXPECT_EQ(s.lora_running, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.lora_waiting, (std::vector<std::string>{"c"}));
  EXPECT_DOUBLE_EQ(s.duty_cycle, 0.5);  // GR_ENGINE_ACTIVE preferred over GPU_UTIL
}

TEST(EngineMetrics, VllmOlderNamesAsFallback) {
  auto r = map(
      "vllm:num_requests_running 1\n"
      "vllm:gpu_cache_usage_perc 0.4\n"
      "vllm:gpu_prefix_cache_queries_total 10\n"
      "vllm:gpu_prefix_cache_hits_total 4\n"
      "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 80\nDCGM_FI_DEV_GPU_UTIL{gpu=\"1\"} 40\n");
  ASSERT_TRUE(r.recognized);
  EXPECT_DOUBLE_EQ(r.signals.kv_usage, 0.4);
  EXPECT_DOUBLE_EQ(r.signals.prefix_queries, 10);
  EXPECT_DOUBLE_EQ(r.signals.prefix_hits, 4);
  EXPECT_DOUBLE_EQ(r.signals.duty_cycle, 0.6);
  EXPECT_EQ(r.signals.block_size, 16);        // default kept
  EXPECT_EQ(r.signals.kv_capacity_blocks, 0);  // unknown
  EXPECT_EQ(r.signals.max_lora, 0);
}

TEST(EngineMetrics, SglangAndTrtllmAndTriton) {
  auto sg = map(
      "sglang:num_queue_reqs 4\nsglang:num_running_reqs 7\nsglang:token_usage 0.3\n"
      "sglang:cache_config_info{page_size=\"1\",num_pages=\"500000\"} 1\nsglang:cache_hit_rate 0.8\n",
      EngineKind::sglang);
  ASSERT_TRUE(sg.recognized);
  EXPECT_EQ(sg.detected, EngineKind::sglang);
  EXPECT_DOUBLE_EQ(sg.signals.waiting, 4);
  EXPECT_DOUBLE_EQ(sg.signals.running, 7);
  EXPECT_DOUBLE_EQ(sg.signals.kv_usage, 0.3);
  EXPECT_EQ(sg.signals.block_size, 1);
  EXPECT_EQ(sg.signals.kv_capacity_blocks, 500000);
  EXPECT_DOUBLE_EQ(sg.signals.prefix_hit_rate, 0.8);

  auto tr = map(
      "trtllm_num_requests_waiting 2\ntrtllm_num_requests_running 3\ntrtllm_kv_cache_utilization 0.9\n"
      "trtllm_kv_cache_tokens_per_block 64\ntrtllm_kv_cache_max_blocks 2048\n",
      EngineKind::trtllm);
  ASSERT_TRUE(tr.recognized);
  EXPECT_DOUBLE_EQ(tr.signals.waiting, 2);
  EXPECT_DOUBLE_EQ(tr.signals.kv_usage, 0.9);
  EXPECT_EQ(tr.signals.block_size, 64);
  EXPECT_EQ(tr.signals.kv_capacity_blocks, 2048);

  auto tri = map(
      "nv_trt_llm_request_metrics{model=\"m\",request_type=\"waiting\"} 6\n"
      "nv_trt_llm_request_metrics{model=\"m\",request_type=\"scheduled\"} 9\n"
      "nv_trt_llm_request_metrics{model=\"m\",request_type=\"context\"} 100\n"
      "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\"} 0.2\n"
      "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"tokens_per\"} 32\n"
      "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"max\"} 4096\n",
      EngineKind::trtllm);
  ASSERT_TRUE(tri.recognized);
  EXPECT_DOUBLE_EQ(tri.signals.waiting, 6);
  EXPECT_DOUBLE_EQ(tri.signals.running, 9);
  EXPECT_DOUBLE_EQ(tri.signals.kv_usage, 0.2);
  EXPECT_EQ(tri.signals.block_size, 32);
  EXPECT_EQ(tri.signals.kv_capacity_blocks, 4096);
}

TEST(EngineMetrics, MislabelledKindIsDetected) {
  auto r = map("sglang:num_queue_reqs 1\nsglang:num_running_reqs 2\n", EngineKind::vllm);
  ASSERT_TRUE(r.recognized);
  EXPECT_EQ(r.detected, EngineKind::sglang);
}

TEST(EngineMetrics, UnknownMetricsAreAnError) {
  auto r = map("node_cpu_seconds_total 5\ngarbage line {\n");
  EXPECT_FALSE(r.recognized);
  EXPECT_NE(r.error.find("malformed"), std::string::npos);
}

TEST(EngineMetrics, NonFiniteAndOutOfRangeValuesAreClamped) {
  auto r = map("vllm:num_requests_waiting NaN\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 7\n"
               "vllm:cache_config_info{block_size=\"-3\",num_gpu_blocks=\"x\"} 1\n");
  ASSERT_TRUE(r.recognized);
  EXPECT_DOUBLE_EQ(r.signals.waiting, 0);
  EXPECT_DOUBLE_EQ(r.signals.kv_usage, 1);
  EXPECT_EQ(r.signals.block_size, 16);
  EXPECT_EQ(r.signals.kv_capacity_blocks, 0);
}

// The inter-token latency histogram's _sum and _count (the pace's engine samples, PoolRouter): vLLM's
// name, its name before 0.11, SGLang's; summed over ranks; unknown (-1) when absent, when only one
// of the two is there, or when a value is negative or not finite.
TEST(EngineMetrics, TheInterTokenLatencyHistogramsSumAndCount) {
  auto v = map("vllm:num_requests_running 1\n"
               "vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"0.01\"} 90\n"
               "vllm:inter_token_latency_seconds_sum{engine=\"0\"} 1.5\n"
               "vllm:inter_token_latency_seconds_count{engine=\"0\"} 100\n"
               "vllm:inter_token_latency_seconds_sum{engine=\"1\"} 0.5\n"
               "vllm:inter_token_latency_seconds_count{engine=\"1\"} 20\n");
  ASSERT_TRUE(v.recognized);
  EXPECT_DOUBLE_EQ(v.signals.itl_sum_s, 2.0);
  EXPECT_DOUBLE_EQ(v.signals.itl_count, 120);
  auto old = map("vllm:num_requests_running 1\nvllm:time_per_output_token_seconds_sum 3\n"
                 "vllm:time_per_output_token_seconds_count 60\n");
  EXPECT_DOUBLE_EQ(old.signals.itl_sum_s, 3);
  EXPECT_DOUBLE_EQ(old.signals.itl_count, 60);
  auto sg = map("sglang:num_running_reqs 2\nsglang:inter_token_latency_seconds_sum 0.25\n"
                "sglang:inter_token_latency_seconds_count 10\n", EngineKind::sglang);
  EXPECT_DOUBLE_EQ(sg.signals.itl_sum_s, 0.25);
  EXPECT_DOUBLE_EQ(sg.signals.itl_count, 10);
  for (const char* bad : {"vllm:num_requests_running 1\n",
                          "vllm:num_requests_running 1\nvllm:inter_token_latency_seconds_sum 2\n",
                          "vllm:num_requests_running 1\nvllm:inter_token_latency_seconds_sum -2\n"
                          "vllm:inter_token_latency_seconds_count 5\n",
                          "vllm:num_requests_running 1\nvllm:inter_token_latency_seconds_sum NaN\n"
                          "vllm:inter_token_latency_seconds_count 5\n"}) {
    auto r = map(bad);
    ASSERT_TRUE(r.recognized) << bad;
    EXPECT_DOUBLE_EQ(r.signals.itl_sum_s, -1) << bad;
    EXPECT_DOUBLE_EQ(r.signals.itl_count, -1) << bad;
  }
}

}  // namespace
}  // namespace sluice
