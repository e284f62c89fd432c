#include "core/picker/peer_load_config.h"

#include "core/admission/redis_config.h"
#include "core/config_yaml.h"

namespace sluice {

using namespace config_yaml;

PeerLoadSpec parse_peer_load_yaml(const YAML::Node& node, const RedisSpec* redis) {
  if (!node.IsMap()) fail("peer_load", "expected a mapping");
  check_keys(node, "peer_load", {"redis", "channel", "interval_ms", "ttl_ms", "timeout_ms", "max_peers", "gateway_id"});
  PeerLoadSpec s;
  if (node["redis"]) {
    s.url = get<std::string>(node["redis"], "peer_load.redis", "a string");
    RedisSpec r;
    parse_redis_url(s.url, "peer_load.redis", r);
    s.host = r.host;
    s.port = r.port;
    s.unix_path = r.unix_path;
  } else if (redis) {
    s.url = redis->url;
    s.host = redis->host;
    s.port = redis->port;
    s.unix_path = redis->unix_path;
  } else {
    fail("peer_load.redis", "is required (or a redis: section, whose url is the default)");
  }
  if (node["channel"]) {
    s.channel = get<std::string>(node["channel"], "peer_load.channel", "a string");
    if (s.channel.empty() || s.channel.size() > 256) fail("peer_load.channel", "expected 1..256 characters");
  }
  if (node["interval_ms"]) s.interval = get_ms(node["interval_ms"], "peer_load.interval_ms", 1, 10'000);
  if (node["ttl_ms"]) s.ttl = get_ms(node["ttl_ms"], "peer_load.ttl_ms", 10, 600'000);
  if (node["timeout_ms"]) s.timeout = get_ms(node["timeout_ms"], "peer_load.timeout_ms", 1, 60'000);
  if (s.ttl < 2 * s.interval) fail("peer_load.ttl_ms", "must be at least twice interval_ms (peers would expire between reports)");
  if (node["max_peers"]) s.max_peers = static_cast<size_t>(get_int(node["max_peers"], "peer_load.max_peers", 1, 1024));
  if (node["gateway_id"]) {
    s.gateway_id = get<std::string>(node["gateway_id"], "peer_load.gateway_id", "a string");
    if (s.gateway_id.size() > 128) fail("peer_load.gateway_id", "expected at most 128 characters");
  }
  return s;
}

}  // namespace sluice
