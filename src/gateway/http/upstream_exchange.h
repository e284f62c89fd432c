// One HTTP/1.1 exchange with a model server over a leased connection (upstream_pool.h): send the
// request head and body, read the *final* response head, then the body in pieces as it arrives.
//
//   send():  write head + body; read response heads under the first-byte deadline. Interim 1xx
//            responses (100 Continue, 103 Early Hints; at most kMaxInterim) are read and dropped:
//            only the final response is relayed, so a keep-alive client's responses stay in step.
//            101 (an upgrade the gateway never asked for) is an upstream error.
//   read():  the next body bytes (any amount) under the idle-gap deadline, capped by the total one.
//   done():  the connection goes back to the pool only when the message ended cleanly, the server
//            allows keep-alive and nothing extra was buffered; otherwise it is closed.
//
// Cancellation: while the exchange lives, the downstream's cancellation slot holds a handler that
// closes the upstream socket, so a client that leaves (or a deadline that passes) ends every
// pending upstream read or write at once and the engine sees the abort (it frees the KV blocks).
#pragma once
#include <optional>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "core/time.h"
#include "gateway/http/downstream.h"
#include "gateway/http/upstream_pool.h"
#include "gateway/http/upstream_response.h"

namespace sluice {

struct ExchangeDeadlines {
  Duration first_byte;                  // request sent -> final response head
  Duration idle_gap;                    // between body reads
  SteadyClock::time_point total;        // the request's end
};

class UpstreamExchange {
 public:
  static constexpr int kMaxInterim = 8;

  UpstreamExchange(UpstreamLease lease, Downstream& down, const ExchangeDeadlines& deadlines);
  ~UpstreamExchange();
  UpstreamExchange(const UpstreamExchange&) = delete;
  UpstreamExchange& operator=(const UpstreamExchange&) = delete;

  // Writes the request and reads the final response head. An error: nothing usable arrived.
  // start: the exchange's start (the first-byte deadline counts from it), when the caller has read the clock.
  boost::asio::awaitable<boost::system::error_code> send(std::string_view head, std::string_view body,
                                                        SteadyClock::time_point start = SteadyClock::now());
  const UpstreamResponse& response() const { return *parser_; }
  int status() const { return parser_->status(); }
  std::optional<uint64_t> content_length() const {
    auto n = parser_->content_length();
    return n ? std::optional<uint64_t>(*n) : std::nullopt;
  }
  bool body_done() const { return parser_->is_done(); }
  // The next body bytes into [data, data + size): false with `ec` on failure. `gap` replaces the
  // idle-gap deadline for this read (the stream relay passes the time since its last event).
  boost::asio::awaitable<bool> read(char* data, size_t size, size_t& got, boost::system::error_code& ec,
                                    std::optional<SteadyClock::time_point> gap_deadline = std::nullopt);
  // The message ended: return the connection to the pool when it may be reused, else close it.
  void done();
  // A kept-alive connection that the server had closed before answering (retry on a fresh one).
  bool reused() const { return lease_.reused(); }
  bool nothing_received() const { return buffer_.size() == 0 && !head_read_; }
  // When send() had written the whole request (the engine's socket took its last byte).
  SteadyClock::time_point sent_at() const { return sent_at_; }

 private:
  UpstreamLease lease_;
  Downstream& down_;
  ExchangeDeadlines deadlines_;
  boost::asio::cancellation_slot slot_;
  boost::beast::flat_buffer buffer_;
  std::optional<UpstreamResponse> parser_;
  bool head_read_ = false;
  SteadyClock::time_point sent_at_{};
};

}  // namespace sluice
