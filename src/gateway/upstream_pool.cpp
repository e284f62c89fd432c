#include "gateway/upstream_pool.h"

#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

namespace sluice {

using namespace asio::experimental::awaitable_operators;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

UpstreamLease& UpstreamLease::operator=(UpstreamLease&& o) noexcept {
  if (this != &o) {
    release();
    slot_ = std::exchange(o.slot_, nullptr);
    socket_ = std::move(o.socket_);
    reused_ = o.reused_;
    reusable_ = o.reusable_;
  }
  return *this;
}

void UpstreamLease::release() {
  if (!slot_) return;
  Slot& slot = *slot_;
  slot_ = nullptr;
  if (reusable_ && socket_ && socket_->is_open() && !slot.closing && static_cast<int>(slot.idle.size()) < slot.max_idle) {
    slot.idle.push_back({std::move(socket_), SteadyClock::now()});
  } else {
    if (socket_) {
      boost::system::error_code ignored;
      socket_->close(ignored);
      socket_.reset();
    }
    --slot.open;
  }
  reusable_ = false;
  slot.wake_one();
}

void Slot::wake_one() {
  if (!waiters.empty()) waiters.front()->cancel();
}

UpstreamPool::UpstreamPool(asio::any_io_executor executor, const Config& config, int workers)
    : executor_(std::move(executor)) {
  workers = std::max(1, workers);
  tcp::resolver resolver(executor_);
  for (const auto& pool : config.pools) {
    auto& row = slots_.emplace_back();
    for (const auto& ep : pool.endpoints) {
      auto s = std::make_unique<Slot>();
      s->name = ep.name;
      s->address = ep.address;
      s->max_open = std::max(1, (pool.upstream.max_connections_per_endpoint + workers - 1) / workers);
      s->max_idle = (pool.upstream.max_idle_per_endpoint + workers - 1) / workers;
      s->idle_timeout = pool.upstream.idle_timeout;
      boost::system::error_code ec;
      auto results = resolver.resolve(ep.address.host, std::to_string(ep.address.port), ec);
      if (ec) spdlog::warn("endpoint {}: cannot resolve {} yet: {}", ep.name, ep.address.host, ec.message());
      for (const auto& r : results) s->resolved.push_back(r.endpoint());
      row.push_back(std::move(s));
    }
  }
}

namespace {
constexpr auto kPeekAfter = std::chrono::milliseconds(200);

// True when an idle connection is still usable: no EOF, no unexpected bytes waiting.
bool still_open(tcp::socket& s) {
  char byte;
  ssize_t n = ::recv(s.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}
}  // namespace

asio::awaitable<AcquireResult> UpstreamPool::acquire(size_t pool, size_t endpoint, SteadyClock::time_point deadline) {
  Slot& slot = *slots_.at(pool).at(endpoint);
  for (;;) {
    while (!slot.idle.empty()) {
      auto idle = std::move(slot.idle.back());
      slot.idle.pop_back();
      // A connection idle for a moment is checked with a non-blocking peek (one syscall); one
      // returned just now is taken as is: if the server closed it anyway, the request is retried
      // once on a fresh connection before any byte reached the client (proxy.cpp).
      const auto idle_for = SteadyClock::now() - idle.since;
      if (idle_for < slot.idle_timeout && (idle_for < kPeekAfter || still_open(*idle.socket))) {
        AcquireResult r;
        r.lease.slot_ = &slot;
        r.lease.socket_ = std::move(idle.socket);
        r.lease.reused_ = true;
        co_return r;
      }
      boost::system::error_code ignored;
      idle.socket->close(ignored);
      --slot.open;
    }
    if (slot.open < slot.max_open) co_return co_await connect(slot, deadline);
    // At the limit: park until a lease comes back (the timer is cancelled) or the deadline passes.
    asio::steady_timer timer(executor_, deadline);
    auto it = slot.waiters.insert(slot.waiters.end(), &timer);
    auto [ec] = co_await timer.async_wait(use_tuple);
    slot.waiters.erase(it);
    if (!ec) co_return AcquireResult{asio::error::timed_out, {}};
  }
}

asio::awaitable<AcquireResult> UpstreamPool::connect(Slot& slot, SteadyClock::time_point deadline) {
  AcquireResult r;
  ++slot.open;  // counted now so concurrent acquirers respect the limit while this one connects
  r.lease.slot_ = &slot;
  r.lease.socket_ = std::make_unique<tcp::socket>(executor_);
  if (slot.resolved.empty()) {
    tcp::resolver resolver(executor_);
    auto [ec, results] = co_await resolver.async_resolve(slot.address.host, std::to_string(slot.address.port), use_tuple);
    if (ec) {
      r.error = ec;
      r.lease = {};
      co_return r;
    }
    for (const auto& e : results) slot.resolved.push_back(e.endpoint());
  }
  asio::steady_timer timer(executor_, deadline);
  auto result = co_await (asio::async_connect(*r.lease.socket_, slot.resolved, use_tuple) || timer.async_wait(use_tuple));
  if (result.index() == 1) {
    r.error = asio::error::timed_out;
  } else {
    r.error = std::get<0>(std::get<0>(result));
  }
  if (r.error) {
    r.lease = {};  // closes and un-counts
    co_return r;
  }
  boost::system::error_code ignored;
  r.lease.socket_->set_option(tcp::no_delay(true), ignored);
  co_return r;
}

void UpstreamPool::sweep(SteadyClock::time_point now) {
  for (auto& row : slots_)
    for (auto& s : row)
      while (!s->idle.empty() && now - s->idle.front().since >= s->idle_timeout) {
        boost::system::error_code ignored;
        s->idle.front().socket->close(ignored);
        s->idle.pop_front();
        --s->open;
        s->wake_one();
      }
}

void UpstreamPool::close_idle() {
  for (auto& row : slots_)
    for (auto& s : row) {
      s->closing = true;
      for (auto& i : s->idle) {
        boost::system::error_code ignored;
        i.socket->close(ignored);
        --s->open;
      }
      s->idle.clear();
    }
}

size_t UpstreamPool::idle_count(size_t pool, size_t endpoint) const { return slots_.at(pool).at(endpoint)->idle.size(); }

}  // namespace sluice
