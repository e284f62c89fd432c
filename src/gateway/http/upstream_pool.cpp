#include "gateway/http/upstream_pool.h"

#include <sys/socket.h>

#include <algorithm>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <spdlog/spdlog.h>

#include "gateway/generation.h"

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

UpstreamPool::UpstreamPool(asio::any_io_executor executor, int workers)
    : executor_(std::move(executor)), workers_(std::max(1, workers)) {}

Slot& UpstreamPool::slot_for(const PoolRuntime& pool, size_t endpoint) {
  auto [it, created] = slots_.try_emplace(pool.id);
  auto& row = it->second;
  if (created) {
    const PoolConfig& pc = pool.config();
    for (const auto& ep : pc.endpoints) {
      auto s = std::make_unique<Slot>();
      s->name = ep.name;
      s->address = ep.address;  // resolved on first connect
      s->max_open = std::max(1, (pc.upstream.max_connections_per_endpoint + workers_ - 1) / workers_);
      s->max_idle = (pc.upstream.max_idle_per_endpoint + workers_ - 1) / workers_;
      s->idle_timeout = pc.upstream.idle_timeout;
      s->closing = closing_;
      row.push_back(std::move(s));
    }
  }
  return *row.at(endpoint);
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

std::optional<AcquireResult> UpstreamPool::take_idle(const PoolRuntime& pool, size_t endpoint, SteadyClock::time_point now) {
  Slot& slot = slot_for(pool, endpoint);
  while (!slot.idle.empty()) {
    auto idle = std::move(slot.idle.back());
    slot.idle.pop_back();
    // A connection idle for a moment is checked with a non-blocking peek (one syscall); one
    // returned just now is taken as is: if the server closed it anyway, the request is retried
    // once on a fresh connection before any byte reached the client (proxy.cpp).
    const auto idle_for = now - idle.since;
    if (idle_for < slot.idle_timeout && (idle_for < kPeekAfter || still_open(*idle.socket))) {
      AcquireResult r;
      r.lease.slot_ = &slot;
      r.lease.socket_ = std::move(idle.socket);
      r.lease.reused_ = true;
      return r;
    }
    boost::system::error_code ignored;
    idle.socket->close(ignored);
    --slot.open;
  }
  return std::nullopt;
}

asio::awaitable<AcquireResult> UpstreamPool::acquire(const PoolRuntime& pool, size_t endpoint,
                                                     SteadyClock::time_point deadline) {
  Slot& slot = slot_for(pool, endpoint);
  for (;;) {
    if (auto idle = take_idle(pool, endpoint)) co_return std::move(*idle);
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

void UpstreamPool::sweep(SteadyClock::time_point now, const std::vector<uint64_t>& live) {
  for (auto it = slots_.begin(); it != slots_.end();) {
    bool unused = true;
    const bool retired = std::find(live.begin(), live.end(), it->first) == live.end();
    for (auto& s : it->second) {
      if (retired) s->closing = true;
      while (!s->idle.empty() && (retired || now - s->idle.front().since >= s->idle_timeout)) {
        boost::system::error_code ignored;
        s->idle.front().socket->close(ignored);
        s->idle.pop_front();
        --s->open;
        s->wake_one();
      }
      unused = unused && s->open == 0 && s->waiters.empty();
    }
    // Nothing open or waiting: drop the row (a retired pool's, or an idle one's: remade on use).
    it = unused ? slots_.erase(it) : std::next(it);
  }
}

void UpstreamPool::close_idle() {
  closing_ = true;
  for (auto& [id, row] : slots_)
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

}  // namespace sluice
