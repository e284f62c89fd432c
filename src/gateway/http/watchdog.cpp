#include "gateway/http/watchdog.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice {

boost::asio::awaitable<void> Watchdog::run(std::function<void(Phase)> on_expire) {
  while (!stopped_) {
    armed_ = deadline_;
    timer_.expires_at(armed_);
    co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (stopped_) break;
    if (deadline_ <= Clock::now() && phase_ != Phase::none) {
      expired_ = phase_;
      deadline_ = Clock::time_point::max();
      phase_ = Phase::none;
      on_expire(expired_);
    }
  }
}

}  // namespace sluice
