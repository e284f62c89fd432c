// One downstream (client) connection: HTTP/1.1 keep-alive loop on its worker's io_context.
//
//   wait for bytes (idle_timeout; header_timeout for the first request)
//   read headers  (header_timeout -> 408, > max_header_bytes -> 431, malformed -> 400)
//   framing rules (request_framing.h: TE not ending in chunked, TE + CL, duplicate Host) -> 400, close
//   Content-Length > max_body_bytes -> 413; Expect: 100-continue answered; read body (-> 413 / 408),
//   charging the gateway-wide body budget as it arrives (body_budget.h; past it 503 + Retry-After)
//   route: POST /v1/{chat/completions,completions,embeddings} -> proxy (proxy.h)
//          GET /v1/models, /healthz, /readyz; wrong method 405; unknown path 404
//   repeat while keep-alive and the gateway is not draining.
//
// While a proxied request is in flight the session watches the client socket (a read that returns
// EOF means the client left) and closes the request's upstream connection at once.
#pragma once
#include <array>
#include <chrono>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "gateway/http/watchdog.h"

namespace sluice {

class Gateway;
class UpstreamPool;
class Worker;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Worker& worker, tcp::socket socket);
  ~Session();
  static void start(Worker& worker, tcp::socket socket);

  Gateway& gateway();
  UpstreamPool& upstream_pool();
  tcp::socket& client() { return client_; }
  Watchdog& watchdog() { return watchdog_; }

  // The upstream socket the current request uses (closed on client disconnect or timeout).
  void set_upstream(tcp::socket* s) { upstream_ = s; }
  bool client_gone() const { return client_gone_; }
  // Runs `work` while watching the client for a disconnect; returns when `work` does.
  asio::awaitable<void> while_watching_client(asio::awaitable<void> work);
  // Writes all buffers to the client with the client_write deadline; false on failure (the
  // client is then marked gone).
  asio::awaitable<bool> write(std::string_view a, std::string_view b = {}, std::string_view c = {});

  // Drain: wake an idle connection so it closes.
  void close_if_idle();
  // At the connection limit (server.cpp): a keep-alive connection waiting for its next request is
  // closed to make room; `idle_since` orders them, oldest first. A connection that has not sent a
  // request yet is not idle in this sense (it ends at header_timeout).
  bool idle() const { return idle_ && keep_alive_idle_; }
  std::chrono::steady_clock::time_point idle_since() const { return idle_since_; }
  bool reap_if_idle();
  // Shutdown after the drain: close both sides now.
  void abort();

 private:
  asio::awaitable<void> run();
  // The disconnect watch: one plain read on the client socket (a callback, no coroutine) kept
  // pending while a request is served. EOF or an error: the client left. Bytes: a pipelined next
  // request, kept in early_bytes_. stop_watch cancels it and waits until its handler has run, so
  // the connection's next read never overlaps it.
  void start_watch();
  void on_watch(boost::system::error_code ec, size_t n);
  asio::awaitable<void> stop_watch();
  void on_deadline(Phase phase);

  Worker& worker_;
  tcp::socket client_;
  boost::beast::flat_buffer buffer_;
  Watchdog watchdog_;
  tcp::socket* upstream_ = nullptr;
  bool idle_ = true;
  bool keep_alive_idle_ = false;  // idle_ after at least one request (reapable at the limit)
  std::chrono::steady_clock::time_point idle_since_ = std::chrono::steady_clock::now();
  bool client_gone_ = false;
  std::string early_bytes_;  // bytes the watcher read while a request was in flight (pipelining)
  bool watching_ = false;
  bool watch_pending_ = false;
  std::array<char, 2048> watch_buf_;
  std::unique_ptr<asio::steady_timer> watch_stopped_;  // fallback wait in stop_watch
};

}  // namespace sluice
