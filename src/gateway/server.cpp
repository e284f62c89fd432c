#include "gateway/server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include "gateway/observability/admin.h"
#include "gateway/http/http_util.h"
#include "gateway/reload.h"
#include "gateway/signals/health_checker.h"
#include "gateway/signals/kv_event_subscriber.h"
#include "gateway/signals/scraper.h"
#include "gateway/http/session.h"
#include "gateway/http/body_budget.h"
#include "gateway/tls/tls_bridge.h"

#include <malloc.h>

namespace sluice {

namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kTrimAfterBytes = 16u << 20;  // malloc_trim once bodies this large were freed

tcp::endpoint resolve_listen(const Address& a) {
  asio::io_context io;
  tcp::resolver r(io);
  auto results = r.resolve(a.host, std::to_string(a.port));
  if (results.empty()) throw std::runtime_error("cannot resolve " + a.str());
  return results.begin()->endpoint();
}
}  // namespace

Worker::Worker(Gateway& gateway, int index, int workers)
    : gateway_(gateway), index_(index), io_(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO), acceptor_(io_),
      upstream_(io_.get_executor(), workers),
      housekeeping_timer_(io_) {}

void Worker::listen(const tcp::endpoint& at, bool reuse_port) {
  acceptor_.open(at.protocol());
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  if (reuse_port) {
    int one = 1;
    ::setsockopt(acceptor_.native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  }
  acceptor_.bind(at);
  acceptor_.listen(asio::socket_base::max_listen_connections);
}

void Worker::start() {
  asio::co_spawn(io_, accept_loop(), asio::detached);
  asio::co_spawn(io_, housekeeping(), asio::detached);
}

asio::awaitable<void> Worker::accept_loop() {
  while (acceptor_.is_open()) {
    auto [ec, socket] = co_await acceptor_.async_accept(use_tuple);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor_.is_open()) co_return;
      spdlog::warn("accept failed: {}", ec.message());
      asio::steady_timer pause(io_, std::chrono::milliseconds(10));  // EMFILE and friends
      co_await pause.async_wait(use_tuple);
      continue;
    }
    if (gateway_.connections.load(std::memory_order_relaxed) >= gateway_.current()->config->limits.max_connections &&
        !reap_oldest_idle()) {
      // Over the connection limit and nothing idle on this worker to close: a best-effort 503
      // without reading the request, then close.
      static const std::string busy = error_response(
          api_error(503, "The gateway is at its connection limit; retry later.", "server_error", {}, "too_many_connections"),
          false, ResponseHeaders{{"Retry-After", "1"}});
      boost::system::error_code ignored;
      socket.non_blocking(true, ignored);
      ::send(socket.native_handle(), busy.data(), busy.size(), MSG_NOSIGNAL);
      socket.shutdown(tcp::socket::shutdown_send, ignored);
      socket.close(ignored);
      continue;
    }
    Session::start(*this, std::move(socket));
  }
}

bool Worker::reap_oldest_idle() {
  Session* oldest = nullptr;
  for (auto* s : sessions_)
    if (s->idle() && (!oldest || s->idle_since() < oldest->idle_since())) oldest = s;
  // The reaped connection's coroutine unwinds on this thread's next turn; until then the count may
  // exceed the limit by the connections reaped in this turn.
  return oldest && oldest->reap_if_idle();
}

asio::awaitable<void> Worker::housekeeping() {
  while (!draining_) {
    housekeeping_timer_.expires_after(std::chrono::seconds(1));
    co_await housekeeping_timer_.async_wait(use_tuple);
    // Upstream connections of a pool runtime no longer in the current generation (a reload
    // replaced or removed the pool) are closed when idle, not kept for their idle timeout.
    std::vector<uint64_t> live;
    const auto generation = gateway_.current();  // held: a reload may swap it during the loop
    for (const auto& [name, pool] : generation->pools) live.push_back(pool->id);
    upstream_.sweep(SteadyClock::now(), live);
    // After a spike of large request bodies, hand the freed heap back to the kernel.
    if (index_ == 0 && body_budget().trim_due(kTrimAfterBytes)) ::malloc_trim(0);
    generation->admission->poke();  // room that appeared without a request ending
  }
}

void Worker::begin_drain() {
  draining_ = true;
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  housekeeping_timer_.cancel();
  upstream_.close_idle();
  std::vector<Session*> snapshot(sessions_.begin(), sessions_.end());
  for (auto* s : snapshot) s->close_if_idle();
}

void Worker::abort_all() {
  std::vector<Session*> snapshot(sessions_.begin(), sessions_.end());
  for (auto* s : snapshot) s->abort();
}

Server::Server(std::shared_ptr<const Config> config, const ServeOptions& options) : config_path_(options.config_path) {
  config = route_tls_upstreams(std::move(config));  // https:// endpoints through their TLS bridges (tls/)
  GatewayOptions gopts;
  gopts.access_log = options.access_log;
  gateway_ = std::make_unique<Gateway>(config, gopts);  // builds the first generation, admission included
  const int n = options.workers > 0 ? options.workers : config->workers;
  for (int i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>(*gateway_, i, n));

  // The first acceptor picks the port (the config may say 0); the others join it with SO_REUSEPORT.
  // With `tls:` the workers listen on an ephemeral loopback port behind the TLS frontend (tls/).
  const tcp::endpoint public_at = resolve_listen(config->listen);
  tcp::endpoint at = config->tls.enabled() ? tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0) : public_at;
  workers_[0]->listen(at, n > 1);
  at.port(workers_[0]->local_endpoint().port());
  for (int i = 1; i < n; ++i) workers_[i]->listen(at, true);
  port_ = config->tls.enabled() ? start_tls_frontend(config->tls, public_at, at) : at.port();

  admin_ = std::make_unique<AdminListener>(workers_[0]->io(), *gateway_, resolve_listen(config->admin));
  admin_port_ = admin_->port();
}

