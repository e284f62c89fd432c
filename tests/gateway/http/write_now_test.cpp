#include "gateway/http/write_now.h"

#include <sys/socket.h>

#include <string>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <gtest/gtest.h>

namespace sluice {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// A connected loopback pair.
struct Pair {
  asio::io_context io{1};
  tcp::socket a{io}, b{io};
  Pair() {
    tcp::acceptor acc(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    a.connect(acc.local_endpoint());
    acc.accept(b);
  }
};

TEST(WriteNow, SmallWriteCompletesInlineInOrder) {
  Pair p;
  std::string head = "HTTP/1.1 200 OK\r\n\r\n", body = "hello";
  std::tuple<boost::system::error_code, size_t> r{asio::error::fault, 0};
  bool ran = false;
  asio::co_spawn(p.io, [&]() -> asio::awaitable<void> {
    r = co_await write_now(p.a, std::array<asio::const_buffer, 3>{asio::buffer(head), asio::const_buffer{}, asio::buffer(body)});
    ran = true;
  }, asio::detached);
  // The whole write happened inside the first handler: no further scheduler round needed.
  p.io.run_one();
  EXPECT_TRUE(ran);
  EXPECT_FALSE(std::get<0>(r));
  EXPECT_EQ(std::get<1>(r), head.size() + body.size());
  std::string got(head.size() + body.size(), '\0');
  asio::read(p.b, asio::buffer(got));
  EXPECT_EQ(got, head + body);
}

TEST(WriteNow, WriteLargerThanTheSocketBufferFinishesAsynchronously) {
  Pair p;
  const int small = 4096;
  ::setsockopt(p.a.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  std::string big(1 << 20, '\0');  // far more than the 8 KB send buffer: the rest goes async
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  std::tuple<boost::system::error_code, size_t> r{asio::error::fault, 0};
  asio::co_spawn(p.io, [&]() -> asio::awaitable<void> {
    r = co_await write_now(p.a, std::array<asio::const_buffer, 2>{asio::buffer(big.data(), 10), asio::buffer(big.data() + 10, big.size() - 10)});
  }, asio::detached);
  std::string got(big.size(), '\0');
  asio::async_read(p.b, asio::buffer(got), [](boost::system::error_code, size_t) {});
  p.io.run();
  EXPECT_FALSE(std::get<0>(r));
  EXPECT_EQ(std::get<1>(r), big.size());
  EXPECT_EQ(got, big);
}

TEST(WriteNow, PeerGoneIsAnErrorNotASignal) {
  Pair p;
  p.b.close();
  std::string data(1 << 16, 'x');
  boost::system::error_code last;
  asio::co_spawn(p.io, [&]() -> asio::awaitable<void> {
    // The first write may be accepted before the RST arrives; a later one fails with EPIPE /
    // ECONNRESET (SIGPIPE is not raised: the process would die here).
    for (int i = 0; i < 50 && !last; ++i) {
      auto [ec, n] = co_await write_now(p.a, std::array<asio::const_buffer, 1>{asio::buffer(data)});
      last = ec;
    }
  }, asio::detached);
  p.io.run();
  EXPECT_TRUE(last == asio::error::broken_pipe || last == asio::error::connection_reset) << last.message();
}

TEST(WriteNow, ClosedSocketIsAnError) {
  Pair p;
  p.a.close();
  std::tuple<boost::system::error_code, size_t> r{};
  asio::co_spawn(p.io, [&]() -> asio::awaitable<void> {
    r = co_await write_now(p.a, std::array<asio::const_buffer, 1>{asio::buffer("x", 1)});
  }, asio::detached);
  p.io.run();
  EXPECT_TRUE(std::get<0>(r));
  EXPECT_EQ(std::get<1>(r), 0u);
}

}  // namespace
}  // namespace sluice
