#include "sim/embedded_fleet.h"

#include <boost/asio/post.hpp>
#include <future>
#include <stdexcept>

#include "sim/replica.h"

namespace sluice::sim {

namespace {
engine::EngineConfig engine_config(std::string_view profile_name, const EmbeddedFleetOptions& o, int index) {
  auto profile = engine::find_profile(profile_name);
  if (!profile) throw std::runtime_error("unknown engine profile " + std::string(profile_name));
  auto ec = engine::EngineConfig::from_profile(*profile);
  if (o.kv_blocks > 0 && !ec.embedding) ec.num_blocks = o.kv_blocks;
  ec.seed = o.seed + static_cast<uint64_t>(index);
  ec.cost.jitter_sigma = 0.05;
  if (auto err = ec.validate(); !err.empty()) throw std::runtime_error(err);
  return ec;
}
}  // namespace

EmbeddedFleet::EmbeddedFleet(const EmbeddedFleetOptions& o) {
  auto add = [&](ReplicaConfig rc) {
    auto r = std::make_unique<Replica>(io_, std::move(rc));
    if (auto err = r->listen()) throw std::runtime_error("simulated replica: " + *err);
    r->start();
    const uint16_t port = r->port();
    replicas_.push_back(std::move(r));
    return port;
  };
  for (int i = 0; i < o.chat_replicas; ++i) {
    ReplicaConfig rc;
    rc.index = i;
    rc.engine = engine_config(engine::kDefaultProfile, o, i);
    rc.model_name = o.model;
    rc.adapters = o.adapters;
    rc.time_scale = o.time_scale;
    rc.seed = o.seed + static_cast<uint64_t>(i);
    chat_ports_.push_back(add(std::move(rc)));
  }
  ReplicaConfig emb;
  emb.index = o.chat_replicas;
  emb.engine = engine_config("embedding", o, o.chat_replicas);
  emb.model_name = o.embedding_model;
  emb.time_scale = o.time_scale;
  embedding_port_ = add(std::move(emb));
  thread_ = std::thread([this] { io_.run(); });
}

void EmbeddedFleet::stop() {
  if (stopped_) return;
  stopped_ = true;
  // Replicas are stopped on their own thread, then the io_context is allowed to finish.
  std::promise<void> done;
  boost::asio::post(io_, [&] {
    for (auto& r : replicas_) r->stop();
    done.set_value();
  });
  done.get_future().wait_for(std::chrono::seconds(5));
  io_.stop();
  if (thread_.joinable()) thread_.join();
}

EmbeddedFleet::~EmbeddedFleet() { stop(); }

}  // namespace sluice::sim
