// The per-worker upstream pool (gateway/http/upstream_pool.h): take_idle hands back a warm
// connection without a coroutine; acquire connects when there is none.
#include "gateway/http/upstream_pool.h"

#include <vector>

#include <gtest/gtest.h>

#include "loopback_pool.h"

namespace sluice {
namespace {

// The pool's endpoint accepts every connection (kept, so they stay open).
struct Fixture : testing::LoopbackPool {
  std::vector<tcp::socket> accepted;
  Fixture() { accept(); }
  void accept() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (ec) return;
      accepted.push_back(std::move(s));
      accept();
    });
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
