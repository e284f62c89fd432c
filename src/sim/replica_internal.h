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

  // One generated sequence; n > 1 (or best_of) makes several, engine ids first_id, first_id + 1, ...
  struct Choice {
    std::vector<engine::TokenId> pending;  // generated, not yet written
    std::optional<engine::FinishReason> finished;
    int64_t output_tokens = 0;
    bool finish_sent = false;  // streaming: its finish_reason went out
    std::string text;          // non-streaming: the whole output
  };
  Choice& choice(engine::RequestId id) { return choices[id - first_id]; }

  asio::steady_timer wake;  // a condition variable: cancelled when there is something to do
  engine::RequestId first_id = 0;
  std::vector<Choice> choices = std::vector<Choice>(1);
  int64_t prompt_tokens = 0, cached_tokens = 0;
  bool client_gone = false;
  bool done = false;  // the response is over: the disconnect watcher must not touch the socket
};

struct Replica::Connection {
  explicit Connection(tcp::socket s) : sock(std::move(s)) {}
  tcp::socket sock;
  beast::flat_buffer buf;
};

}  // namespace sluice::sim
