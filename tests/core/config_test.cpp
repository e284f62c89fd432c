#include "core/config.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

const char* kGood = R"(
listen: 127.0.0.1:8080
admin: 127.0.0.1:9090
workers: 4
timeouts: {connect_ms: 500, first_byte_ms: 10000}
pools:
  - name: chat-8b
    policy: least_request
    endpoints: ["127.0.0.1:8001", {address: "127.0.0.1:8002", name: r2, engine: sglang}]
    scrape: {interval_ms: 50, stale_after_ms: 300}
  - name: emb
    kind: embedding
    policy: round_robin
    endpoints: ["127.0.0.1:8100"]
models:
  - {name: meta-llama/Llama-3.1-8B-Instruct, pool: chat-8b}
  - {name: llama-3-8b, alias_of: meta-llama/Llama-3.1-8B-Instruct}
  - {name: sql-lora, adapter_of: meta-llama/Llama-3.1-8B-Instruct}
  - {name: bge, pool: emb}
)";

TEST(Config, ParsesAndResolvesAliases) {
  auto cfg = parse_config(kGood);
  EXPECT_EQ(cfg->workers, 4);
  EXPECT_EQ(cfg->timeouts.connect, std::chrono::milliseconds(500));
  ASSERT_EQ(cfg->pools.size(), 2u);
  EXPECT_EQ(cfg->pools[0].endpoints[1].name, "r2");
  EXPECT_EQ(cfg->pools[0].endpoints[1].engine, EngineKind::sglang);
  EXPECT_EQ(cfg->pools[0].endpoints[0].name, "127.0.0.1:8001");
  EXPECT_EQ(cfg->pools[1].kind, PoolKind::embedding);
  const auto* alias = cfg->find_model("llama-3-8b");
  ASSERT_NE(alias, nullptr);
  EXPECT_TRUE(alias->is_alias());
  EXPECT_EQ(alias->target, "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ(alias->pool, "chat-8b");
  EXPECT_EQ(cfg->find_model("sql-lora")->adapter_of, "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ(cfg->find_model("sql-lora")->pool, "chat-8b");
}

void expect_error(const std::string& yaml, const std::string& needle) {
  try {
    parse_config(yaml);
    ADD_FAILURE() << "accepted: " << yaml;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "error was: " << e.what();
  }
}

TEST(Config, ErrorsNameTheField) {
  const std::string pools = "pools: [{name: p, endpoints: ['127.0.0.1:1']}]\n";
  const std::string models = "models: [{name: m, pool: p}]\n";
  expect_error("", "empty");
  expect_error("listen: [1\n", "YAML syntax error");
  expect_error(pools + models + "wrokers: 2\n", "wrokers: unknown key");
  expect_error(pools + models + "workers: 0\n", "workers: must be between");
  expect_error(pools + models + "workers: many\n", "workers: expected an integer");
  expect_error(pools + models + "listen: localhost\n", "listen: expected host:port");
  expect_error(models, "pools: is required");
  expect_error(pools, "models: is required");
  expect_error("pools: [{name: p, endpoints: []}]\n" + models, "pools[0].endpoints: is required");
  expect_error("pools: [{name: p, endpoints: ['127.0.0.1:99999']}]\n" + models, "pools[0].endpoints[0]: port must be");
  expect_error("pools: [{name: p, policy: fastest, endpoints: ['127.0.0.1:1']}]\n" + models, "pools[0].policy: unknown policy 'fastest'");
  expect_error("pools: [{name: p, endpoints: ['127.0.0.1:1', '127.0.0.1:1']}]\n" + models, "duplicate endpoint");
  expect_error(pools + "models: [{name: m, pool: q}]\n", "models[0].pool: unknown pool 'q'");
  expect_error(pools + "models: [{name: m, pool: p}, {name: a, alias_of: nope}]\n", "models[1]: points at 'nope'");
  expect_error(pools + "models: [{name: m, pool: p}, {name: m, pool: p}]\n", "models[1].name: duplicate");
  expect_error(pools + "models: [{name: m}]\n", "models[0].pool: is required");
  expect_error("pools: [{name: p, endpoints: ['127.0.0.1:1'], engine: tgi}]\n" + models, "unknown engine 'tgi'");
  // A tenant's model names must be configured ones (a typo would silently allow or limit nothing).
  expect_error(pools + models + "tenants: [{name: t, allowed_models: [m, n]}]\n",
               "tenants[0].allowed_models[1]: unknown model 'n' (not in models:)");
  expect_error(pools + models + "tenants: [{name: t, allowed_models: [m, m]}]\n",
               "tenants[0].allowed_models[1]: duplicate model 'm'");
  expect_error(pools + models + "tenants: [{name: t, allowed_models: m}]\n",
               "tenants[0].allowed_models: expected a non-empty list");
  expect_error(pools + models + "tenants: [{name: t, models: [{model: x, limits: {requests_per_min: 1}}]}]\n",
               "tenants[0].models[0].model: unknown model 'x'");
}

TEST(Config, DefaultYamlIsValid) {
  auto cfg = parse_config(default_config_yaml({9001, 9002}, 9100, 8080, 9090));
  EXPECT_EQ(cfg->pools[0].endpoints.size(), 2u);
  EXPECT_NE(cfg->find_model("llama-3-8b"), nullptr);
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

// Regression (config_fuzz): a tagged / non-scalar key made yaml-cpp throw its own exception out of
// parse_config; every malformed shape is a ConfigError.
TEST(Config, OddYamlShapesAreConfigErrors) {
  for (const char* text : {"pools: [{name: p,!endpoints: [\"127)0.0.1:1\"]}]\nmodels: [{naml: p}, {nam:ad eenpias_of: m}]\n",
                           "? [a, b]\n: 1\n", "pools: [{? {x: 1} : 2}]\nmodels: []\n"}) {
    EXPECT_THROW(parse_config(text), ConfigError) << text;
  }
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {

TEST(Config, SaturationLimits) {
  const std::string models = "models: [{name: m, pool: p}]\n";
  auto cfg = parse_config("pools: [{name: p, endpoints: ['127.0.0.1:1'], saturation: {max_waiting: 8, max_kv_usage: 0.9}}]\n" + models);
  EXPECT_EQ(cfg->pools[0].saturation_max_waiting, 8);
  EXPECT_DOUBLE_EQ(cfg->pools[0].saturation_max_kv_usage, 0.9);
  expect_error("pools: [{name: p, endpoints: ['127.0.0.1:1'], saturation: {max_kv_usage: 1.5}}]\n" + models,
               "pools[0].saturation.max_kv_usage: must be in (0, 1]");
  expect_error("pools: [{name: p, endpoints: ['127.0.0.1:1'], saturation: {waiting: 3}}]\n" + models,
               "pools[0].saturation.waiting: unknown key");
}

}  // namespace
}  // namespace sluice
