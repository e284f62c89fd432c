// What a request may do with the client connection it arrived on, and nothing more (Pingora's
// downstream session): write bytes, ask whether the client is gone, be told when it goes (a
// cancellation signal), and set the request's deadline. The connection (session.h) implements
// it; the request's life (proxy.cpp) and its upstream exchange (upstream_exchange.h) use only this.
//
// Cancellation: the connection emits `cancel_slot()` (terminal) when the client leaves (its
// disconnect watch reads EOF) or when the deadline set with `deadline()` passes. Whatever
// operation the request is waiting on has the slot bound (a queue wait, an upstream read or
// write) and is cancelled at once; the request then asks gone() / expired() which it was.
#pragma once
#include <chrono>
#include <optional>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include "core/time.h"
#include "gateway/http/watchdog.h"

namespace sluice {

using SteadyClock = std::chrono::steady_clock;

class Downstream {
 public:
  virtual ~Downstream() = default;
  // A write's deadline that moves with it: the client must take some bytes every `stall`
  // (Phase::client_write), and the write ends by `until` (Phase::total) whatever it does.
  struct Progress {
    SteadyClock::duration stall;
    SteadyClock::time_point until;
  };
  // Writes a, b and c to the client under the deadline set with deadline(); false when the client is
  // gone (it is then marked gone). With `progress`, a write the kernel could not take at once is cut
  // only when the client took no byte over a whole window: each time the client-write deadline
  // passes with bytes acknowledged since the last look, it moves to min(now + stall, until), so a
  // large answer to a slow client that keeps reading is not cut at the first stall window (one
  // that stops is cut between stall and twice stall after its last byte).
  virtual boost::asio::awaitable<bool> write(std::string_view a, std::string_view b = {}, std::string_view c = {},
                                             std::optional<Progress> progress = std::nullopt) = 0;
  virtual bool gone() const = 0;
  // Emitted when the client leaves or the deadline passes. One handler at a time (Asio's rule).
  virtual boost::asio::cancellation_slot cancel_slot() = 0;
  // The request's current deadline and the phase it stands for (replaces the previous one).
  virtual void deadline(SteadyClock::time_point at, Phase phase) = 0;
  virtual void clear_deadline() = 0;
  // The phase whose deadline passed (Phase::none if none did).
  virtual Phase expired() const = 0;
  // Runs `work` while watching the client for a disconnect; returns when `work` does.
  // WatchFrom::sent: the watch starts when `work` calls watch_now(): when it is about to wait for
  // the engine (its answer not there when first looked for, a stream's next bytes, a retry's pause)
  // or for an upstream connection. On the fast path (a pooled connection, the request written at
  // once) the watch's first read, which finds nothing, and the half-close check then cost the
  // request no latency: they run while the engine works; an answer already there when first looked
  // for is relayed with no watch at all (nothing waits). A client that left before is noticed then
  // (the first read finds the EOF), or by a failed write.
  enum class WatchFrom { now, sent };
  virtual boost::asio::awaitable<void> watching(boost::asio::awaitable<void> work, WatchFrom from = WatchFrom::now) = 0;
  // A watch deferred by WatchFrom::sent starts now (no-op otherwise).
  virtual void watch_now() = 0;
};

}  // namespace sluice
