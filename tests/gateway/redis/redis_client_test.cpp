// The gateway's Redis client against a real redis-server: pipelining on one connection per
// io_context, a restart (calls fail, then reconnect), a stopped server (the deadline holds).
#include "gateway/redis/redis_client.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "redis_server.h"

namespace sluice {
namespace {

namespace asio = boost::asio;
using testing::RedisServer;

RedisTarget target(const RedisServer& s, Duration timeout = std::chrono::milliseconds(300)) {
  RedisTarget t;
  t.unix_path = s.socket();
  t.timeout = timeout;
  t.backoff = std::chrono::milliseconds(50);
  return t;
}

TEST(RedisClient, PipelinesManyCallsOnOneConnection) {
  RedisServer server;
  ASSERT_TRUE(server.ok());
  RedisClient client(target(server));
  asio::io_context io;
  int ok = 0, done = 0;
  for (int i = 0; i < 200; ++i)
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          const std::vector<std::string> argv = {"INCRBY", "k", std::to_string(i)};
          auto r = co_await client.call(argv);
          if (r.ok() && r.integers && r.values.size() == 1) ++ok;
          if (++done == 200) io.stop();
        },
        asio::detached);
  io.run_for(std::chrono::seconds(5));
  EXPECT_EQ(ok, 200);
  EXPECT_EQ(client.stats().connects.load(), 1u);
  std::vector<int64_t> v;
  redisContext* c = server.connect();
  ASSERT_TRUE(testing::redis_ints(c, {"GET", "k"}, v) == false);  // a string reply
  auto* r = static_cast<redisReply*>(redisCommand(c, "GET k"));
  EXPECT_EQ(std::string(r->str, r->len), std::to_string(199 * 200 / 2));
  freeReplyObject(r);
  redisFree(c);
}

asio::awaitable<RedisReply> one(RedisClient& c, std::vector<std::string> argv) { co_return co_await c.call(argv); }

RedisReply run_one(asio::io_context& io, RedisClient& c, std::vector<std::string> argv) {
  RedisReply out;
  out.status = RedisReply::Status::unavailable;
  asio::co_spawn(io, one(c, std::move(argv)), [&](std::exception_ptr, RedisReply r) {
    out = std::move(r);
    io.stop();
  });
  io.restart();
  io.run_for(std::chrono::seconds(3));
  return out;
}

TEST(RedisClient, SurvivesARestartAndReconnects) {
  RedisServer server;
  ASSERT_TRUE(server.ok());
  RedisClient client(target(server));
  asio::io_context io;
  EXPECT_TRUE(run_one(io, client, {"PING"}).ok());
  ASSERT_TRUE(server.restart());
  // The old connection is gone: calls fail (counted, never thrown) until one reconnects.
  bool back = false;
  for (int i = 0; i < 40 && !back; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    back = run_one(io, client, {"PING"}).ok();
  }
  EXPECT_TRUE(back);
  EXPECT_GE(client.stats().connects.load(), 2u);
}

TEST(RedisClient, AStoppedServerCostsNoMoreThanTheDeadline) {
  RedisServer server;
  ASSERT_TRUE(server.ok());
  RedisClient client(target(server, std::chrono::milliseconds(100)));
  asio::io_context io;
  EXPECT_TRUE(run_one(io, client, {"PING"}).ok());
  ASSERT_EQ(kill(server.pid(), SIGSTOP), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run_one(io, client, {"PING"});
  const auto took = std::chrono::steady_clock::now() - t0;
  kill(server.pid(), SIGCONT);
  EXPECT_EQ(r.status, RedisReply::Status::timeout);
  EXPECT_LT(took, std::chrono::seconds(2));
  EXPECT_EQ(client.stats().failures[static_cast<size_t>(RedisReply::Status::timeout)].load(), 1u);
}

}  // namespace
}  // namespace sluice
