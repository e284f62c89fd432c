// The gateway's KV-event subscriber: one thread per pool with events, holding a ZeroMQ SUB socket
// (and a DEALER for the replay ROUTER, and a socket monitor) per endpoint. A thin driver: decoding
// is core/prefix/kv_events.h, sequencing and the index core/prefix/kv_event_index.h.
//
// Loop (zmq_poll over every socket, 100 ms tick to notice stop()):
//   monitor CONNECTED    -> index.set_connected (clears: a restart is a reconnect), then a replay
//                           from seq 0 (warm start from the engine's buffer) when a replay address
//                           is configured; synced when it ends (or at once without replay).
//   monitor DISCONNECTED -> not fresh: the picker uses the learned index for that endpoint.
//   SUB [topic, seq, payload] -> KvSequence: apply / drop a duplicate / on a gap, replay from
//                           last + 1 (DEALER: ["", seq] -> ["", seq, payload]... ["", -1, ""]) with a
//                           deadline (replay_timeout); what the replay cannot fill is a resync.
//   Replays are states of the loop, not calls that wait: while an endpoint replays, its DEALER is
//   polled in place of its SUB (whose live batches queue in ZeroMQ, up to rcvhwm), so a slow or
//   silent replay socket delays only its own endpoint, never another's events.
//   Anything else (wrong frame count, a bad seq frame, a payload that does not decode) is counted
//   (decode_errors) and dropped; a batch that does not decode still advances the sequence.
// The thread never touches a request: picks read the index under its own mutex, so a silent or
// hostile publisher costs the picker nothing but a stale endpoint.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/config.h"
#include "core/prefix/kv_event_index.h"
#include "core/time.h"

namespace sluice {

class KvEventSubscriber {
 public:
  // Subscribes to every endpoint of `pool` that has a kv_events address. `now` is the gateway's clock.
  KvEventSubscriber(const PoolConfig& pool, std::shared_ptr<KvEventIndex> index, std::function<Time()> now);
  ~KvEventSubscriber();
  KvEventSubscriber(const KvEventSubscriber&) = delete;
  KvEventSubscriber& operator=(const KvEventSubscriber&) = delete;

  void stop();  // joins the thread (idempotent)
  const std::shared_ptr<KvEventIndex>& index() const { return index_; }

 private:
  struct Impl;
  void run();

  std::shared_ptr<KvEventIndex> index_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace sluice
