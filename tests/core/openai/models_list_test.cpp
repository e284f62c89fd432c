#include "core/openai/models_list.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace sluice
