// The per-worker upstream pool (gateway/http/upstream_pool.h): take_idle hands back a warm
// connection without a coroutine; acquire connects when there is none.
#include "gateway/http/upstream_pool.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

#include "core/metrics/histogram.h"
#include "gateway/generation.h"

namespace sluice {
namespace {

struct Fixture {
  asio::io_context io{1};
  tcp::acceptor acceptor{io, tcp::endpoint(asio::ip::address_v4::loopback(), 0)};
  BucketBounds bounds{0.001};
  Histogram pick{&bounds};
  std::unique_ptr<PoolRuntime> runtime;
  UpstreamPool pool{io.get_executor(), 1};
  std::vector<tcp::socket> accepted;
  Fixture() {
    PoolConfig pc;
    pc.name = "p";
    pc.policy = "round_robin";
    EndpointConfig e;
    e.name = "e0";
    e.address = Address{"127.0.0.1", acceptor.local_endpoint().port()};
    pc.endpoints.push_back(e);
    runtime = std::make_unique<PoolRuntime>(pc, 1, 1, PoolSeries{&pick});
    accept();
  }
  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      accepted.push_back(std::move(s));
      accept();
    });
  }
  AcquireResult acquire() {
    AcquireResult r;
    bool done = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      r = co_await pool.acquire(*runtime, 0, SteadyClock::now() + std::chrono::seconds(2));
      done = true;
    }, asio::detached);
    const auto give_up = SteadyClock::now() + std::chrono::seconds(5);
    while (!done && SteadyClock::now() < give_up) io.run_one_for(std::chrono::milliseconds(100));
    return r;
  }
};

TEST(UpstreamPool, TakeIdleGivesBackTheConnectionLastReturnedReusable) {
  Fixture f;
  EXPECT_FALSE(f.pool.take_idle(*f.runtime, 0).has_value());  // nothing idle yet: acquire connects
  AcquireResult first = f.acquire();
  ASSERT_FALSE(first.error) << first.error.message();
  ASSERT_TRUE(first.lease);
  EXPECT_FALSE(first.lease.reused());
  const auto local = first.lease.socket().local_endpoint();
  first.lease.reusable();
  first.lease.release();  // back to the idle list
  EXPECT_TRUE(f.pool.has_idle(*f.runtime, 0));
  auto again = f.pool.take_idle(*f.runtime, 0);  // a plain call: no io_context run
  ASSERT_TRUE(again.has_value());
  ASSERT_TRUE(again->lease);
  EXPECT_TRUE(again->lease.reused());
  EXPECT_EQ(again->lease.socket().local_endpoint(), local);
  EXPECT_FALSE(f.pool.take_idle(*f.runtime, 0).has_value());  // it was the only one
}

TEST(UpstreamPool, AConnectionNotMarkedReusableIsClosedNotKept) {
  Fixture f;
  AcquireResult first = f.acquire();
  ASSERT_TRUE(first.lease);
  first.lease.release();  // not reusable: the response was not read cleanly
  EXPECT_FALSE(f.pool.has_idle(*f.runtime, 0));
  EXPECT_FALSE(f.pool.take_idle(*f.runtime, 0).has_value());
}

}  // namespace
}  // namespace sluice
