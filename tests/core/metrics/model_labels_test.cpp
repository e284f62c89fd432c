#include "core/metrics/model_labels.h"

#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace sluice {
namespace {

TEST(ModelLabels, BaseAliasAdapterAndAliasOfAdapter) {
  auto cfg = parse_config(R"(
pools:
  - {name: chat, endpoints: ["127.0.0.1:8001"]}
  - {name: emb, kind: embedding, endpoints: ["127.0.0.1:8100"]}
models:
  - {name: llama-8b, pool: chat}
  - {name: llama, alias_of: llama-8b}
  - {name: sql-lora, adapter_of: llama-8b}
  - {name: sql, alias_of: sql-lora}
  - {name: bge, pool: emb}
)");
  const auto l = model_labels(*cfg);
  ASSERT_EQ(l.size(), 5u);
  EXPECT_EQ(l.at("llama-8b"), (ModelLabels{"chat", "llama-8b", "-"}));
  EXPECT_EQ(l.at("llama"), (ModelLabels{"chat", "llama-8b", "-"}));  // the alias is its target
  EXPECT_EQ(l.at("sql-lora"), (ModelLabels{"chat", "llama-8b", "sql-lora"}));
  EXPECT_EQ(l.at("sql"), (ModelLabels{"chat", "llama-8b", "sql-lora"}));
  EXPECT_EQ(l.at("bge"), (ModelLabels{"emb", "bge", "-"}));
}

TEST(ModelLabels, BoundedInConfigOrder) {
  std::string yaml = "pools:\n  - {name: chat, endpoints: [\"127.0.0.1:8001\"]}\nmodels:\n";
  const size_t bases = kMaxModelLabels + 3, adapters = kMaxAdapterLabels + 5;
  for (size_t i = 0; i < bases; ++i) yaml += fmt::format("  - {{name: base-{}, pool: chat}}\n", i);
  for (size_t i = 0; i < adapters; ++i) yaml += fmt::format("  - {{name: lora-{}, adapter_of: base-0}}\n", i);
  yaml += fmt::format("  - {{name: late-alias, alias_of: base-{}}}\n", bases - 1);
  const auto l = model_labels(*parse_config(yaml));
  EXPECT_EQ(l.at(fmt::format("base-{}", kMaxModelLabels - 1)).model, fmt::format("base-{}", kMaxModelLabels - 1));
  EXPECT_EQ(l.at(fmt::format("base-{}", kMaxModelLabels)).model, "other");
  EXPECT_EQ(l.at("late-alias").model, "other");
  EXPECT_EQ(l.at(fmt::format("lora-{}", kMaxAdapterLabels - 1)).adapter, fmt::format("lora-{}", kMaxAdapterLabels - 1));
  EXPECT_EQ(l.at(fmt::format("lora-{}", kMaxAdapterLabels)), (ModelLabels{"chat", "base-0", "other"}));
  // Every value is a configured name, "-" or "other": bounded whatever clients send.
  size_t distinct_models = 0;
  std::set<std::string> seen;
  for (const auto& [name, labels] : l) distinct_models += seen.insert(labels.model).second;
  EXPECT_EQ(distinct_models, kMaxModelLabels + 1);
}

}  // namespace
}  // namespace sluice
