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

// The callers' pattern: the attempt, then the rest awaited only when the kernel did not take it all.
template <size_t N>
asio::awaitable<std::tuple<boost::system::error_code, size_t>> write_all(tcp::socket& s, std::array<asio::const_buffer, N> bufs) {
  const WriteNow w = write_now(s, bufs);
  if (w.complete()) co_return w.result();
  co_return co_await write_rest(s, bufs, w);
}

TEST(WriteNow, SmallWriteCompletesWithoutAwaiting) {
  Pair p;
  std::string head = "HTTP/1.1 200 OK\r\n\r\n", body = "hello";
  // A plain call: no coroutine, no scheduler round.
  const WriteNow w = write_now(p.a, std::array<asio::const_buffer, 3>{asio::buffer(head), asio::const_buffer{}, asio::buffer(body)});
  EXPECT_TRUE(w.complete());
  EXPECT_FALSE(w.ec);
  EXPECT_EQ(w.done, head.size() + body.size());
  EXPECT_EQ(w.total, w.done);
  std::string got(head.size() + body.size(), '\0');
  asio::read(p.b, asio::buffer(got));
  EXPECT_EQ(got, head + body);
  EXPECT_TRUE(write_now(p.a, std::array<asio::const_buffer, 1>{asio::const_buffer{}}).complete());  // nothing to send
}

TEST(WriteNow, WriteLargerThanTheSocketBufferFinishesAsynchronously) {
  Pair p;
  const int small = 4096;
  ::setsockopt(p.a.native_handle(), SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  std::string big(1 << 20, '\0');  // far more than the 8 KB send buffer: the rest goes async
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  const std::array<asio::const_buffer, 2> bufs{asio::buffer(big.data(), 10), asio::buffer(big.data() + 10, big.size() - 10)};
  const WriteNow w = write_now(p.a, bufs);
  ASSERT_FALSE(w.complete());
  EXPECT_FALSE(w.ec);
  EXPECT_LT(w.done, big.size());
  std::tuple<boost::system::error_code, size_t> r{asio::error::fault, 0};
  asio::co_spawn(p.io, [&]() -> asio::awaitable<void> { r = co_await write_rest(p.a, bufs, w); }, asio::detached);
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
      auto [ec, n] = co_await write_all(p.a, std::array<asio::const_buffer, 1>{asio::buffer(data)});
      last = ec;
    }
  }, asio::detached);
  p.io.run();
  EXPECT_TRUE(last == asio::error::broken_pipe || last == asio::error::connection_reset) << last.message();
}

TEST(WriteNow, ClosedSocketIsAnError) {
  Pair p;
  p.a.close();
  const WriteNow w = write_now(p.a, std::array<asio::const_buffer, 1>{asio::buffer("x", 1)});
  EXPECT_TRUE(w.complete());
  EXPECT_TRUE(w.ec);
  EXPECT_EQ(w.done, 0u);
}

}  // namespace
}  // namespace sluice
