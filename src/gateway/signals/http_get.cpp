#include "gateway/signals/http_get.h"

#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace sluice {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
}  // namespace

struct HttpGetConnection::Impl {
  std::string host;
  uint16_t port = 0;
  std::string host_header;
  std::string user_agent;
  bool keep_alive = false;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;
};

HttpGetConnection::HttpGetConnection(std::string host, uint16_t port, std::string user_agent, bool keep_alive)
    : impl_(std::make_unique<Impl>()) {
  impl_->host_header = host + ":" + std::to_string(port);
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->user_agent = std::move(user_agent);
  impl_->keep_alive = keep_alive;
}

HttpGetConnection::~HttpGetConnection() = default;

asio::awaitable<HttpGetResult> HttpGetConnection::get(const std::string& target, Duration timeout, size_t body_limit,
                                                      std::string_view accept) {
  Impl& c = *impl_;
  HttpGetResult out;
  auto fail = [&](const char* what, const boost::system::error_code& ec) {
    out.error = std::string(what) + ": " + ec.message();
    c.stream.reset();
  };
  auto ex = co_await asio::this_coro::executor;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  if (!c.stream) {
    // An IP literal needs no resolver (and no resolver thread).
    boost::system::error_code ec;
    const auto ip = asio::ip::make_address(c.host, ec);
    tcp::endpoint target_ep;
    if (!ec) {
      target_ep = tcp::endpoint(ip, c.port);
    } else {
      tcp::resolver resolver(ex);
      auto [rerr, results] = co_await resolver.async_resolve(c.host, std::to_string(c.port), use_tuple);
      if (rerr || results.empty()) {
        out.error = "resolve: " + (rerr ? rerr.message() : std::string("no address"));
        co_return out;
      }
      target_ep = *results.begin();
    }
    c.stream.emplace(ex);
    c.stream->expires_at(deadline);
    auto [cerr] = co_await c.stream->async_connect(target_ep, use_tuple);
    if (cerr) {
      fail("connect", cerr);
      co_return out;
    }
    c.buffer.clear();
  }
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, c.host_header);
  req.set(http::field::user_agent, c.user_agent);
  if (!accept.empty()) req.set(http::field::accept, accept);
  req.keep_alive(c.keep_alive);
  c.stream->expires_at(deadline);
  auto [werr, wn] = co_await http::async_write(*c.stream, req, use_tuple);
  if (werr) {
    fail("write", werr);
    co_return out;
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(body_limit);
  auto [rderr, rn] = co_await http::async_read(*c.stream, c.buffer, parser, use_tuple);
  if (rderr) {
    fail("read", rderr);
    co_return out;
  }
  auto res = parser.release();
  if (!c.keep_alive || !res.keep_alive()) c.stream.reset();
  else c.stream->expires_never();
  out.status = res.result_int();
  out.body = std::move(res.body());
  co_return out;
}

}  // namespace sluice
