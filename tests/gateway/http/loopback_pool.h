// A one-endpoint upstream pool whose endpoint is a loopback acceptor of the test's own: for the tests
// of the upstream pool and the upstream exchange (real sockets, one io_context run by the test).
#pragma once
#include <chrono>
#include <memory>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include "core/metrics/histogram.h"
#include "gateway/generation.h"
#include "gateway/http/upstream_pool.h"

namespace sluice::testing {

struct LoopbackPool {
  asio::io_context io{1};
  tcp::acceptor acceptor{io, tcp::endpoint(asio::ip::address_v4::loopback(), 0)};
  BucketBounds bounds{0.001};
  Histogram pick{&bounds}, ttft_estimate{&bounds};
  std::unique_ptr<PoolRuntime> runtime;
  UpstreamPool pool{io.get_executor(), 1};

  LoopbackPool() {
    PoolConfig pc;
    pc.name = "p";
    pc.policy = "round_robin";
    EndpointConfig e;
    e.name = "e0";
    e.address = Address{"127.0.0.1", acceptor.local_endpoint().port()};
    pc.endpoints.push_back(e);
    runtime = std::make_unique<PoolRuntime>(pc, 1, 1, PoolSeries{&pick, &ttft_estimate});
  }
  // Runs the io_context until `done` (at most 5 s).
  void run_until(const bool& done) {
    const auto give_up = SteadyClock::now() + std::chrono::seconds(5);
    while (!done && SteadyClock::now() < give_up) {
      if (io.stopped()) io.restart();  // it stops whenever it runs out of work
      io.run_one_for(std::chrono::milliseconds(100));
    }
  }
  // pool.acquire, run to its end.
  AcquireResult acquire() {
    AcquireResult r;
    bool done = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      r = co_await pool.acquire(*runtime, 0, SteadyClock::now() + std::chrono::seconds(2));
      done = true;
    }, asio::detached);
    run_until(done);
    return r;
  }
};

}  // namespace sluice::testing
