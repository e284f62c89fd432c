#include "gateway/http/session.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>

#include "gateway/gateway.h"
#include "gateway/tls/tls_bridge.h"
#include "gateway/http/body_budget.h"
#include "gateway/http/http_util.h"
#include "gateway/http/put_buffered.h"
#include "gateway/http/request_framing.h"
#include "gateway/http/requests_in_progress.h"
#include "gateway/http/tcp_acked.h"
#include "gateway/http/write_now.h"
#include "gateway/proxy.h"
#include "core/admission/tenants.h"
#include "core/openai/models_list.h"
#include "gateway/server.h"

namespace sluice {

namespace http = boost::beast::http;
namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxEarlyBytes = 64 << 10;
// The connection's read buffer holds a header block, or unparsed bytes (a chunk-size line with its
// extensions, pipelined requests): bounded, so a never-ending chunk extension is a 400, not memory.
constexpr size_t kReadBufferSlack = 256 << 10;
// How far a Content-Length body's buffer is grown ahead of the bytes read into it: what a client
// that announces a large body and sends little can make the gateway hold, like kReadBufferSlack.
constexpr size_t kBodyReadAhead = 256 << 10;
}  // namespace

Session::Session(Worker& worker, tcp::socket socket)
    : worker_(worker), client_(std::move(socket)), watchdog_(client_.get_executor()) {
  boost::system::error_code peer_ec;
  const auto peer = client_.remote_endpoint(peer_ec);
  if (!peer_ec) peer_ = format_host_port(peer.address().to_string(), peer.port());  // the access log's `client`
  if (!peer_ec && tls_frontend_active() && peer.address().is_loopback())
    if (auto real = tls_client_of(peer.port())) peer_ = std::move(*real);  // relayed by the TLS frontend
  gateway().connections.fetch_add(1, std::memory_order_relaxed);
  worker_.add(this);
}

Session::~Session() {
  worker_.remove(this);
  gateway().connections.fetch_sub(1, std::memory_order_relaxed);
}

Gateway& Session::gateway() { return worker_.gateway(); }
UpstreamPool& Session::upstream_pool() { return worker_.upstream(); }

void Session::start(Worker& worker, tcp::socket socket) {
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  auto self = std::make_shared<Session>(worker, std::move(socket));
  asio::co_spawn(self->client_.get_executor(),
                 [self]() -> asio::awaitable<void> { co_await self->watchdog_.run([s = self.get()](Phase p) { s->on_deadline(p); }); },
                 asio::detached);
  asio::co_spawn(self->client_.get_executor(), [self]() { return self->run(); }, asio::detached);
}

void Session::on_deadline(Phase phase) {
  boost::system::error_code ignored;
  switch (phase) {
    case Phase::first_byte:
    case Phase::stream_gap:
      cancel_.emit(asio::cancellation_type::terminal);  // the request's upstream exchange ends
      break;
    case Phase::total:
      cancel_.emit(asio::cancellation_type::terminal);
      client_.cancel(ignored);
      break;
    case Phase::client_write:
      // A write waiting for the client's window: cut only if the client took nothing over the whole
      // window (timeouts.idle_ms is a stalled client's limit, not a large answer's). Its progress is
      // the bytes the client acknowledged, not the write's completions: with megabytes of send
      // buffer the socket only turns writable again once half of it has drained, which a slow but
      // steady reader takes longer than idle_ms to do.
      if (write_progress_) {
        const int64_t acked = tcp_bytes_acked(client_.native_handle());
        if (acked > write_acked_) {
          write_acked_ = acked;
          watchdog_.arm_capped(write_progress_->stall, Phase::client_write, write_progress_->until, Phase::total);
          break;
        }
      }
      client_.cancel(ignored);
      break;
    default:
      client_.cancel(ignored);
  }
}

void Session::close_if_idle() {
  if (idle_) {
    boost::system::error_code ignored;
    client_.cancel(ignored);
  }
}

bool Session::reap_if_idle() {
  if (!idle()) return false;
  idle_ = false;  // not picked twice while its read unwinds
  boost::system::error_code ignored;
  client_.cancel(ignored);
  return true;
}

void Session::abort() {
  boost::system::error_code ignored;
  client_gone_ = true;
  cancel_.emit(asio::cancellation_type::terminal);
  client_.close(ignored);
}

