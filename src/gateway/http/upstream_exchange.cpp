#include "gateway/http/upstream_exchange.h"
#include "gateway/http/put_buffered.h"
#include "gateway/http/requests_in_progress.h"
#include "gateway/http/write_now.h"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <tuple>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>

namespace sluice {

namespace http = boost::beast::http;
namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr uint32_t kMaxResponseHead = 64u << 10;
constexpr size_t kReadBuffer = 32u << 10;
// Read buffers of finished exchanges, kept for the next ones on this worker thread (an exchange lives
// and ends on its worker's one thread): a fresh 32 KiB buffer per request was a malloc and a free
// that consolidated the heap each time. At most kSpareBuffers (2 MiB) per thread.
constexpr size_t kSpareBuffers = 64;
std::vector<boost::beast::flat_buffer>& spare_buffers() {
  thread_local std::vector<boost::beast::flat_buffer> spare;
  return spare;
}
}  // namespace

UpstreamExchange::UpstreamExchange(UpstreamLease lease, Downstream& down, const ExchangeDeadlines& deadlines)
    : lease_(std::move(lease)), down_(down), deadlines_(deadlines), slot_(down.cancel_slot()) {
  if (auto& spare = spare_buffers(); !spare.empty()) {
    buffer_ = std::move(spare.back());
    spare.pop_back();
  }
  if (slot_.is_connected())
    slot_.assign([sock = &lease_.socket()](asio::cancellation_type) {
      boost::system::error_code ignored;
      sock->close(ignored);
    });
}

UpstreamExchange::~UpstreamExchange() {
  if (slot_.is_connected()) slot_.clear();
  // lease_ closes the connection unless done() marked it reusable
  if (auto& spare = spare_buffers(); spare.size() < kSpareBuffers && buffer_.capacity() == kReadBuffer) {
    buffer_.clear();
    spare.push_back(std::move(buffer_));
  }
}

