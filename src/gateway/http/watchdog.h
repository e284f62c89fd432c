// One deadline per client connection, in the style of Asio's C++20 timeout examples: the request
// code moves a deadline (a plain store, no timer operation unless it moves earlier than the armed
// timer) and names the phase it is in; a watchdog coroutine sleeps until the deadline and, when it
// passes, records the expired phase and calls the connection's expiry action (which cancels or
// closes the socket the phase is waiting on). The waiting code sees operation_aborted / a closed
// socket and asks `expired()` whether it was a timeout.
#pragma once
#include <chrono>
#include <functional>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

namespace sluice {

enum class Phase {
  none,
  idle,          // keep-alive: waiting for the next request (limits.idle_timeout)
  header,        // reading request headers (limits.header_timeout) -> 408
  body,          // reading the request body (limits.header_timeout)  -> 408
  connect,       // (upstream connect has its own deadline in UpstreamPool)
  first_byte,    // request sent, waiting for the response head (timeouts.first_byte) -> 504
  stream_gap,    // waiting for the next response bytes (timeouts.idle_ms)
  total,         // the whole request (timeouts.total_ms)
  client_write,  // the client is not reading what we send (timeouts.idle_ms)
};

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Watchdog(boost::asio::any_io_executor ex) : timer_(ex) {}

  void arm_at(Clock::time_point deadline, Phase phase) {
    deadline_ = deadline;
    phase_ = phase;
    expired_ = Phase::none;
    if (deadline < armed_) timer_.cancel();  // wake the watchdog to re-arm earlier
  }
  void arm(std::chrono::nanoseconds d, Phase phase) { arm_at(Clock::now() + d, phase); }
  // Arms min(now + d, cap), naming `cap_phase` when the cap binds.
  void arm_capped(std::chrono::nanoseconds d, Phase phase, Clock::time_point cap, Phase cap_phase) {
    auto t = Clock::now() + d;
    if (cap < t) arm_at(cap, cap_phase);
    else arm_at(t, phase);
  }
  void disarm() { deadline_ = Clock::time_point::max(); phase_ = Phase::none; }
  Phase expired() const { return expired_; }
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }

  boost::asio::awaitable<void> run(std::function<void(Phase)> on_expire);

 private:
  boost::asio::steady_timer timer_;
  Clock::time_point deadline_ = Clock::time_point::max();
  Clock::time_point armed_ = Clock::time_point::max();
  Phase phase_ = Phase::none;
  Phase expired_ = Phase::none;
  bool stopped_ = false;
};

}  // namespace sluice