Server::~Server() {
  // The pools' scrapers and health checks hold strands of the last worker's io_context; a strand
  // must not outlive its io_context, and the workers are destroyed before gateway_ (which owns the
  // generations and so the pool runtimes). Release them while the io_contexts still exist.
  for (const auto& [name, pool] : gateway_->current()->pools) pool->retire();
}

std::vector<asio::any_io_executor> Server::worker_executors() {
  std::vector<asio::any_io_executor> out;
  for (auto& w : workers_) out.push_back(w->io().get_executor());
  return out;
}

void Server::start_loops(const std::shared_ptr<PoolRuntime>& pool) {
  auto now = [gw = gateway_.get()] { return gw->now(); };
  auto& io = workers_.back()->io();
  pool->scrapers = start_scrapers(io, {&pool->router}, now, pool);
  pool->checkers = start_health_checkers(io, {&pool->health}, now, pool);
  if (pool->kv_index) pool->kv_events = std::make_shared<KvEventSubscriber>(pool->config(), pool->kv_index, now);
}

int Server::run() {
  asio::io_context control;
  // Both signal sets exist before anything listens or "listening" is logged: a signal set installs
  // its handler when it is made and queues a signal that comes before anything waits for it. Made
  // after the log line, a SIGHUP sent as soon as the gateway said it was listening (a reload at
  // start-up, as a config manager may send one) met the default action and ended the process.
  asio::signal_set signals(control, SIGINT, SIGTERM);
  asio::signal_set hup(control, SIGHUP);
  const auto& cfg = gateway_->startup_config();
  std::atomic<bool> stop_now{false};
  std::optional<SteadyClock::time_point> drain_deadline;

  for (auto& w : workers_) w->start();
  admin_->start();
  add_health_metrics(gateway_->registry(), [gw = gateway_.get()] {
    std::vector<std::shared_ptr<PoolHealth>> out;
    const auto generation = gw->current();  // held: `for (x : current()->pools)` would dangle across a reload
    for (const auto& [name, pool] : generation->pools) out.emplace_back(pool, &pool->health);
    return out;
  });
  for (const auto& [name, pool] : gateway_->current()->pools) start_loops(pool);
  for (auto& w : workers_) threads_.emplace_back([&io = w->io()] { io.run(); });
  for (auto& svc : services_) svc->start();
  spdlog::info("sluice listening on {}://{}:{} (admin http://{}:{}), {} workers", cfg.tls.enabled() ? "https" : "http",
               cfg.listen.host, port_, cfg.admin.host, admin_port_, workers_.size());

  std::function<void(const boost::system::error_code&, int)> on_signal = [&](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    if (drain_deadline) {
      spdlog::warn("second signal: stopping now");
      stop_now = true;
      return;
    }
    spdlog::info("signal {}: draining (up to {} ms)", sig, to_millis(cfg.drain_timeout));
    gateway_->draining = true;
    stop_tls_frontend_accepting();
    drain_deadline = SteadyClock::now() + cfg.drain_timeout;
    for (auto& w : workers_) asio::post(w->io(), [wp = w.get()] { wp->begin_drain(); });
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  // SIGHUP: re-read the config file, validate it and apply it as a new generation; an invalid one
  // is refused and the current config kept (reload.h).
  std::function<void(const boost::system::error_code&, int)> on_hup = [&](const boost::system::error_code& ec, int) {
    if (ec) return;
    if (drain_deadline) return;  // draining: nothing to reload into
    reload_config(*gateway_, config_path_, [this](const std::shared_ptr<PoolRuntime>& p) { start_loops(p); });
    hup.async_wait(on_hup);
  };
  hup.async_wait(on_hup);

  // Poll: flush the access log, and end the drain when nothing is in flight or time is up.
  asio::steady_timer tick(control);
  std::function<void(const boost::system::error_code&)> on_tick = [&](const boost::system::error_code&) {
    gateway_->access_log().flush();
    if (drain_deadline) {
      const bool idle = gateway_->active_requests.load() == 0;
      if (idle || stop_now || SteadyClock::now() >= *drain_deadline) {
        if (!idle) spdlog::warn("drain timeout: {} requests still in flight", gateway_->active_requests.load());
        control.stop();
        return;
      }
    }
    tick.expires_after(drain_deadline ? std::chrono::milliseconds(10) : std::chrono::milliseconds(250));
    tick.async_wait(on_tick);
  };
  tick.expires_after(std::chrono::milliseconds(250));
  tick.async_wait(on_tick);
  control.run();

  // Close whatever is left and give the coroutines a moment to unwind, so every session (and the
  // upstream leases it holds) is gone before the workers are destroyed.
  for (auto& svc : services_) svc->stop();
  for (auto& w : workers_) asio::post(w->io(), [wp = w.get()] { wp->abort_all(); });
  admin_->stop();
  for (const auto& [name, pool] : gateway_->current()->pools) pool->retire();
  for (int i = 0; i < 100 && gateway_->connections.load() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (auto& w : workers_) w->io().stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  gateway_->access_log().flush();
  stop_tls_bridges();
  spdlog::info("sluice stopped");
  return 0;
}

}  // namespace sluice
