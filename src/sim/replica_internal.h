// Private pieces shared by replica.cpp and replica_session.cpp.
#pragma once
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "sim/replica.h"

namespace sluice::sim {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct Replica::Stream {
  explicit Stream(const asio::any_io_executor& ex) : wake(ex) { rearm(); }
  void rearm() { wake.expires_at(asio::steady_timer::time_point::max()); }
  void notify() { wake.cancel(); }

  asio::steady_timer wake;  // a condition variable: cancelled when there is something to do
  std::vector<engine::TokenId> pending;  // generated, not yet written
  std::optional<engine::FinishReason> finished;
  int64_t prompt_tokens = 0, cached_tokens = 0, output_tokens = 0;
  bool client_gone = false;
  bool done = false;  // the response is over: the disconnect watcher must not touch the socket
};

struct Replica::Connection {
  explicit Connection(tcp::socket s) : sock(std::move(s)) {}
  tcp::socket sock;
  beast::flat_buffer buf;
};

}  // namespace sluice::sim