asio::awaitable<bool> Session::write(std::string_view a, std::string_view b, std::string_view c,
                                     std::optional<Progress> progress) {
  if (client_gone_) co_return false;
  std::array<asio::const_buffer, 3> bufs{asio::buffer(a), asio::buffer(b), asio::buffer(c)};
  const WriteNow w = write_now(client_, bufs);
  auto [ec, n] = w.result();
  if (!w.complete()) {
    // The client's window is full: from here its reading is what the deadline watches (on_deadline).
    if (progress) {
      write_progress_ = progress;
      write_acked_ = tcp_bytes_acked(client_.native_handle());
    }
    std::tie(ec, n) = co_await write_rest(client_, bufs, w);
    write_progress_.reset();
  }
  if (ec) client_gone_ = true;
  co_return !ec;
}

void Session::start_watch() {
  watching_ = true;
  watch_deferred_ = false;
  // A FIN already here, right behind the request (SHUT_WR after sending, as `nc -N` and some
  // HTTP/1.0 clients do), is a half-close: the client still reads, so its request is served and
  // the disconnect watch is not started. A FIN that comes later is a client that left: reading
  // cannot tell the two apart (the socket is in CLOSE_WAIT either way), and a later FIN is far
  // more often an abort, which must free the engine at once. If a "half-closed" client had in
  // fact gone, the first write fails and the request ends then. Looked for once, on a connection's
  // first request, when its watch first starts (for a forwarded request: once it is written
  // upstream, off the path of its latency), unless bytes of a next request are already here. The
  // clients that shut their sending side behind a request send one request per connection; on a
  // kept-alive connection a FIN is a client that left, and the peek (a syscall that finds nothing,
  // a sixth of the gateway's per request) is not paid on every request.
  if (check_half_close_) {
    check_half_close_ = false;
    if (early_bytes_.empty() && buffer_.size() == 0 && client_.is_open()) {
      char peek;
      if (::recv(client_.native_handle(), &peek, 1, MSG_PEEK | MSG_DONTWAIT) == 0) half_closed_ = true;
    }
  }
  if (watch_pending_ || half_closed_ || !client_.is_open()) return;
  watch_pending_ = true;
  client_.async_read_some(asio::buffer(watch_buf_), WatchRead(shared_from_this()));
}

void Session::on_watch(boost::system::error_code ec, size_t n) {
  watch_pending_ = false;
  if (!ec && n > 0) {
    early_bytes_.append(watch_buf_.data(), n);  // a pipelined next request: kept for the loop
    if (watching_ && early_bytes_.size() < kMaxEarlyBytes) {
      start_watch();
      return;
    }
  } else if (ec != asio::error::operation_aborted) {
    client_gone_ = true;  // EOF or reset: the client left
    if (watching_) cancel_.emit(asio::cancellation_type::terminal);  // the engine sees the abort at once
  }
  // Last: the waiting coroutine (watch_completion) resumes here, inline, and may start the next watch.
  if (watch_waiter_) {
    auto resume = std::move(*watch_waiter_);
    watch_waiter_.reset();
    std::move(resume)();
  }
}

asio::awaitable<void> Session::stop_watch() {
  watching_ = false;
  if (!watch_pending_) co_return;
  boost::system::error_code ignored;
  client_.cancel(ignored);
  // The cancelled read's handler is queued before this continuation on the connection's
  // (single-threaded) io_context; the loop below covers the case where it is not.
  co_await asio::post(client_.get_executor(), asio::use_awaitable);
  while (watch_pending_) co_await watch_completion();
}

void Session::watch_now() {
  if (watch_deferred_) start_watch();
}

asio::awaitable<void> Session::watching(asio::awaitable<void> work, WatchFrom from) {
  // A read already pending (the admission queue's watch) keeps watching from now.
  if (from == WatchFrom::sent && !watch_pending_) {
    watch_deferred_ = true;
  } else {
    start_watch();
  }
  std::exception_ptr error;
  try {
    co_await std::move(work);
  } catch (...) {
    error = std::current_exception();
  }
  // The read stays pending (run() takes it over as the keep-alive read); from here an EOF only
  // ends the connection, it no longer cancels a request.
  watching_ = false;
  watch_deferred_ = false;
  if (error) std::rethrow_exception(error);
}

