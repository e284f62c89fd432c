// The gateway process: N worker threads, each with its own io_context, its own SO_REUSEPORT
// acceptor on the listen address, its own sessions and its own upstream connection pool.
//
// Why one io_context per thread rather than one shared by N threads: a connection, its timers,
// its watchdog and the upstream connections it leases then all live on one thread, so none of them
// needs a strand or a lock, and the upstream pool is lock-free (Envoy's worker model). The
// io_context is created with BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO: no per-socket locking in the
// reactor, because no socket is ever touched from another thread (other threads only post
// handlers, e.g. the admission dispatcher waking a queued request, which stays locked). The kernel
// spreads new connections across the reuseport acceptors. What is shared (PoolRouter, metrics,
// counters) is either mutex-per-pool or atomics. The admin listener runs on worker 0, the
// engine-metrics scrapers on the last worker.
//
// Reload (SIGHUP): the config file is re-read into a new generation (generation.h, reload.h) and
// swapped in atomically; connections and requests in flight are not touched.
//
// Connection limit (limits.max_connections): at the limit the accepting worker first closes its
// longest-idle keep-alive connection (one that served a request and waits for its next) to make
// room; only when it has none is the new connection refused (503 too_many_connections,
// Retry-After: 1). Connections that never sent a request end at header_timeout instead.
//
// Shutdown (SIGTERM / SIGINT): every worker closes its acceptor (new connections are refused) and
// its idle keep-alive connections; requests in flight run to completion (their connections close
// afterwards) until none is left or drain_timeout passes; then the process exits 0. A second
// signal stops at once.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_set>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "gateway/gateway.h"
#include "gateway/http/upstream_pool.h"

namespace sluice {

class Session;
class Scrapers;

class Worker {
 public:
  Worker(Gateway& gateway, int index, int workers);
  asio::io_context& io() { return io_; }
  Gateway& gateway() { return gateway_; }
  UpstreamPool& upstream() { return upstream_; }
  int index() const { return index_; }
  bool draining() const { return draining_; }

  void listen(const tcp::endpoint& at, bool reuse_port);
  tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
  void start();         // spawns the accept loop and the housekeeping timer
  void begin_drain();   // must run on this worker's thread
  void abort_all();     // after the drain: close every connection (this worker's thread)
  void add(Session* s) { sessions_.insert(s); }
  void remove(Session* s) { sessions_.erase(s); }

 private:
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> housekeeping();
  // At max_connections: closes this worker's longest-idle keep-alive connection; false if none.
  bool reap_oldest_idle();

  Gateway& gateway_;
  int index_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  UpstreamPool upstream_;
  std::unordered_set<Session*> sessions_;
  asio::steady_timer housekeeping_timer_;
  bool draining_ = false;
};

struct ServeOptions {
  std::string access_log = "-";
  int workers = 0;  // 0: the config's
  std::string config_path;  // re-read, validated and applied on SIGHUP (empty: SIGHUP is ignored)
};

// A listener run beside the workers on the same gateway (the Endpoint Picker's gRPC listener,
// src/extproc/): started once the workers run, stopped when the drain ends, before they stop.
class GatewayService {
 public:
  virtual ~GatewayService() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
};

class Server {
 public:
  Server(std::shared_ptr<const Config> config, const ServeOptions& options);
  ~Server();
  // The workers' executors (a service runs its request work on them) and the services to run.
  std::vector<asio::any_io_executor> worker_executors();
  void add_service(std::unique_ptr<GatewayService> service) { services_.push_back(std::move(service)); }
  // Starts a new pool runtime's background loops (a service that installs generations needs it).
  std::function<void(const std::shared_ptr<PoolRuntime>&)> loop_starter() {
    return [this](const std::shared_ptr<PoolRuntime>& p) { start_loops(p); };
  }
  Gateway& gateway() { return *gateway_; }
  uint16_t port() const { return port_; }
  uint16_t admin_port() const { return admin_port_; }
  // Runs until SIGTERM/SIGINT and the drain; returns the process exit code.
  int run();

 private:
  std::unique_ptr<Gateway> gateway_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0, admin_port_ = 0;
  std::string config_path_;
  std::unique_ptr<class AdminListener> admin_;
  std::vector<std::unique_ptr<GatewayService>> services_;
  // A pool runtime's engine /metrics scrapers (scraper.h) and health checks, on the last worker.
  void start_loops(const std::shared_ptr<PoolRuntime>& pool);
};

}  // namespace sluice
