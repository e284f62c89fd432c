// Per-worker pool of upstream (model server) connections, one slot per endpoint of each pool
// runtime (generation.h; keyed by runtime id, so a reload that keeps a pool keeps its warm
// connections, and a new runtime's slots are made on first use; rows left without connections are
// dropped by sweep). Each worker
// thread owns its pool outright (one io_context per thread), so leasing and returning need no lock.
// Limits (config `upstream`): max_connections_per_endpoint and max_idle_per_endpoint are split
// evenly across workers (rounded up); idle connections older than idle_timeout are closed.
//
//   acquire: reuse the most recently returned idle connection (LIFO keeps connections warm); one
//            idle for more than 200 ms first gets a non-blocking peek showing the server has not
//            closed it; else connect, within the
//            deadline; at the open limit, wait (FIFO) for a lease to come back, within the deadline.
//   lease:   RAII; returns the connection to the idle list only if `reusable()` was called (the
//            response was read completely and cleanly), otherwise closes it. A cancelled stream
//            therefore always closes its upstream connection, which makes the engine abort.
#pragma once
#include <chrono>
#include <deque>
#include <list>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <unordered_map>

#include "core/config.h"

namespace sluice {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

class UpstreamPool;
class PoolRuntime;

class UpstreamLease {
 public:
  UpstreamLease() = default;
  UpstreamLease(UpstreamLease&& o) noexcept { *this = std::move(o); }
  UpstreamLease& operator=(UpstreamLease&& o) noexcept;
  ~UpstreamLease() { release(); }

  explicit operator bool() const { return socket_ != nullptr; }
  tcp::socket& socket() { return *socket_; }
  bool reused() const { return reused_; }
  // The response was read completely: the connection may serve another request.
  void reusable() { reusable_ = true; }
  void release();

 private:
  friend class UpstreamPool;
  struct Slot* slot_ = nullptr;
  std::unique_ptr<tcp::socket> socket_;
  bool reused_ = false;
  bool reusable_ = false;
};

struct Slot {
  std::string name;
  Address address;
  std::vector<tcp::endpoint> resolved;
  int open = 0;        // leased + idle
  int max_open = 1;
  int max_idle = 0;
  std::chrono::nanoseconds idle_timeout{};
  struct Idle {
    std::unique_ptr<tcp::socket> socket;
    SteadyClock::time_point since;
  };
  std::deque<Idle> idle;                    // back = most recently returned
  std::list<asio::steady_timer*> waiters;   // acquirers parked at the open limit
  bool closing = false;
  void wake_one();
};

struct AcquireResult {
  boost::system::error_code error;  // timed_out when the deadline passed
  UpstreamLease lease;
};

class UpstreamPool {
 public:
  UpstreamPool(asio::any_io_executor executor, int workers);
  // `endpoint` indexes the pool's endpoints. take_idle first (a plain call: the common case, a warm
  // connection, allocates no coroutine frame), acquire when it gives none:
  //   AcquireResult r;
  //   if (auto idle = pool.take_idle(rt, i)) r = std::move(*idle);
  //   else r = co_await pool.acquire(rt, i, deadline);
  // now: the caller's clock reading, if it has one (the idle time is measured to it).
  std::optional<AcquireResult> take_idle(const PoolRuntime& pool, size_t endpoint, SteadyClock::time_point now = SteadyClock::now());
  // An idle connection if there is one, else a new one (at the open limit: waits for a lease to come
  // back, until `deadline`).
  asio::awaitable<AcquireResult> acquire(const PoolRuntime& pool, size_t endpoint, SteadyClock::time_point deadline);
  // True when acquire would start with an idle connection (it may still find it closed and connect).
  bool has_idle(const PoolRuntime& pool, size_t endpoint) { return !slot_for(pool, endpoint).idle.empty(); }
  // Closes idle connections past their idle timeout (called periodically by the worker), and every
  // idle connection of a runtime not in `live` (retired by a reload: its rows stop keeping
  // connections, so leases still out close when they come back).
  void sweep(SteadyClock::time_point now, const std::vector<uint64_t>& live);
  // Drain: close every idle connection and stop keeping new ones.
  void close_idle();

 private:
  Slot& slot_for(const PoolRuntime& pool, size_t endpoint);
  asio::awaitable<AcquireResult> connect(Slot& slot, SteadyClock::time_point deadline);
  asio::any_io_executor executor_;
  int workers_;
  bool closing_ = false;
  std::unordered_map<uint64_t, std::vector<std::unique_ptr<Slot>>> slots_;  // by PoolRuntime::id
};

}  // namespace sluice