namespace {

std::string_view path_of(std::string_view target) {
  auto q = target.find('?');
  return q == std::string_view::npos ? target : target.substr(0, q);
}

// Lingering close: stop sending, then read and drop what the client still sends for a moment so
// the kernel does not answer it with a reset that could destroy our response in flight.
asio::awaitable<void> linger_close(tcp::socket& s, Watchdog& wd) {
  boost::system::error_code ignored;
  s.shutdown(tcp::socket::shutdown_send, ignored);
  wd.arm(std::chrono::seconds(1), Phase::idle);
  char sink[4096];
  size_t dropped = 0;
  while (dropped < (1u << 20)) {
    auto [ec, n] = co_await s.async_read_some(asio::buffer(sink), use_tuple);
    if (ec) break;
    dropped += n;
  }
  wd.disarm();
  s.close(ignored);
}

}  // namespace

asio::awaitable<void> Session::run() {
  auto self = shared_from_this();  // keeps the session alive for the coroutine's life
  auto& gw = gateway();
  const ServerLimits limits = gw.current()->config->limits;  // a connection keeps the limits it started with
  bool first = true;
  bool linger = false;
  buffer_.max_size(limits.max_header_bytes + kReadBufferSlack);
  // (Built here: GCC 12 miscompiles initializer lists inside co_await expressions.)
  const ResponseHeaders allow_post{{"Allow", "POST"}}, allow_get{{"Allow", "GET"}};
  const ResponseHeaders retry_soon{{"Retry-After", "1"}}, no_extra;

  auto reply_error = [&](ApiError e, Reason reason, const ResponseHeaders& extra) -> asio::awaitable<void> {
    co_await write(error_response(e, false, extra));
    RequestRecord r;
    r.id = new_request_id();
    r.client = peer_;
    r.status = e.status;
    r.outcome = Outcome::rejected;
    r.reason = reason;
    gw.complete(r);
    linger = true;
  };

  // Waiting for the next request: reapable once it has served one, under the idle (keep-alive)
  // timeout, or the header timeout before the first.
  auto begin_idle = [&] {
    idle_ = true;
    keep_alive_idle_ = !first;
    idle_since_ = SteadyClock::now();  // one clock read for both
    watchdog_.arm_at(idle_since_ + (first ? limits.header_timeout : limits.idle_timeout), Phase::idle);
  };

  for (;;) {
    if (watch_pending_) {
      if (early_bytes_.empty() && buffer_.size() == 0 && !worker_.draining()) {
        // The last request's disconnect watch is the keep-alive read: wait for it.
        begin_idle();
        while (watch_pending_) co_await watch_completion();
        idle_ = false;
        if (early_bytes_.empty()) break;  // EOF, reset, idle timeout, drain or reaped (cancelled)
      } else {
        co_await stop_watch();  // bytes are here already (or draining): the loop reads itself
      }
    }
    if (!early_bytes_.empty()) {
      if (buffer_.size() + early_bytes_.size() > buffer_.max_size()) break;  // a pipelining flood
      auto b = buffer_.prepare(early_bytes_.size());
      std::memcpy(b.data(), early_bytes_.data(), early_bytes_.size());
      buffer_.commit(early_bytes_.size());
      early_bytes_.clear();
    }
    if (buffer_.size() == 0) {
      // The next request is read after the worker's other ready handlers when other requests are
      // in progress on it (asio::post queues this coroutine behind them): Asio tries every read at
      // once, and right after an answer the client cannot have sent its next request yet, so the
      // read would find nothing and wait in epoll for a second read. Behind a busy worker's other
      // handlers the client has often sent it, and one read takes it. (The upstream exchange reads
      // the engine's answer behind them for the same reason.) Alone on the worker, read at once.
      if (!first && RequestInProgress::count() > 0) co_await asio::post(client_.get_executor(), asio::use_awaitable);
      if (worker_.draining()) break;
      begin_idle();
      auto [ec, n] = co_await client_.async_read_some(buffer_.prepare(4096), use_tuple);
      idle_ = false;
      if (ec || n == 0) break;  // closed, idle timeout, or drain
      buffer_.commit(n);
    }
    first = false;

    BodyCharge body_charge(body_budget());  // declared before the parser: released after its body is freed
    http::request_parser<RequestBody> parser;
    parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
    parser.body_limit(limits.max_body_bytes);
    watchdog_.arm(limits.header_timeout, Phase::header);
    parser.eager(false);  // the header first: stop there
    boost::system::error_code hec = put_buffered(parser, buffer_, false);
    if (!hec && !parser.is_header_done()) std::tie(hec, std::ignore) = co_await http::async_read_header(client_, buffer_, parser, use_tuple);
    if (hec) {
      if (watchdog_.expired() == Phase::header)
        co_await reply_error(api_error(408, "Timed out reading the request headers.", "invalid_request_error", {}, "request_timeout"), Reason::header_timeout, no_extra);
      else if (hec == http::error::body_limit)  // Content-Length over the limit, seen with the headers
        co_await reply_error(api_error(413, fmt::format("Request body is larger than the limit of {} bytes.", limits.max_body_bytes),
                                       "invalid_request_error", {}, "request_too_large"), Reason::body_too_large, no_extra);
      else if (hec == http::error::header_limit)
        co_await reply_error(api_error(431, "Request headers are too large.", "invalid_request_error", {}, "headers_too_large"), Reason::headers_too_large, no_extra);
      else if (hec != http::error::end_of_stream && hec != asio::error::eof && hec != asio::error::connection_reset &&
               hec != asio::error::operation_aborted)
        co_await reply_error(api_error(400, "Malformed HTTP request: " + hec.message() + "."), Reason::bad_http, no_extra);
      break;
    }
    ActiveRequest active(gw);
    RequestInProgress in_progress;
    const auto head_done = SteadyClock::now();
    auto& req = parser.get();
    if (static_cast<size_t>(std::distance(req.begin(), req.end())) > limits.max_header_count) {
      co_await reply_error(api_error(431, fmt::format("Request has more than {} header fields.", limits.max_header_count),
                                     "invalid_request_error", {}, "headers_too_large"), Reason::headers_too_large, no_extra);
      break;
    }
    bool keep_alive = req.keep_alive() && !worker_.draining();
    if (auto framing = check_request_framing(req)) {  // smuggling-prone framing: refuse and close
      co_await reply_error(api_error(framing->status, framing->message, "invalid_request_error", {}, "bad_request"),
                           framing->reason, no_extra);
      break;
    }

    if (parser.content_length() && *parser.content_length() > limits.max_body_bytes) {
      co_await reply_error(api_error(413, fmt::format("Request body is larger than the limit of {} bytes.", limits.max_body_bytes),
                                     "invalid_request_error", {}, "request_too_large"), Reason::body_too_large, no_extra);
      break;
    }
    bool body_waited = false;  // the body was not all here with the head: it was read (and waited for)
    if (!parser.is_done()) {
      // Read piece by piece, charging the gateway-wide body budget as the bytes arrive.
      boost::system::error_code bec;
      bool over_budget = false;
      parser.eager(true);  // the body: as much as is here
      while (!parser.is_done()) {
        boost::system::error_code ec = put_buffered(parser, buffer_, true);
        if (!ec && !parser.is_done()) {
          if (!body_waited) {
            // More is to come: a 100 Continue if the client waits for one (RFC 9110 15.2.1: not
            // needed for a body already here, the small request's case), then the body's deadline.
            body_waited = true;
            auto expect = req[http::field::expect];
            if (expect.size() == 12 && boost::beast::iequals(expect, "100-continue"))
              co_await write("HTTP/1.1 100 Continue\r\n\r\n");
            watchdog_.arm(limits.header_timeout, Phase::body);
          }
          if (const auto length = parser.content_length(); length && buffer_.size() == 0) {
            // A Content-Length body: read from the socket straight into the body's buffer, grown
            // (not written, charged) at most kBodyReadAhead past the bytes put, instead of through
            // buffer_ and a copy (RequestBody takes bytes already in place without copying them).
            auto& body = req.body();
            const size_t filled = static_cast<size_t>(*length - parser.content_length_remaining().value_or(0));
            // The whole capacity first (RequestBody's init would reserve it, but only once it is
            // handed the first body bytes, which would move the buffer under the read).
            body.reserve(static_cast<size_t>(*length) + kBodyPadding);
            if (body.size() <= filled)
              body.resize_for_overwrite(std::min<size_t>(filled + kBodyReadAhead, static_cast<size_t>(*length)));
            if (!body_charge.grow_to(body.size(), limits.max_buffered_body_bytes)) {
              over_budget = true;
              break;
            }
            size_t n = 0;
            std::tie(ec, n) = co_await client_.async_read_some(asio::buffer(body.data() + filled, body.size() - filled), use_tuple);
            if (!ec) parser.put(asio::const_buffer(body.data() + filled, n), ec);
            else if (ec == asio::error::eof) ec = http::error::partial_message;  // as Beast's read reports it
          } else {  // chunked (or a partial chunk header left buffered: the read parses it with the rest)
            std::tie(ec, std::ignore) = co_await http::async_read_some(client_, buffer_, parser, use_tuple);
          }
        }
        if (ec) {
          bec = ec;
          break;
        }
        if (!body_charge.grow_to(req.body().size(), limits.max_buffered_body_bytes)) {
          over_budget = true;
          break;
        }
      }
      if (over_budget) {
        co_await reply_error(api_error(503, "The gateway is holding too many request bodies; retry later.", "server_error", {},
                                       "too_many_buffered_bodies"),
                             Reason::buffer_full, retry_soon);
        break;
      }
      if (bec) {
        if (watchdog_.expired() == Phase::body)
          co_await reply_error(api_error(408, "Timed out reading the request body.", "invalid_request_error", {}, "request_timeout"), Reason::body_timeout, no_extra);
        else if (bec == http::error::body_limit)
          co_await reply_error(api_error(413, fmt::format("Request body is larger than the limit of {} bytes.", limits.max_body_bytes),
                                         "invalid_request_error", {}, "request_too_large"), Reason::body_too_large, no_extra);
        else if (bec != http::error::end_of_stream && bec != asio::error::eof && bec != asio::error::connection_reset &&
                 bec != http::error::partial_message)
          co_await reply_error(api_error(400, "Malformed HTTP request body: " + bec.message() + "."), Reason::bad_http, no_extra);
        break;
      }
    }
    watchdog_.disarm();
    // A body that came with the head (a small request) was read when the head was: no second clock read.
    request_read_at_ = body_waited ? SteadyClock::now() : head_done;
    check_half_close_ = served_ == 0;  // start_watch looks for a FIN right behind a connection's first request
    ++served_;
    const Duration body_read = request_read_at_ - head_done;

    // ---- route ----
    const std::string_view path = path_of(req.target());
    const auto method = req.method();
    std::optional<ApiKind> kind;
    if (path == "/v1/chat/completions") kind = ApiKind::chat;
    else if (path == "/v1/completions") kind = ApiKind::completion;
    else if (path == "/v1/embeddings") kind = ApiKind::embedding;
    else if (path == "/v1/responses") kind = ApiKind::response;
    else if (path == "/tokenize") kind = ApiKind::tokenize;
    // vLLM's render routes (the KV-events work asks engines for token ids): chat or prompt bodies,
    // routed like /tokenize to the pool of the body's model.
    else if (path == "/v1/chat/completions/render" || path == "/v1/completions/render") kind = ApiKind::tokenize;
    else if (path == "/detokenize") kind = ApiKind::detokenize;
    else if (path == "/v1/rerank" || path == "/rerank" || path == "/v2/rerank") kind = ApiKind::rerank;
    else if (path == "/v1/score" || path == "/score") kind = ApiKind::score;
    const bool head = method == http::verb::head;

    // The API listener's own answers pass the one completion path too (access log + metrics),
    // timed from the request's read.
    const auto started = request_read_at_;
    auto answer = [&](std::string response, int status, Reason reason,
                      const Tenant* tenant = nullptr) -> asio::awaitable<void> {
      // HEAD: the head alone (its Content-Length still that of the body a GET would get).
      if (head) response.resize(std::min(response.size(), response.find("\r\n\r\n") + 4));
      co_await write(response);
      RequestRecord r;
      auto rid = req["x-request-id"];
      r.id = rid.empty() || rid.size() > 128 ? new_request_id() : std::string(rid);
      r.path = std::string(path.substr(0, 256));
      r.method = std::string(std::string_view(req.method_string()).substr(0, 16));
      r.client = peer_;
      r.status = status;
      r.outcome = status < 400 ? Outcome::ok : Outcome::rejected;
      r.reason = reason;
      if (tenant) {  // a configured tenant's name (a bounded label value)
        r.tenant = tenant->name;
        r.tenant_configured = true;
        r.priority = tenant->priority;
      }
      r.duration = SteadyClock::now() - started;
      gw.complete(r);
    };
    // /v1/models with tenants: the key is checked as on every API route (401 otherwise), and the
    // caller sees only the models its tenant may use. False: refused (answered here).
    const Tenant* models_tenant = nullptr;
    auto authorize_models = [&](const Generation& g) -> asio::awaitable<bool> {
      models_tenant = nullptr;
      if (!g.admission->enforcing()) co_return true;
      AuthOutcome auth = g.admission->authenticate(req.base());
      if (auth.denial) {
        ResponseHeaders h;
        for (auto& [k, v] : auth.denial->headers()) h.emplace_back(std::string(k), std::move(v));
        co_await answer(error_response(auth.denial->error, keep_alive, h), auth.denial->error.status, Reason::unauthorized);
        co_return false;
      }
      models_tenant = auth.tenant;
      co_return true;
    };
    const auto not_allowed = [&](std::string_view use, const ResponseHeaders& allow) {
      return error_response(api_error(405, fmt::format("Method {} is not allowed on {}; use {}.",
                                                       std::string_view(req.method_string()).substr(0, 32), path.substr(0, 256), use),
                                      "invalid_request_error", {}, "method_not_allowed"),
                            keep_alive, allow);
    };
    if (kind) {
      if (method != http::verb::post) {
        co_await answer(not_allowed("POST", allow_post), 405, Reason::method_not_allowed);
      } else {
        const RequestContext ctx{gw, upstream_pool(), *this, body_read, request_read_at_, peer_};
        keep_alive = co_await proxy_request(ctx, *kind, req, keep_alive);
      }
    } else if (path.starts_with("/v1/models/") && path.size() > 11) {
      if (method != http::verb::get && method != http::verb::head) {
        co_await answer(not_allowed("GET", allow_get), 405, Reason::method_not_allowed);
      } else {
        const auto generation = gw.current();
        const std::string id = decode_model_id(path.substr(11));
        if (co_await authorize_models(*generation)) {
          if (auto entry = model_json(*generation->config, id, generation->models_created, models_tenant))
            co_await answer(simple_response(200, "application/json", *entry, keep_alive), 200, Reason::none, models_tenant);
          else  // not configured, or not the tenant's: the same answer
            co_await answer(error_response(api_error(404, fmt::format("The model `{}` does not exist.", truncate_echo(id)),
                                                     "invalid_request_error", "model", "model_not_found"), keep_alive),
                            404, generation->config->find_model(id) ? Reason::model_not_allowed : Reason::unknown_model,
                            models_tenant);
        }
      }
    } else if (path == "/v1/models" || path == "/healthz" || path == "/readyz") {
      if (method != http::verb::get && method != http::verb::head) {
        co_await answer(not_allowed("GET", allow_get), 405, Reason::method_not_allowed);
      } else if (path == "/v1/models") {
        const auto generation = gw.current();
        if (co_await authorize_models(*generation)) {
          std::string narrowed;  // a tenant with an allow-list: its own list; else the generation's
          if (models_tenant && !models_tenant->allowed_models.empty())
            narrowed = models_list_json(*generation->config, generation->models_created, models_tenant);
          const std::string_view list = narrowed.empty() ? std::string_view(generation->models_json) : narrowed;
          co_await answer(simple_response(200, "application/json", list, keep_alive), 200, Reason::none, models_tenant);
        }
      } else if (path == "/healthz") {
        co_await answer(simple_response(200, "application/json", "{\"status\":\"ok\"}", keep_alive), 200, Reason::none);
      } else {
        const bool ready = gw.ready();
        co_await answer(simple_response(ready ? 200 : 503, "application/json",
                                        ready ? "{\"status\":\"ready\"}" : "{\"status\":\"not ready\"}", keep_alive),
                        ready ? 200 : 503, ready ? Reason::none : Reason::no_endpoint);
      }
    } else {
      co_await answer(error_response(api_error(404, fmt::format("Unknown path {}.", path.substr(0, 256)), "invalid_request_error", {}, "not_found"),
                                     keep_alive),
                      404, Reason::not_found);
    }
    if (!keep_alive || client_gone_) break;
  }
  watchdog_.disarm();
  if (linger && !client_gone_) {
    co_await linger_close(client_, watchdog_);
  } else {
    boost::system::error_code ignored;
    client_.shutdown(tcp::socket::shutdown_send, ignored);
    client_.close(ignored);
  }
  watchdog_.stop();
}

}  // namespace sluice
