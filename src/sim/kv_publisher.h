// The simulator's KV-event publisher: vLLM's ZmqEventPublisher, over libzmq (cppzmq), for one
// replica. A thin driver: the events come from the engine model's block manager
// (model/engine/block_manager.h), the encoding from core/prefix/kv_events.h.
//
//   --kv-events-config '{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557",
//                        "replay_endpoint":"tcp://*:5558","buffer_steps":10000,"topic":"kv@pod@model"}'
//   (vLLM's own JSON; replica i offsets both ports by i, as vLLM does per data-parallel rank;
//   a port of `*` binds an ephemeral port, printed at start-up) and --kv-events-encoding
//   arrays|maps (vLLM <= 0.25 / >= 0.26; default maps).
//
// PUB: [topic, seq (8 bytes big-endian, from 0), msgpack EventBatch] per engine step that stored,
// evicted or cleared blocks; the last buffer_steps batches are kept for replay. ROUTER (replay):
// a request [identity, "", start seq (8 bytes)] gets [identity, "", seq, payload] for every
// buffered batch from start on, then [identity, "", -1 (8 bytes), ""]. Malformed requests are
// counted and ignored. The ROUTER's ZMQ_FD is watched by the replica's io_context (no thread, no
// polling loop); PUB sends never block (past the high-water mark ZeroMQ drops, as in vLLM).
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "core/prefix/kv_events.h"

namespace sluice::sim {

struct KvEventsConfig {
  bool enabled = false;
  std::string endpoint = "tcp://*:5557";
  std::string replay_endpoint;  // empty: no replay socket
  std::string topic;
  size_t buffer_steps = 10000;
  int hwm = 100000;
  kv::Encoding encoding = kv::Encoding::maps;
};

// Parses vLLM's --kv-events-config JSON; nullopt with `error` set when invalid.
std::optional<KvEventsConfig> parse_kv_events_config(std::string_view json, std::string& error);
// vLLM's offset_endpoint_port: the port after the last ':' plus `offset` (a `*` port is kept).
std::string offset_endpoint_port(const std::string& endpoint, int offset);

class KvPublisher {
 public:
  KvPublisher(boost::asio::io_context& io, KvEventsConfig cfg, int data_parallel_rank);
  ~KvPublisher();
  KvPublisher(const KvPublisher&) = delete;
  KvPublisher& operator=(const KvPublisher&) = delete;

  // Binds (or connects, as vLLM does for an address without a wildcard); an error on failure.
  std::optional<std::string> open();
  // The addresses bound (ephemeral ports resolved).
  std::string pub_address() const;
  std::string replay_address() const;

  // Publishes one batch of the engine's events (nothing when empty).
  void publish(std::vector<kv::Event> events);
  void close();

  int64_t batches_published() const { return next_seq_; }
  int64_t replay_requests() const { return replay_requests_; }
  int64_t bad_replay_requests() const { return bad_replay_requests_; }

 private:
  struct Impl;
  void arm_replay();
  void serve_replay();

  boost::asio::io_context& io_;
  KvEventsConfig cfg_;
  int rank_;
  std::unique_ptr<Impl> impl_;
  std::deque<std::pair<int64_t, std::string>> buffer_;
  int64_t next_seq_ = 0;
  int64_t replay_requests_ = 0, bad_replay_requests_ = 0;
  std::string scratch_;
};

}  // namespace sluice::sim
