#include <gtest/gtest.h>
#include <simdjson.h>

#include "sim/duty_cycle.h"
#include "sim/faults.h"
#include "sim/metrics_format.h"
#include "sim/openai_format.h"
#include "core/prefix/render_tokens.h"

namespace sluice::sim {
namespace {

using namespace std::chrono_literals;

simdjson::dom::element parse_event(simdjson::dom::parser& p, const std::string& ev) {
  EXPECT_TRUE(ev.starts_with("data: "));
  EXPECT_TRUE(ev.ends_with("\n\n"));
  return p.parse(ev.substr(6, ev.size() - 8));
}

TEST(SimOpenAiFormat, ChatStreamEvents) {
  ResponseIds ids{"chatcmpl-1", 1700000000, "m\"x"};
  simdjson::dom::parser p;
  auto role = parse_event(p, chat_role_event(ids));
  EXPECT_EQ(std::string_view(role["object"]), "chat.completion.chunk");
  EXPECT_EQ(std::string_view(role["model"]), "m\"x");
  EXPECT_EQ(std::string_view(role["choices"].at(0)["delta"]["role"]), "assistant");
  auto last = parse_event(p, chat_delta_event(ids, " tok", "length"));
  EXPECT_EQ(std::string_view(last["choices"].at(0)["delta"]["content"]), " tok");
  EXPECT_EQ(std::string_view(last["choices"].at(0)["finish_reason"]), "length");
  auto mid = parse_event(p, chat_delta_event(ids, " a", ""));
  EXPECT_TRUE(mid["choices"].at(0)["finish_reason"].is_null());
  auto usage = parse_event(p, usage_event(ids, true, {200, 10, 192}));
  EXPECT_EQ(simdjson::dom::array(usage["choices"]).size(), 0u);
  EXPECT_EQ(int64_t(usage["usage"]["total_tokens"]), 210);
  EXPECT_EQ(int64_t(usage["usage"]["prompt_tokens_details"]["cached_tokens"]), 192);
}

TEST(SimOpenAiFormat, WholeResponsesAndErrors) {
  ResponseIds ids{"cmpl-1", 1, "m"};
  simdjson::dom::parser p;
  auto c = p.parse(completion_response(ids, "hi there", "stop", {5, 2, 0}));
  EXPECT_EQ(std::string_view(c["choices"].at(0)["text"]), "hi there");
  EXPECT_EQ(int64_t(c["usage"]["completion_tokens"]), 2);
  auto ch = p.parse(chat_response(ids, "x", "length", {5, 1, 0}));
  EXPECT_EQ(std::string_view(ch["choices"].at(0)["message"]["content"]), "x");
  auto e = p.parse(embedding_response(ids, 2, 8, 42, {7, 0, 0}));
  EXPECT_EQ(simdjson::dom::array(e["data"]).size(), 2u);
  EXPECT_EQ(simdjson::dom::array(e["data"].at(1)["embedding"]).size(), 8u);
  auto m = p.parse(models_response("base", 4096, {"lora-a"}, 1));
  EXPECT_EQ(std::string_view(m["data"].at(1)["parent"]), "base");
  EXPECT_TRUE(m["data"].at(0)["parent"].is_null());
  EXPECT_EQ(int64_t(m["data"].at(0)["max_model_len"]), 4096);
  auto err = p.parse(error_body("The model `x` does not exist.", "NotFoundError", 404));
  EXPECT_EQ(int64_t(err["error"]["code"]), 404);
  EXPECT_TRUE(err["error"]["param"].is_null());
}

TEST(SimOpenAiFormat, IndexedChoices) {
  ResponseIds ids{"chatcmpl-1", 1, "m"};
  simdjson::dom::parser p;
  auto role = parse_event(p, chat_role_event(ids, 2));
  EXPECT_EQ(int64_t(role["choices"].at(0)["index"]), 2);
  auto delta = parse_event(p, completion_delta_event(ids, " a", "stop", 1));
  EXPECT_EQ(int64_t(delta["choices"].at(0)["index"]), 1);
  auto whole = p.parse(chat_response(ids, {{"one", "stop"}, {"two", "length"}}, {5, 4, 0}));
  EXPECT_EQ(simdjson::dom::array(whole["choices"]).size(), 2u);
  EXPECT_EQ(std::string_view(whole["choices"].at(1)["message"]["content"]), "two");
  EXPECT_EQ(std::string_view(whole["choices"].at(1)["finish_reason"]), "length");
  EXPECT_EQ(int64_t(whole["choices"].at(1)["index"]), 1);
}

TEST(SimOpenAiFormat, ResponsesObjectAndTypedEvents) {
  ResponseIds ids{"resp_1", 7, "m"};
  simdjson::dom::parser p;
  ResponseRequestFields f{"Be brief.", 16, "resp_0", true};
  auto done = p.parse(response_object(ids, "completed", "msg_1", "hi there", {10, 2, 0}, f));
  EXPECT_EQ(std::string_view(done["object"]), "response");
  EXPECT_EQ(std::string_view(done["status"]), "completed");
  EXPECT_EQ(std::string_view(done["instructions"]), "Be brief.");
  EXPECT_EQ(std::string_view(done["previous_response_id"]), "resp_0");
  EXPECT_EQ(int64_t(done["max_output_tokens"]), 16);
  EXPECT_EQ(std::string_view(done["output"].at(0)["content"].at(0)["text"]), "hi there");
  EXPECT_EQ(int64_t(done["usage"]["output_tokens"]), 2);
  EXPECT_EQ(int64_t(done["usage"]["total_tokens"]), 12);
  EXPECT_TRUE(done["incomplete_details"].is_null());
  auto created = p.parse(response_object(ids, "in_progress", "msg_1", "", {}, {}));
  EXPECT_EQ(simdjson::dom::array(created["output"]).size(), 0u);
  EXPECT_TRUE(created["usage"].is_null());
  EXPECT_TRUE(created["instructions"].is_null());
  auto cut = p.parse(response_object(ids, "incomplete", "msg_1", "x", {1, 1, 0}, f));
  EXPECT_EQ(std::string_view(cut["incomplete_details"]["reason"]), "max_output_tokens");
  const std::string ev = response_event("response.output_text.delta", 5, text_delta_members("msg_1", " a", false));
  ASSERT_TRUE(ev.starts_with("event: response.output_text.delta\ndata: "));
  ASSERT_TRUE(ev.ends_with("\n\n"));
  auto d = p.parse(ev.substr(ev.find("data: ") + 6, ev.size() - ev.find("data: ") - 8));
  EXPECT_EQ(std::string_view(d["type"]), "response.output_text.delta");
  EXPECT_EQ(int64_t(d["sequence_number"]), 5);
  EXPECT_EQ(std::string_view(d["delta"]), " a");
  EXPECT_EQ(std::string_view(d["item_id"]), "msg_1");
}

TEST(SimOpenAiFormat, ExtraRoutes) {
  simdjson::dom::parser p;
  auto t = p.parse(tokenize_response({1, 2, 3}, 4096));
  EXPECT_EQ(int64_t(t["count"]), 3);
  EXPECT_EQ(int64_t(t["max_model_len"]), 4096);
  EXPECT_EQ(simdjson::dom::array(t["tokens"]).size(), 3u);
  EXPECT_EQ(std::string_view(p.parse(detokenize_response(" a b"))["prompt"]), " a b");
  ResponseIds ids{"rerank-1", 1, "m"};
  auto r = p.parse(rerank_response(ids, {"a", "b", "c"}, {0.1, 0.9, 0.5}, 2, 12));
  EXPECT_EQ(simdjson::dom::array(r["results"]).size(), 2u);
  EXPECT_EQ(int64_t(r["results"].at(0)["index"]), 1);  // best first
  EXPECT_EQ(std::string_view(r["results"].at(0)["document"]["text"]), "b");
  EXPECT_EQ(int64_t(r["usage"]["total_tokens"]), 12);
  auto s = p.parse(score_response(ids, {0.25, 0.75}, 8));
  EXPECT_EQ(simdjson::dom::array(s["data"]).size(), 2u);
  EXPECT_EQ(std::string_view(s["data"].at(1)["object"]), "score");
  EXPECT_EQ(int64_t(s["usage"]["prompt_tokens"]), 8);
}

TEST(SimFaults, JsonUpdatesAndValidation) {
  FaultConfig f;
  EXPECT_FALSE(f.apply_json(R"({"error_rate":{"500":0.5,"429":0.25},"metrics":"freeze"})"));
  EXPECT_DOUBLE_EQ(f.rate_500, 0.5);
  EXPECT_DOUBLE_EQ(f.rate_429, 0.25);
  EXPECT_EQ(f.metrics, MetricsFault::freeze);
  EXPECT_TRUE(f.apply_json(R"({"error_rate":{"500":2}})"));  // invalid: unchanged
  EXPECT_DOUBLE_EQ(f.rate_500, 0.5);
  EXPECT_TRUE(f.apply_json(R"({"bogus":1})"));
  EXPECT_TRUE(f.apply_json("{not json"));
  EXPECT_FALSE(f.apply_json(R"({"reset":true,"hang":true})"));
  EXPECT_DOUBLE_EQ(f.rate_500, 0.0);
  EXPECT_TRUE(f.hang);
  EXPECT_FALSE(f.set_error_rates("503=1"));
  std::mt19937_64 rng(1);
  EXPECT_EQ(decide(f, rng).error_status, 503);
  EXPECT_TRUE(f.set_error_rates("418=0.1"));
  EXPECT_FALSE(f.set_latency_spike("1:250"));
  EXPECT_DOUBLE_EQ(decide(f, rng).extra_delay_ms, 250.0);
  EXPECT_TRUE(f.set_latency_spike("x"));
  simdjson::dom::parser p;
  EXPECT_TRUE(bool(p.parse(f.to_json())["hang"]));
}

// The render routes' object reads back through the gateway's own parser (core/prefix/render_tokens.h).
TEST(SimOpenAiFormat, RenderObjectIsWhatTheGatewayReads) {
  const std::string obj = render_object("chatcmpl-1", {3, 1, 4}, "m\"x", 2, 7);
  simdjson::dom::parser p;
  auto doc = p.parse(obj);
  EXPECT_EQ(std::string_view(doc["request_id"]), "chatcmpl-1");
  EXPECT_EQ(std::string_view(doc["model"]), "m\"x");
  EXPECT_EQ(int64_t(doc["sampling_params"]["max_tokens"]), 7);
  EXPECT_EQ(int64_t(doc["sampling_params"]["n"]), 2);
  auto chat = parse_render_answer(obj, false);
  ASSERT_TRUE(chat.ids) << chat.error;
  EXPECT_EQ(*chat.ids, (TokenIds{3, 1, 4}));
  auto comp = parse_render_answer("[" + obj + "," + render_object("cmpl-2", {9}, "m", 1, std::nullopt) + "]", true);
  ASSERT_TRUE(comp.ids) << comp.error;
  EXPECT_EQ(*comp.ids, (TokenIds{3, 1, 4}));
  EXPECT_TRUE(p.parse(render_object("x", {}, "m", 1, std::nullopt))["sampling_params"]["max_tokens"].is_null());
}

TEST(SimFaults, RenderFault) {
  FaultConfig f;
  EXPECT_FALSE(f.apply_json(R"({"render":"slow","render_delay_ms":250})"));
  EXPECT_EQ(f.render, RenderFault::slow);
  EXPECT_EQ(f.render_delay_ms, 250);
  EXPECT_NE(f.to_json().find("\"render\":\"slow\""), std::string::npos);
  EXPECT_TRUE(f.apply_json(R"({"render":"sometimes"})"));
  EXPECT_EQ(f.render, RenderFault::slow);  // an invalid update changes nothing
  EXPECT_FALSE(f.apply_json(R"({"reset":true})"));
  EXPECT_EQ(f.render, RenderFault::ok);
}

TEST(SimMetricsFormat, VllmNamesTypesAndBuckets) {
  engine::EngineStats st;
  st.num_running = 3;
  st.num_waiting = 2;
  st.kv_usage = 0.25;
  st.num_blocks = 1000;
  st.counters.prefix_queries = 400;
  st.counters.prefix_hits = 192;
  st.counters.finished_abort = 1;
  st.histograms.ttft.observe(0.03);
  LoraInfoHistory lora;
  lora.update("a", "", 100.0);
  lora.update("a,b", "c", 200.0);
  MetricsInput in;
  in.stats = &st;
  in.model_name = "m";
  in.max_loras = 4;
  in.lora = &lora;
  in.duty_cycle = 0.5;
  in.lag_dropped_s = 1.25;
  const std::string t = render_metrics(MetricsFlavor::vllm, in);
  auto has = [&](std::string_view s) { return t.find(s) != std::string::npos; };
  EXPECT_TRUE(has("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n"));
  EXPECT_TRUE(has("vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n"));
  EXPECT_TRUE(has("# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 400.0\n"));
  EXPECT_TRUE(has("vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 192.0"));
  EXPECT_TRUE(has("vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"m\"} 1.0"));
  EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"0.02\"} 0.0"));
  EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"0.04\"} 1.0"));
  EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"2560.0\"} 1.0"));
  EXPECT_TRUE(has("vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"+Inf\"} 1.0"));
  EXPECT_TRUE(has("vllm:e2e_request_latency_seconds_bucket{engine=\"0\",model_name=\"m\",le=\"7680.0\"}"));
  EXPECT_TRUE(has("vllm:request_queue_time_seconds_count"));
  EXPECT_TRUE(has("vllm:inter_token_latency_seconds_sum"));
  EXPECT_TRUE(has("num_gpu_blocks=\"1000\""));
  EXPECT_TRUE(has("enable_prefix_caching=\"True\""));
  EXPECT_TRUE(has("vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"a,b\",waiting_lora_adapters=\"c\"} 200.0"));
  EXPECT_TRUE(has("vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"a\",waiting_lora_adapters=\"\"} 100.0"));
  EXPECT_TRUE(has("DCGM_FI_PROF_GR_ENGINE_ACTIVE{device=\"nvidia0\",gpu=\"0\""));
  EXPECT_TRUE(has("# TYPE sluice_sim_schedule_lag_dropped_seconds_total counter\nsluice_sim_schedule_lag_dropped_seconds_total 1.25\n"));
  in.max_loras = 0;
  EXPECT_EQ(render_metrics(MetricsFlavor::vllm, in).find("lora_requests_info"), std::string::npos);
  const std::string sg = render_metrics(MetricsFlavor::sglang, in);
  EXPECT_NE(sg.find("sglang:num_queue_reqs{model_name=\"m\"} 2.0"), std::string::npos);
  EXPECT_NE(sg.find("sglang:cache_hit_rate{model_name=\"m\"} 0.48"), std::string::npos);
  const std::string tr = render_metrics(MetricsFlavor::trtllm, in);
  EXPECT_NE(tr.find("trtllm_kv_cache_max_blocks{model_name=\"m\"} 1000.0"), std::string::npos);
  EXPECT_EQ(prom_float(1.5), "1.5");
  EXPECT_EQ(prom_float(2), "2.0");
}

TEST(SimDutyCycle, FractionOverRecentWindow) {
  DutyCycle d(1s, 10ms);
  // Busy 100% for the first 2 s, then idle.
  for (int ms = 0; ms <= 2000; ms += 20) d.record(Time{} + std::chrono::milliseconds(ms), std::chrono::milliseconds(ms));
  EXPECT_NEAR(d.fraction(Time{} + 2s, 2s), 1.0, 0.05);
  for (int ms = 2020; ms <= 4000; ms += 20) d.record(Time{} + std::chrono::milliseconds(ms), 2s);
  EXPECT_NEAR(d.fraction(Time{} + 4s, 2s), 0.0, 0.05);
  // Half busy.
  for (int ms = 4020; ms <= 6000; ms += 20)
    d.record(Time{} + std::chrono::milliseconds(ms), 2s + std::chrono::milliseconds((ms - 4000) / 2));
  EXPECT_NEAR(d.fraction(Time{} + 6s, 3s), 0.5, 0.05);
}

}  // namespace
}  // namespace sluice::sim
