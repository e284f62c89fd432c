/*
 * The live transport of shared in-flight load between gateway replicas (`peer_load:`, issue 15
 * item 5): every replica publishes its own accounting (core/picker/peer_report.h) on one Redis
 * pub/sub channel and applies what the others publish to its pools' PeerLoad
 * (core/picker/peer_load.h, merged into what the picker sees by PoolRouter).
 *
 * Why Redis pub/sub (and not a direct peer stream): the replicas need no list of each other (a
 * Deployment scales them; each only knows the channel), the project already runs Redis for shared
 * budgets (the same server can carry both), and pub/sub is exactly the fan-out wanted: fire and
 * forget, at most once, ordered per publisher connection, no storage. Lost or late messages cost
 * nothing lasting: a report is state (the sender's whole in-flight accounting), so the next one
 * repairs a loss, and a peer that stops reporting expires after ttl_ms. A direct stream would need
 * discovery of the peers and N^2 connections for the same semantics.
 *
 * One thread, two hiredis connections (the sync API of Debian's libhiredis: a blocking context per
 * role with a deadline; no request ever waits for this thread):
 *   every interval_ms  build each pool's section (PoolRouter::peer_report, from the own accounting
 *                      under the pool's mutex; nothing on the per-token path), and when something
 *                      changed or the heartbeat (ttl / 4) is due, one PUBLISH of the whole message.
 *   in between         poll() the subscriber socket; each ["message", channel, payload] is decoded
 *                      (decode_peer_message) and each pool section applied to the pool of the
 *                      current generation with that name (PoolRouter::apply_peer). Garbage (not
 *                      msgpack, a wrong shape, values out of range) is counted and dropped.
 * Redis down or unreachable: connect attempts back off (200 ms doubling to 2 s); nothing is sent
 * or received, the peers' load expires after ttl_ms and routing falls back to the own accounting
 * and the scraped signals, as without peer_load. Routing never stalls on Redis: picks read the
 * PeerLoad under the pool's mutex, which this thread holds only to apply one section.
 * Pools join the link when it first sees them (a reload's new pools included): share_load is
 * called on their router then.
 * Metrics: sluice_peer_load_reports_total{direction="sent|received"},
 * sluice_peer_load_decode_errors_total, sluice_peer_load_dropped_total{reason},
 * sluice_peer_load_redis_up, sluice_peer_load_redis_errors_total, sluice_peer_load_peers{pool},
 * sluice_peer_load_in_flight{pool,endpoint} (the live peers' requests).
 */
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "core/picker/peer_load_config.h"
#include "gateway/server.h"

namespace sluice {

class Gateway;

class PeerLoadLink : public GatewayService {
 public:
  PeerLoadLink(Gateway& gateway, const PeerLoadSpec& spec);
  ~PeerLoadLink() override;
  void start() override;
  void stop() override;
  const std::string& gateway_id() const { return id_; }

  struct Stats {
    std::atomic<uint64_t> sent{0}, received{0}, decode_errors{0}, redis_errors{0};
    std::atomic<uint64_t> unknown_pool{0}, duplicate{0}, too_many_peers{0}, bad_value{0};
    std::atomic<bool> up{false};
  };

 private:
  void run();

  Gateway& gateway_;
  const PeerLoadSpec spec_;
  const std::string id_;
  std::shared_ptr<Stats> stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace sluice