asio::awaitable<boost::system::error_code> UpstreamExchange::send(std::string_view head, std::string_view body,
                                                                  SteadyClock::time_point start) {
  const auto first = start + deadlines_.first_byte;
  if (deadlines_.total < first) down_.deadline(deadlines_.total, Phase::total);
  else down_.deadline(first, Phase::first_byte);
  // The request goes out after the worker has run the handlers already ready in this turn of its
  // loop (asio::post queues this coroutine behind them), so the requests read from one burst of
  // client sockets reach the engine back to back: the engine's process is woken once for the burst,
  // not once per request. Over loopback the sender pays for waking the receiver (sock_def_readable
  // and the inter-processor interrupt: 14% of the gateway's CPU at 64 connections before, 5% after;
  // bench/results/overhead.txt run 21). A request alone on its worker goes at once: there is no
  // burst to join, and the post would still cost a turn of the scheduler (a zero-timeout
  // epoll_wait) before the send (requests_in_progress.h).
  const bool others = RequestInProgress::count() > 1;  // this request and at least one more
  if (others) co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  std::array<asio::const_buffer, 2> bufs{asio::buffer(head), asio::buffer(body)};
  const WriteNow w = write_now(lease_.socket(), bufs);
  auto [wec, wn] = w.result();
  if (!w.complete()) std::tie(wec, wn) = co_await write_rest(lease_.socket(), bufs, w);
  if (wec) co_return wec;
  sent_at_ = SteadyClock::now();
  // The answer is read after the worker's other ready handlers too: the engine has just been woken
  // and cannot have answered yet, so a read now (Asio tries every read at once) would find nothing;
  // after the rest of the burst's sends it often has. 0.9 of the 3.7 recvfrom calls per small
  // request at 64 connections were such empty reads (overhead.txt run 21). Alone on the worker there
  // is nothing to run meanwhile: the look below follows at once.
  if (others) co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
  buffer_.clear();
  // Beast reads max(512, capacity - size) bytes at a time: give it room for whole relay chunks,
  // or a fast stream arrives in ~1 KB reads (one parse, one client write each).
  buffer_.reserve(kReadBuffer);
  // What the engine has answered by now is read with one recv (MSG_DONTWAIT) and parsed here. Beast's
  // async read would read it at once too, but its completion, like every Asio operation that finishes
  // in its initiating call, is posted: one more scheduler turn (its queue, a zero-timeout
  // epoll_wait) per request, the third of a small request's (strace). Nothing here yet, or EOF: the
  // async read below waits (and finds the same EOF). Asio has no "complete inline if possible" read;
  // this is write_now's counterpart.
  {
    const auto room = buffer_.prepare(kReadBuffer);
    const ssize_t got = ::recv(lease_.socket().native_handle(), room.data(), room.size(), MSG_DONTWAIT);
    if (got > 0) buffer_.commit(static_cast<size_t>(got));
    else if (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      co_return boost::system::error_code(errno, boost::system::system_category());
  }
  for (int interim = 0;; ++interim) {
    parser_.emplace();
    parser_->header_limit(kMaxResponseHead);
    parser_->body_limit(boost::none);
    // The head from the bytes already read (the whole of a small answer, usually); the async read
    // brings what is missing.
    boost::system::error_code ec = put_buffered(*parser_, buffer_, false);
    if (!ec && !parser_->is_header_done()) {
      // The engine has not answered yet: the request waits for it, so the client is watched from
      // here (Downstream::WatchFrom::sent). An answer already here (above) is relayed without a
      // watch: nothing waits, and the watch's first read would find nothing.
      down_.watch_now();
      std::tie(ec, std::ignore) = co_await http::async_read_header(lease_.socket(), buffer_, *parser_, use_tuple);
    }
    if (ec) co_return ec;
    head_read_ = true;
    const int status = parser_->status();
    if (status >= 200) co_return boost::system::error_code{};
    // 1xx: an interim response (RFC 9110 section 15.2). 101 would switch protocols, which the
    // gateway never asked for; more than a few interim heads is a server that never answers.
    if (status == 101 || interim + 1 >= kMaxInterim) co_return http::error::bad_status;
  }
}

asio::awaitable<bool> UpstreamExchange::read(char* data, size_t size, size_t& got, boost::system::error_code& ec,
                                             std::optional<SteadyClock::time_point> gap_deadline) {
  got = 0;
  while (got == 0 && !parser_->is_done()) {
    parser_->set_target(data, size);
    if (buffer_.size() > 0) {
      // Bytes already read (a small response arrives with its head): parsed here, as Beast's read
      // does before it reads, but without its completion posted through the scheduler (a handler
      // hop per call). Beast's read takes over when they are used up mid-message.
      boost::system::error_code pe = put_buffered(*parser_, buffer_, true);
      if (pe == http::error::need_buffer) pe = {};  // the caller's buffer is full
      got = size - parser_->target_left();
      if (pe) {
        ec = pe;
        co_return false;
      }
      // Body bytes, or the message's end: done. Otherwise (a partial chunk header buffered, say) the
      // read below brings the rest.
      if (got > 0 || parser_->is_done()) break;
    }
    const auto gap = gap_deadline.value_or(SteadyClock::now() + deadlines_.idle_gap);
    if (deadlines_.total < gap) down_.deadline(deadlines_.total, Phase::total);
    else down_.deadline(gap, Phase::stream_gap);
    down_.watch_now();  // waiting for the engine (a stream): watch the client (no-op once started)
    auto [e, n] = co_await http::async_read_some(lease_.socket(), buffer_, *parser_, use_tuple);
    if (e == http::error::need_buffer) e = {};
    got = size - parser_->target_left();
    if (e) {
      ec = e;
      co_return false;
    }
  }
  co_return true;
}

void UpstreamExchange::done() {
  if (parser_ && parser_->is_done() && parser_->keep_alive() && buffer_.size() == 0) lease_.reusable();
  if (slot_.is_connected()) slot_.clear();
  lease_ = {};
}

}  // namespace sluice
