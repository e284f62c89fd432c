// Config: the per-pool `health:`, `outlier:` and `retry:` sections (defaults, values, and errors
// that name the field).
#include <gtest/gtest.h>

#include <string>

#include "core/config.h"

namespace sluice {
namespace {

std::string pool_yaml(const std::string& extra) {
  return "pools:\n  - name: p\n    endpoints: [\"127.0.0.1:8001\", \"127.0.0.1:8002\"]\n" + extra +
         "models:\n  - {name: m, pool: p}\n";
}

std::string error_of(const std::string& yaml) {
  try {
    parse_config(yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigResilience, Defaults) {
  auto cfg = parse_config(pool_yaml(""));
  const auto& p = cfg->pools.at(0);
  EXPECT_TRUE(p.health.enabled);
  EXPECT_EQ(p.health.path, "/health");
  EXPECT_EQ(p.health.interval, std::chrono::milliseconds(1000));
  EXPECT_EQ(p.health.unhealthy_threshold, 3);
  EXPECT_EQ(p.health.healthy_threshold, 2);
  EXPECT_EQ(p.retry.max_retries, 2);
  EXPECT_DOUBLE_EQ(p.retry.budget_ratio, 0.2);
  EXPECT_EQ(p.retry.max_retry_after, std::chrono::milliseconds(1000));
  EXPECT_EQ(p.outlier.consecutive_failures, 5);
}

TEST(ConfigResilience, ParsesValues) {
  auto cfg = parse_config(pool_yaml(
      "    health: {interval_ms: 200, timeout_ms: 100, unhealthy_threshold: 2, healthy_threshold: 1, path: /ready}\n"
      "    outlier: {consecutive_failures: 3, base_ejection_ms: 1000, max_ejection_ms: 5000, max_ejected_fraction: 0.3}\n"
      "    retry: {max_retries: 1, budget_ratio: 0.5, budget_min_per_second: 10, max_retry_after_ms: 250}\n"));
  const auto& p = cfg->pools.at(0);
  EXPECT_EQ(p.health.interval, std::chrono::milliseconds(200));
  EXPECT_EQ(p.health.timeout, std::chrono::milliseconds(100));
  EXPECT_EQ(p.health.unhealthy_threshold, 2);
  EXPECT_EQ(p.health.healthy_threshold, 1);
  EXPECT_EQ(p.health.path, "/ready");
  EXPECT_EQ(p.outlier.consecutive_failures, 3);
  EXPECT_EQ(p.outlier.base_ejection, std::chrono::milliseconds(1000));
  EXPECT_EQ(p.outlier.max_ejection, std::chrono::milliseconds(5000));
  EXPECT_DOUBLE_EQ(p.outlier.max_ejected_fraction, 0.3);
  EXPECT_EQ(p.retry.max_retries, 1);
  EXPECT_DOUBLE_EQ(p.retry.budget_ratio, 0.5);
  EXPECT_DOUBLE_EQ(p.retry.budget_min_per_second, 10);
  EXPECT_EQ(p.retry.max_retry_after, std::chrono::milliseconds(250));
}

TEST(ConfigResilience, ErrorsNameTheField) {
  EXPECT_NE(error_of(pool_yaml("    health: {intervall_ms: 5}\n")).find("pools[0].health.intervall_ms: unknown key"),
            std::string::npos);
  EXPECT_NE(error_of(pool_yaml("    health: {unhealthy_threshold: 0}\n")).find("pools[0].health.unhealthy_threshold"),
            std::string::npos);
  EXPECT_NE(error_of(pool_yaml("    health: {path: health}\n")).find("pools[0].health.path"), std::string::npos);
  EXPECT_NE(error_of(pool_yaml("    retry: {max_retries: 11}\n")).find("pools[0].retry.max_retries"), std::string::npos);
  EXPECT_NE(error_of(pool_yaml("    retry: {budget_ratio: 2}\n")).find("pools[0].retry.budget_ratio"), std::string::npos);
  EXPECT_NE(error_of(pool_yaml("    retry: {tries: 2}\n")).find("pools[0].retry.tries: unknown key"), std::string::npos);
  EXPECT_NE(error_of(pool_yaml("    outlier: {max_ejected_fraction: 1.5}\n")).find("pools[0].outlier.max_ejected_fraction"),
            std::string::npos);
  EXPECT_NE(error_of(pool_yaml("    outlier: {base_ejection_ms: 5000, max_ejection_ms: 1000}\n"))
                .find("pools[0].outlier.max_ejection_ms"),
            std::string::npos);
  EXPECT_NE(error_of(pool_yaml("    health: [1]\n")).find("pools[0].health: expected a mapping"), std::string::npos);
}

}  // namespace
}  // namespace sluice
