// One simulated vLLM replica served over HTTP on its own loopback port.
//
// Event-driven on one io_context: a coroutine per connection, one timer per engine step (the step
// loop sleeps while the engine is idle), no thread per request, no busy loop. The engine clock is
// the steady clock scaled by `time_scale` (2 = twice as fast as real time).
//
// Life of an inference request (session coroutine, top to bottom):
//   parse (core/request.h) -> model check (404) -> injected fault (error / spike / hang) ->
//   tokenise the rendered text -> context check (400) -> front-end overhead -> engine.submit ->
//   stream tokens as steps emit them (or collect them) -> usage -> done.
// A client that disconnects at any point aborts its request in the engine (blocks freed at once).
#pragma once
#include <boost/asio.hpp>
#include <chrono>
#include <deque>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "model/engine/engine.h"
#include "model/engine/output_length.h"
#include "sim/duty_cycle.h"
#include "sim/faults.h"
#include "sim/kv_publisher.h"
#include "sim/metrics_format.h"

namespace sluice::sim {

struct ReplicaConfig {
  int index = 0;
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0 = ephemeral
  engine::EngineConfig engine;
  std::string model_name = "meta-llama/Llama-3.1-8B-Instruct";
  std::vector<std::string> adapters;  // LoRA adapters known at start
  engine::OutputLengthDist output_len;
  double time_scale = 1.0;
  double frontend_overhead_ms = 20.0;  // added before queueing (HTTP + tokenizer in real vLLM)
  // --tokenizer foreign: every id of the byte rule (model/engine/tokenizer.h) moved by one (mod the
  // vocabulary), so the gateway's estimate never matches the KV events and only the render route
  // (which uses the same tokenizer) gives the ids the events carry, as with a real tokenizer.
  bool foreign_tokenizer = false;
  MetricsFlavor metrics_flavor = MetricsFlavor::vllm;
  FaultConfig faults;
  double exit_after_s = 0;  // fault: stop this replica after this many (real) seconds; 0 = never
  KvEventsConfig kv_events;  // vLLM's --kv-events-config (ports offset by `index`)
  uint64_t seed = 1;
};

class Replica {
 public:
  Replica(boost::asio::io_context& io, ReplicaConfig cfg);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Binds and listens; an error message on failure.
  std::optional<std::string> listen();
  uint16_t port() const { return port_; }
  // The KV-event publisher (null unless kv_events.enabled), for its addresses.
  const KvPublisher* kv_publisher() const { return kv_.get(); }
  // Starts accepting and stepping.
  void start();
  // Closes the listener and every connection, aborts every request.
  void stop();
  bool stopped() const { return stopped_; }

 private:
  struct Stream;
  struct Connection;
  using tcp = boost::asio::ip::tcp;
  template <class T>
  using awaitable = boost::asio::awaitable<T>;

  awaitable<void> accept_loop();
  awaitable<void> step_loop();
  awaitable<void> session(tcp::socket sock);
  awaitable<bool> handle_generate(Connection& c, int kind, const std::string& body, bool keep_alive);
  awaitable<bool> wait_until_client_gone(Connection& c, std::shared_ptr<Stream> st);
  void watch_disconnect(Connection& c, std::shared_ptr<Stream> st);
  void dispatch(const engine::StepResult& r);
  std::string metrics_text();
  std::pair<int, std::string> handle_lora(bool load, const std::string& body);
  // /tokenize, /detokenize, /v1/rerank, /v1/score (replica_session.cpp).
  std::pair<int, std::string> handle_extra(int kind, const std::string& body);
  // vLLM's render routes (/v1/chat/completions/render, /v1/completions/render): the token ids the
  // engine would run, from the same chat template and tokenizer as generation (replica_session.cpp).
  awaitable<bool> handle_render(Connection& c, bool chat, const std::string& body, bool keep_alive);
  // The replica's tokenizer (the byte rule, or --tokenizer foreign's).
  std::vector<engine::TokenId> tokenize(std::string_view text) const;
  Time now() const;
  std::chrono::steady_clock::duration real(Duration engine_time) const;
  void wake_step_loop();
  void publish_kv_events();

  boost::asio::io_context& io_;
  ReplicaConfig cfg_;
  engine::Engine engine_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  boost::asio::steady_timer step_timer_;
  boost::asio::steady_timer idle_timer_;
  std::chrono::steady_clock::time_point epoch_;
  int64_t created_unix_ = 0;
  bool stopped_ = false;
  bool idle_ = false;
  // Engine time the step schedule gave up because the machine woke the loop too late (more than
  // kMaxLag behind): time the simulated GPU did not work, which a loaded host costs a live run and
  // fleetsim never pays. Exported as sluice_sim_schedule_lag_dropped_seconds_total.
  Duration lag_dropped_{0};

  std::mt19937_64 rng_;
  engine::RequestId next_id_ = 1;
  std::unordered_map<engine::RequestId, std::shared_ptr<Stream>> streams_;
  std::unordered_set<Connection*> connections_;
  std::vector<std::string> adapters_;
  FaultConfig faults_;
  std::string frozen_metrics_;
  LoraInfoHistory lora_info_;
  DutyCycle duty_;
  // Responses API, store=true: response id -> the conversation so far (rendered input + output),
  // as vLLM keeps it in the replica's memory; the oldest dropped past kMaxStoredResponses.
  std::unordered_map<std::string, std::string> stored_responses_;
  std::deque<std::string> stored_order_;
  std::unique_ptr<KvPublisher> kv_;
};

}  // namespace sluice::sim
