/*
 * The top-level `peer_load:` section: gateway replicas share their in-flight load (peer_load.h)
 * over Redis pub/sub (gateway/redis/peer_load_link.h). Off without it.
 *
 *   peer_load:
 *     redis: redis://127.0.0.1:6379     # or unix:///path; default: the redis: section's url
 *     channel: "sluice:peer-load"       # every replica of one fleet publishes and subscribes here
 *     interval_ms: 5                    # a replica's reports, at most this often (batched)
 *     ttl_ms: 1000                      # a peer not heard from this long is dropped with its load
 *     timeout_ms: 100                   # connect and publish deadline
 *     max_peers: 64                     # peers kept per pool (more are counted and dropped)
 *     gateway_id: ""                    # this replica's id; default hostname-pid
 * Defaults as above. Not reloadable (a reload keeps the running link; pools of a new generation
 * join it).
 */
#pragma once
#include <cstdint>
#include <string>

#include <yaml-cpp/yaml.h>

#include "core/time.h"

namespace sluice {

struct RedisSpec;

struct PeerLoadSpec {
  std::string url;           // as written or taken from redis.url (for logs)
  std::string host;          // TCP, or
  uint16_t port = 6379;
  std::string unix_path;     // a unix socket when set
  std::string channel = "sluice:peer-load";
  Duration interval = std::chrono::milliseconds(5);
  Duration ttl = std::chrono::seconds(1);
  Duration timeout = std::chrono::milliseconds(100);
  size_t max_peers = 64;
  std::string gateway_id;    // empty: hostname-pid (the link decides)
};

// Throws ConfigError naming the field (`peer_load.ttl_ms: ...`). `redis` (may be null): the
// redis: section, whose url is the default.
PeerLoadSpec parse_peer_load_yaml(const YAML::Node& node, const RedisSpec* redis);

}  // namespace sluice
