// A simulated fleet started inside another process (the gateway's `sluice serve` with no config):
// chat replicas of the default 8B profile with a LoRA adapter, plus one embedding replica, all on
// ephemeral loopback ports, served by one background thread. Stopping (or destroying) the fleet
// stops every replica and joins the thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

namespace sluice::sim {

class Replica;

struct EmbeddedFleetOptions {
  int chat_replicas = 4;
  double time_scale = 1.0;
  int64_t kv_blocks = 0;  // 0: the profile's
  std::string model = "meta-llama/Llama-3.1-8B-Instruct";
  std::string embedding_model = "BAAI/bge-small-en-v1.5";
  std::vector<std::string> adapters = {"sql-lora"};
  uint64_t seed = 1;
};

class EmbeddedFleet {
 public:
  explicit EmbeddedFleet(const EmbeddedFleetOptions& options);  // throws std::runtime_error
  ~EmbeddedFleet();
  EmbeddedFleet(const EmbeddedFleet&) = delete;
  EmbeddedFleet& operator=(const EmbeddedFleet&) = delete;

  const std::vector<uint16_t>& chat_ports() const { return chat_ports_; }
  uint16_t embedding_port() const { return embedding_port_; }
  void stop();

 private:
  boost::asio::io_context io_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<uint16_t> chat_ports_;
  uint16_t embedding_port_ = 0;
  std::thread thread_;
  bool stopped_ = false;
};

}  // namespace sluice::sim
