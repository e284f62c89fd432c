#include "core/admission/admission_config.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(AdmissionConfigYaml, FullExampleRoundTripsIntoARegistry) {
  const std::string yaml = R"(
tenants:
  - name: acme
    key_sha256: [")" + sha256_hex("sk-acme") + R"("]
    priority: 2
    weight: 2.5
    limits: {requests_per_min: 600, input_tokens_per_min: 200000, output_tokens_per_min: 100000,
             tokens_per_day: 10000000, max_concurrent: 32}
    models:
      - {model: llama-70b, limits: {output_tokens_per_min: 20000}}
  - name: free
    key_sha256: )" + sha256_hex("sk-free") + R"(
    priority: -1
admission:
  anonymous_tenant: free
  default_max_output_tokens: 1024
  concurrency_retry_after_ms: 500
  queue: {max_requests: 100, max_bytes: 1000000, ttl_ms: 20000, ttl_ms_by_priority: {"2": 60000, "-1": 5000},
          retry_after_ms: 2000}
  vtc: {w_in: 1, w_out: 4}
  fair_share: {enabled: false, active_window_ms: 2500, spare_slots: 3}
)";
  AdmissionSpecResult r = parse_admission_yaml(yaml);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(r.spec.enabled);
  const auto& acme = r.spec.tenants.tenants.at(0);
  EXPECT_EQ(acme.priority, 2);
  EXPECT_DOUBLE_EQ(acme.weight, 2.5);
  EXPECT_EQ(acme.limits.tokens_per_day, 10000000);
  EXPECT_EQ(acme.limits.max_concurrent, 32);
  ASSERT_EQ(acme.model_limits.size(), 1u);
  EXPECT_EQ(acme.model_limits[0].limits.output_tokens_per_min, 20000);
  EXPECT_FALSE(acme.model_limits[0].limits.requests_per_min.has_value());
  EXPECT_EQ(r.spec.config.default_max_output_tokens, 1024);
  EXPECT_EQ(r.spec.config.concurrency_retry_base, std::chrono::milliseconds(500));
  EXPECT_EQ(r.spec.config.queue.max_requests, 100u);
  EXPECT_EQ(r.spec.config.queue.ttl_for(2), std::chrono::seconds(60));
  EXPECT_EQ(r.spec.config.queue.ttl_for(-1), std::chrono::seconds(5));
  EXPECT_EQ(r.spec.config.queue.ttl_for(0), std::chrono::seconds(20));
  EXPECT_DOUBLE_EQ(r.spec.config.queue.vtc.w_out, 4);
  EXPECT_FALSE(r.spec.config.fair_share.enabled);
  EXPECT_EQ(r.spec.config.fair_share.active_window, std::chrono::milliseconds(2500));
  EXPECT_EQ(r.spec.config.fair_share.spare, 3);
  auto built = TenantRegistry::build(r.spec.tenants);
  ASSERT_TRUE(built.registry) << built.error;
  EXPECT_EQ(built.registry->authenticate("Bearer sk-acme").tenant->name, "acme");
  EXPECT_EQ(built.registry->authenticate("").tenant->name, "free");
}

TEST(AdmissionConfigYaml, NoTenantsMeansDisabled) {
  AdmissionSpecResult r = parse_admission_yaml(std::string("listen: {host: 127.0.0.1, port: 1}\n"));
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_FALSE(r.spec.enabled);
}

TEST(AdmissionConfigYaml, ErrorsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"tenants: {a: 1}", "tenants: expected a list"},
      {"tenants: [{key_sha256: abc}]", "tenants[0].name: required"},
      {"tenants: [{name: a, limits: {requests_per_min: zero}}]", "tenants[0].limits.requests_per_min: expected an integer"},
      {"tenants: [{name: a, limits: {requests_per_min: 0}}]", "tenants[0].limits.requests_per_min: must be between"},
      {"tenants: [{name: a, limits: {rpm: 5}}]", "tenants[0].limits.rpm: unknown key"},
      {"tenants: [{name: a, weight: -1}]", "tenants[0].weight: must be a number > 0"},
      {"tenants: [{name: a, models: [{limits: {}}]}]", "tenants[0].models[0].model: required"},
      {"admission: {queue: {ttl_ms: 0}}", "admission.queue.ttl_ms: must be between"},
      {"admission: {queue: {ttl_ms_by_priority: {high: 5}}}", "admission.queue.ttl_ms_by_priority.high: expected an integer"},
      {"admission: {vtc: {w_out: 0}}", "admission.vtc.w_out: must be a number > 0"},
      {"admission: {fair_share: {spare_slots: -1}}", "admission.fair_share.spare_slots: must be between 0"},
      {"admission: {fair_share: {enabled: maybe}}", "admission.fair_share.enabled: expected true or false"},
      {"admission: {bogus: 1}", "admission.bogus: unknown key"},
      {"tenants: [", "YAML syntax error"},
  };
  for (const auto& [yaml, want] : cases) {
    AdmissionSpecResult r = parse_admission_yaml(std::string(yaml));
    EXPECT_FALSE(r.ok()) << yaml;
    EXPECT_NE(r.error.find(want), std::string::npos) << yaml << " -> " << r.error;
  }
}

}  // namespace
}  // namespace sluice
