#include "core/admission/redis_config.h"

#include <gtest/gtest.h>

#include "core/config.h"
#include "core/config_error.h"

namespace sluice {
namespace {

RedisSpec parse(const std::string& y) { return parse_redis_yaml(YAML::Load(y)); }

std::string error_of(const std::string& y) {
  try {
    parse(y);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(RedisConfig, ParsesTcpAndUnixUrlsAndDefaults) {
  auto s = parse("{url: redis://10.0.0.5:6380}");
  EXPECT_EQ(s.host, "10.0.0.5");
  EXPECT_EQ(s.port, 6380);
  EXPECT_TRUE(s.fail_open);
  EXPECT_EQ(s.timeout, std::chrono::milliseconds(100));
  s = parse("{url: 'unix:///run/redis.sock', on_error: closed, lease: {share: 0, refresh_ms: 500}}");
  EXPECT_EQ(s.unix_path, "/run/redis.sock");
  EXPECT_FALSE(s.fail_open);
  EXPECT_EQ(s.lease.share, 0.0);
  EXPECT_EQ(s.lease.refresh, std::chrono::milliseconds(500));
  EXPECT_EQ(parse("{url: 'redis://localhost'}").port, 6379);
}

TEST(RedisConfig, ErrorsNameTheField) {
  EXPECT_NE(error_of("{on_error: open}").find("redis.url: is required"), std::string::npos);
  EXPECT_NE(error_of("{url: 'http://x:1'}").find("redis.url"), std::string::npos);
  EXPECT_NE(error_of("{url: 'redis://x:0'}").find("redis.url: expected a port"), std::string::npos);
  EXPECT_NE(error_of("{url: 'redis://x:1', on_error: maybe}").find("redis.on_error"), std::string::npos);
  EXPECT_NE(error_of("{url: 'redis://x:1', lease: {share: 2}}").find("redis.lease.share"), std::string::npos);
  EXPECT_NE(error_of("{url: 'redis://x:1', colour: red}").find("redis.colour"), std::string::npos);
}

TEST(RedisConfig, TopLevelSectionNeedsTenants) {
  const std::string base =
      "pools: [{name: p, kind: chat, endpoints: [{address: '127.0.0.1:1'}]}]\nmodels: [{name: m, pool: p}]\n";
  try {
    parse_config(base + "redis: {url: 'redis://127.0.0.1:6379'}\n");
    FAIL() << "accepted redis: without tenants:";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("redis"), std::string::npos);
  }
  auto cfg = parse_config(base + "tenants: [{name: a, key_sha256: [" + std::string(64, 'a') +
                          "]}]\nredis: {url: 'redis://127.0.0.1:6379', on_error: closed}\n");
  ASSERT_TRUE(cfg->redis);
  EXPECT_FALSE(cfg->redis->fail_open);
}

}  // namespace
}  // namespace sluice
