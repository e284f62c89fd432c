#include "core/openai/models_list.h"

#include <gtest/gtest.h>

#include "core/admission/admission_config.h"
#include "core/admission/tenants.h"

namespace sluice {
namespace {

TEST(ModelsList, ListsBaseAliasAndAdapter) {
  auto cfg = parse_config(R"(
pools:
  - name: chat
    policy: round_robin
    endpoints: [127.0.0.1:9001]
  - name: embeddings
    kind: embedding
    policy: round_robin
    endpoints: [127.0.0.1:9002]
models:
  - name: meta-llama/Llama-3.1-8B-Instruct
    pool: chat
  - name: llama-3-8b
    alias_of: meta-llama/Llama-3.1-8B-Instruct
  - name: sql-lora
    adapter_of: meta-llama/Llama-3.1-8B-Instruct
  - name: BAAI/bge-small-en-v1.5
    pool: embeddings
)");
  auto json = models_list_json(*cfg, 1700000000);
  EXPECT_EQ(json.rfind("{\"object\":\"list\",\"data\":[", 0), 0u);
  EXPECT_NE(json.find(R"({"id":"meta-llama/Llama-3.1-8B-Instruct","object":"model","created":1700000000,"owned_by":"sluice","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null,"max_model_len":null})"), std::string::npos);
  EXPECT_NE(json.find(R"({"id":"llama-3-8b","object":"model","created":1700000000,"owned_by":"sluice","root":"meta-llama/Llama-3.1-8B-Instruct","parent":null)"), std::string::npos);
  EXPECT_NE(json.find(R"({"id":"sql-lora","object":"model","created":1700000000,"owned_by":"sluice","root":"sql-lora","parent":"meta-llama/Llama-3.1-8B-Instruct")"), std::string::npos);
  EXPECT_NE(json.find(R"("id":"BAAI/bge-small-en-v1.5")"), std::string::npos);
}

TEST(ModelsList, TenantAllowListNarrowsTheListAndTheLookups) {
  auto cfg = parse_config(R"(
pools: [{name: chat, endpoints: [127.0.0.1:9001]}]
models:
  - {name: base, pool: chat}
  - {name: latest, alias_of: base}
  - {name: lora, adapter_of: base}
tenants:
  - {name: narrow, allowed_models: [base, lora]}
  - {name: wide}
)");
  auto reg = TenantRegistry::build(cfg->admission->tenants);
  ASSERT_NE(reg.registry, nullptr) << reg.error;
  const Tenant* narrow = reg.registry->find("narrow");
  const Tenant* wide = reg.registry->find("wide");
  EXPECT_EQ(models_list_json(*cfg, 1, narrow).find("\"latest\""), std::string::npos);
  EXPECT_NE(models_list_json(*cfg, 1, narrow).find("\"id\":\"lora\""), std::string::npos);
  EXPECT_EQ(models_list_json(*cfg, 1, wide), models_list_json(*cfg, 1));
  EXPECT_EQ(visible_model(*cfg, narrow, "base"), cfg->find_model("base"));
  EXPECT_EQ(visible_model(*cfg, narrow, "latest"), nullptr) << "an alias is its own name";
  EXPECT_EQ(visible_model(*cfg, narrow, "nope"), nullptr);
  EXPECT_EQ(visible_model(*cfg, wide, "latest"), cfg->find_model("latest"));
  EXPECT_EQ(visible_model(*cfg, nullptr, "latest"), cfg->find_model("latest"));
  EXPECT_FALSE(model_json(*cfg, "latest", 1, narrow).has_value());
  EXPECT_TRUE(model_json(*cfg, "lora", 1, narrow).has_value());
}

}  // namespace
}  // namespace sluice
