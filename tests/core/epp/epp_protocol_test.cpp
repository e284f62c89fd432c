#include "core/epp/epp_protocol.h"

#include <gtest/gtest.h>

#include "core/config.h"

namespace sluice::epp {
namespace {

TEST(EppProtocol, ObjectivePriorityNamesOrIntegers) {
  ExtProcConfig cfg;
  cfg.objectives = {{"critical", 5}, {"batch", -1}};
  EXPECT_EQ(objective_priority("critical", cfg), 5);
  EXPECT_EQ(objective_priority(" batch ", cfg), -1);
  EXPECT_EQ(objective_priority("-3", cfg), -3);
  EXPECT_EQ(objective_priority("", cfg), std::nullopt);
  EXPECT_EQ(objective_priority("unknown", cfg), std::nullopt);
  EXPECT_EQ(objective_priority("12abc", cfg), std::nullopt);
  EXPECT_EQ(objective_priority("99999999999", cfg), std::nullopt);
}

TEST(EppProtocol, SubsetRestrictsInRankOrder) {
  const std::vector<std::string_view> ranked = {"10.0.0.3:8000", "10.0.0.1:8000", "10.0.0.2:8000"};
  const auto subset = split_endpoints({"10.0.0.2:8000, 10.0.0.3:8000", " ", "10.9.9.9:1"});
  EXPECT_EQ(subset, (std::vector<std::string>{"10.0.0.2:8000", "10.0.0.3:8000", "10.9.9.9:1"}));
  const auto allowed = restrict_to_subset(ranked, &subset);
  EXPECT_EQ(allowed, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(destination_list(ranked, allowed, 3), "10.0.0.3:8000,10.0.0.2:8000");
  EXPECT_EQ(destination_list(ranked, restrict_to_subset(ranked, nullptr), 2), "10.0.0.3:8000,10.0.0.1:8000");
  const std::vector<std::string> none = {"1.1.1.1:1"};
  EXPECT_TRUE(restrict_to_subset(ranked, &none).empty());
  const std::vector<std::string> empty;
  EXPECT_TRUE(restrict_to_subset(ranked, &empty).empty());  // an empty list: nothing is eligible (503)
}

TEST(EppProtocol, DroppedReasonsAndPaths) {
  EXPECT_EQ(dropped_reason(RejectReason::shed), kDroppedSaturated);
  EXPECT_EQ(dropped_reason(RejectReason::queue_full), kDroppedSaturated);
  EXPECT_EQ(dropped_reason(RejectReason::queue_timeout), kDroppedTtlExpired);
  EXPECT_EQ(path_kind("/v1/chat/completions?x=1"), PathKind::chat);
  EXPECT_EQ(path_kind("/v1/completions"), PathKind::completion);
  EXPECT_EQ(path_kind("/embeddings"), PathKind::embedding);
  EXPECT_EQ(path_kind("/v1/models"), std::nullopt);
}

TEST(EppConfig, ParsesAndNamesTheKey) {
  const std::string base = R"(
pools:
  - name: chat
    endpoints: [127.0.0.1:8000]
models:
  - {name: m, pool: chat}
)";
  auto cfg = parse_config("ext_proc: {listen: 127.0.0.1:0, destinations: 2, objectives: {hi: 3}}\n" + base);
  ASSERT_TRUE(cfg->ext_proc);
  EXPECT_EQ(cfg->ext_proc->listen_port, 0);
  EXPECT_EQ(cfg->ext_proc->destinations, 2);
  EXPECT_EQ(cfg->ext_proc->objectives.at("hi"), 3);
  EXPECT_EQ(cfg->ext_proc->threads, 1);
  EXPECT_EQ(parse_config("ext_proc: {listen: 127.0.0.1:0, threads: 3}\n" + base)->ext_proc->threads, 3);
  EXPECT_FALSE(parse_config(base)->ext_proc);
  auto error_of = [&](const std::string& y) {
    try {
      parse_config(y);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("ext_proc: {destinations: 2}\n" + base).find("ext_proc.listen"), std::string::npos);
  EXPECT_NE(error_of("ext_proc: {listen: 127.0.0.1:1, destinations: 40}\n" + base).find("ext_proc.destinations"), std::string::npos);
  EXPECT_NE(error_of("ext_proc: {listen: 127.0.0.1:1, colour: red}\n" + base).find("colour"), std::string::npos);
  EXPECT_NE(error_of("ext_proc: {listen: 127.0.0.1:1, threads: 0}\n" + base).find("ext_proc.threads"), std::string::npos);
}

TEST(EppConfig, DiscoveryPoolNeedsNoStaticEndpoints) {
  auto cfg = parse_config(R"(
pools:
  - name: chat
    discovery: {kubernetes: {inference_pool: llama, namespace: ml, api_server: "http://127.0.0.1:1"}}
models:
  - {name: m, pool: chat}
)");
  ASSERT_TRUE(cfg->pools[0].discovery);
  EXPECT_TRUE(cfg->pools[0].endpoints.empty());
  EXPECT_EQ(cfg->pools[0].discovery->inference_pool, "llama");
  EXPECT_EQ(cfg->pools[0].discovery->namespace_name, "ml");
  EXPECT_THROW(parse_config(R"(
pools:
  - name: chat
    discovery: {kubernetes: {namespace: ml}}
models:
  - {name: m, pool: chat}
)"),
               ConfigError);
  EXPECT_THROW(parse_config(R"(
pools:
  - name: chat
    discovery: {kubernetes: {selector: {app: x}}}
models:
  - {name: m, pool: chat}
)"),
               ConfigError);  // selector without target_ports
}

}  // namespace
}  // namespace sluice::epp
