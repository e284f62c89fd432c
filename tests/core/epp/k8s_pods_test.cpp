#include "core/epp/k8s_pods.h"

#include <gtest/gtest.h>

namespace sluice::k8s {
namespace {

// Shapes as the API server sends them (trimmed).
const char* kList = R"({"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"4711"},"items":[
 {"metadata":{"name":"a","resourceVersion":"10"},"status":{"podIP":"10.0.0.1","conditions":[{"type":"Ready","status":"True"}]}},
 {"metadata":{"name":"b"},"status":{"podIP":"10.0.0.2","conditions":[{"type":"Ready","status":"False"}]}},
 {"metadata":{"name":"c","deletionTimestamp":"2026-12-01T10:00:00Z"},"status":{"podIP":"10.0.0.3","conditions":[{"type":"Ready","status":"True"}]}},
 {"metadata":{"name":"d"},"status":{"phase":"Pending","conditions":[{"type":"Ready","status":"True"}]}}]})";

TEST(K8sPods, ListReadyPodsOnly) {
  std::string error;
  auto list = parse_pod_list(kList, error);
  ASSERT_TRUE(list) << error;
  EXPECT_EQ(list->resource_version, "4711");
  ASSERT_EQ(list->pods.size(), 4u);
  std::map<std::string, Pod> pods;
  for (auto& p : list->pods) pods[p.name] = p;
  auto eps = endpoints_of(pods, {8000}, EngineKind::vllm);
  ASSERT_EQ(eps.size(), 1u);  // b unready, c deleting, d without an IP
  EXPECT_EQ(eps[0].name, "a");
  EXPECT_EQ(eps[0].address.str(), "10.0.0.1:8000");
  auto dp = endpoints_of(pods, {8000, 8001}, EngineKind::vllm);  // data-parallel ranks
  ASSERT_EQ(dp.size(), 2u);
  EXPECT_EQ(dp[1].name, "a:8001");
}

TEST(K8sPods, WatchEvents) {
  std::string error;
  auto ev = parse_watch_event(R"({"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"12"},"status":{"podIP":"10.0.0.1","conditions":[{"type":"Ready","status":"False"}]}}})", error);
  ASSERT_TRUE(ev) << error;
  EXPECT_EQ(ev->type, EventType::modified);
  EXPECT_EQ(ev->resource_version, "12");
  EXPECT_FALSE(ev->pod.counts());
  auto bm = parse_watch_event(R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"99"}}})", error);
  ASSERT_TRUE(bm);
  EXPECT_EQ(bm->type, EventType::bookmark);
  EXPECT_EQ(bm->resource_version, "99");
  auto gone = parse_watch_event(R"({"type":"ERROR","object":{"kind":"Status","code":410,"message":"too old resource version"}})", error);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->type, EventType::error);
  EXPECT_EQ(gone->error_code, 410);
  EXPECT_FALSE(parse_watch_event("{not json", error));
  EXPECT_FALSE(parse_watch_event(R"({"type":"WAT","object":{}})", error));
  EXPECT_FALSE(parse_watch_event(R"({"type":"ADDED","object":{"metadata":{}}})", error));
}

TEST(K8sPods, InferencePool) {
  std::string error;
  auto spec = parse_inference_pool(R"({"apiVersion":"inference.networking.k8s.io/v1","kind":"InferencePool",
    "spec":{"selector":{"matchLabels":{"app":"vllm","tier":"gpu"}},"targetPorts":[{"number":8000},{"number":8001}],
            "endpointPickerRef":{"name":"epp","port":{"number":9002}}}})", error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(label_selector(spec->selector), "app=vllm,tier=gpu");
  EXPECT_EQ(spec->target_ports, (std::vector<uint16_t>{8000, 8001}));
  EXPECT_FALSE(parse_inference_pool(R"({"spec":{"selector":{"matchLabels":{}},"targetPorts":[{"number":1}]}})", error));
  EXPECT_FALSE(parse_inference_pool(R"({"spec":{"selector":{"matchLabels":{"a":"b"}}}})", error));
}

}  // namespace
}  // namespace sluice::k8s
