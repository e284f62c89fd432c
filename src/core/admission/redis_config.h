/*
 * The top-level `redis:` section: where the shared token buckets live and what to do when that
 * store cannot be reached. Without it every replica keeps its own local buckets (budget.h).
 *
 *   redis:
 *     url: redis://127.0.0.1:6379       # or unix:///run/redis/redis.sock
 *     on_error: open                    # open: local buckets of 1/N of the budget while Redis is
 *                                       # unreachable (N = replicas seen); closed: 429 with a clear
 *                                       # error for what the local lease cannot cover
 *     timeout_ms: 100                   # per call and per connect (then on_error applies)
 *     key_prefix: "sluice:"
 *     replica_window_ms: 10000          # a replica counts towards N while seen this recently
 *     lease: {share: 0.25, max_slice: 0.05, idle_return_ms: 1000, sync_interval_ms: 200, refresh_ms: 1000}
 * Defaults as above (lease_policy.h states what the lease settings cost). Requires `tenants:`.
 */
#pragma once
#include <cstdint>
#include <string>

#include <yaml-cpp/yaml.h>

#include "core/admission/lease_policy.h"
#include "core/time.h"

namespace sluice {

struct RedisSpec {
  std::string url;           // as written (for logs)
  std::string host;          // TCP, or
  uint16_t port = 6379;
  std::string unix_path;     // a unix socket when set
  bool fail_open = true;
  Duration timeout = std::chrono::milliseconds(100);
  std::string key_prefix = "sluice:";
  Duration replica_window = std::chrono::seconds(10);
  LeaseConfig lease;
};

// redis://HOST:PORT[/0] or unix:///path into out.host / port / unix_path; ConfigError naming `key`.
void parse_redis_url(const std::string& url, const std::string& key, RedisSpec& out);

// Throws ConfigError naming the field (`redis.url: ...`).
RedisSpec parse_redis_yaml(const YAML::Node& node);

}  // namespace sluice
