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
// EOF means the client left) and emits the request's cancellation signal (downstream.h), which
// closes the request's upstream connection at once. The request sees only the Downstream interface.
#pragma once
#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "gateway/http/downstream.h"
#include "gateway/http/watchdog.h"

namespace sluice {

class Gateway;
class UpstreamPool;
class Worker;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class Session final : public Downstream, public std::enable_shared_from_this<Session> {
 public:
  Session(Worker& worker, tcp::socket socket);
  ~Session() override;
  static void start(Worker& worker, tcp::socket socket);

  Gateway& gateway();
  UpstreamPool& upstream_pool();

  // ---- Downstream: what the request may use ----
  asio::awaitable<bool> write(std::string_view a, std::string_view b = {}, std::string_view c = {},
                              std::optional<Progress> progress = std::nullopt) override;
  bool gone() const override { return client_gone_; }
  asio::cancellation_slot cancel_slot() override { return cancel_.slot(); }
  void deadline(SteadyClock::time_point at, Phase phase) override { watchdog_.arm_at(at, phase); }
  void clear_deadline() override { watchdog_.disarm(); }
  Phase expired() const override { return watchdog_.expired(); }
  asio::awaitable<void> watching(asio::awaitable<void> work, WatchFrom from = WatchFrom::now) override;
  void watch_now() override;

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
  // request, kept in early_bytes_. When the request is done the read stays pending: it is also the
  // keep-alive read for the next request (run() waits for it, watch_completion), which saves the
  // cancellation's two handler hops and a read that would find nothing per request. A request that
  // never waits for the engine (its answer already there when first looked for) starts no watch,
  // and run() reads the next request itself (Downstream::WatchFrom). stop_watch
  // cancels it and waits until its handler has run, for when the loop must read itself (bytes
  // already here), so the connection's reads never overlap.
  void start_watch();
  void on_watch(boost::system::error_code ec, size_t n);
  asio::awaitable<void> stop_watch();
  // The pending watch read's completion, awaited: co_await until !watch_pending_ (its handler may
  // have started the next watch). A plain function, not a coroutine: awaited in run()'s own frame,
  // the keep-alive wait allocates no frame of its own.
  auto watch_completion() {
    return asio::async_initiate<decltype(asio::use_awaitable), void()>(
        [this](auto handler) { watch_waiter_.emplace(std::move(handler)); }, asio::use_awaitable);
  }
  void on_deadline(Phase phase);

  Worker& worker_;
  tcp::socket client_;
  std::string peer_;  // the client's address (host:port), for the access log
  boost::beast::flat_buffer buffer_;
  Watchdog watchdog_;
  asio::cancellation_signal cancel_;  // emitted when the client leaves or a request deadline passes
  // The write in progress that waits for the client's window: its deadline's terms, and the bytes the
  // client had acknowledged at the last look (on_deadline's progress test; tcp_acked.h).
  std::optional<Progress> write_progress_;
  int64_t write_acked_ = -1;
  bool idle_ = true;
  bool keep_alive_idle_ = false;  // idle_ after at least one request (reapable at the limit)
  std::chrono::steady_clock::time_point idle_since_ = std::chrono::steady_clock::now();
  bool client_gone_ = false;
  bool half_closed_ = false;  // the client shut its sending side right after a request (still reads)
  bool check_half_close_ = false;  // the connection's first request was read: its first start_watch looks for a FIN
  uint64_t served_ = 0;            // requests read on this connection
  bool watch_deferred_ = false;    // watching(WatchFrom::sent) until watch_now()
  SteadyClock::time_point request_read_at_{};  // when the current request was read
  std::string early_bytes_;  // bytes the watcher read while a request was in flight (pipelining)
  bool watching_ = false;
  bool watch_pending_ = false;
  std::array<char, 2048> watch_buf_;
  // The coroutine awaiting watch_completion(), resumed by on_watch directly (a timer cancelled to wake it
  // cost a trip through the scheduler per request: the completion posted, then run).
  std::optional<asio::any_completion_handler<void()>> watch_waiter_;
  // The watch read's completion handler. Destroyed without being called (the io_context torn down
  // with the read pending), it drops watch_waiter_: that coroutine holds the session, which holds it.
  struct WatchRead {
    std::shared_ptr<Session> self;
    bool called = false;
    explicit WatchRead(std::shared_ptr<Session> s) : self(std::move(s)) {}
    WatchRead(WatchRead&& o) noexcept : self(std::move(o.self)), called(o.called) {}
    WatchRead(const WatchRead&) = delete;
    ~WatchRead() {
      if (self && !called) self->watch_waiter_.reset();
    }
    void operator()(boost::system::error_code ec, size_t n) {
      called = true;
      self->on_watch(ec, n);
    }
  };
};

}  // namespace sluice
