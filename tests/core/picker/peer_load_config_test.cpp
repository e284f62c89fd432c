// The `peer_load:` section: defaults, the redis: section's url as the default server, and errors
// that name the key.
#include <gtest/gtest.h>

#include "core/config.h"
#include "core/config_error.h"
#include "core/picker/peer_load_config.h"

namespace sluice {
namespace {

const std::string kBase = "pools: [{name: p, endpoints: ['127.0.0.1:1']}]\nmodels: [{name: m, pool: p}]\n";

std::string error_of(const std::string& yaml) {
  try {
    parse_config(kBase + yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(PeerLoadConfig, OffByDefaultAndDefaults) {
  EXPECT_EQ(parse_config(kBase)->peer_load, nullptr);
  auto cfg = parse_config(kBase + "peer_load: {redis: 'redis://10.0.0.5:6380'}\n");
  ASSERT_NE(cfg->peer_load, nullptr);
  const PeerLoadSpec& s = *cfg->peer_load;
  EXPECT_EQ(s.host, "10.0.0.5");
  EXPECT_EQ(s.port, 6380);
  EXPECT_EQ(s.channel, "sluice:peer-load");
  EXPECT_EQ(s.interval, std::chrono::milliseconds(5));
  EXPECT_EQ(s.ttl, std::chrono::seconds(1));
  EXPECT_EQ(s.max_peers, 64u);
  EXPECT_TRUE(s.gateway_id.empty());
  auto unix_cfg = parse_config(kBase + "peer_load: {redis: 'unix:///run/r.sock', channel: c, interval_ms: 10, ttl_ms: 300, "
                                       "max_peers: 8, gateway_id: gw-1}\n");
  EXPECT_EQ(unix_cfg->peer_load->unix_path, "/run/r.sock");
  EXPECT_EQ(unix_cfg->peer_load->ttl, std::chrono::milliseconds(300));
  EXPECT_EQ(unix_cfg->peer_load->gateway_id, "gw-1");
}

TEST(PeerLoadConfig, ErrorsNameTheKey) {
  EXPECT_NE(error_of("peer_load: {channel: x}\n").find("peer_load.redis"), std::string::npos);
  EXPECT_NE(error_of("peer_load: {redis: 'http://x:1'}\n").find("peer_load.redis"), std::string::npos);
  EXPECT_NE(error_of("peer_load: {redis: 'redis://x:1', ttl_ms: 8, interval_ms: 5}\n").find("peer_load.ttl_ms"),
            std::string::npos);
  EXPECT_NE(error_of("peer_load: {redis: 'redis://x:1', interval_ms: 0}\n").find("peer_load.interval_ms"), std::string::npos);
  EXPECT_NE(error_of("peer_load: {redis: 'redis://x:1', chanel: x}\n").find("chanel"), std::string::npos);
  EXPECT_NE(error_of("peer_load: [1]\n").find("peer_load"), std::string::npos);
}

}  // namespace
}  // namespace sluice
