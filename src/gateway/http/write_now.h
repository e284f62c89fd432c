// write_now: write a few buffers to a TCP socket, in the common case without a trip through the
// io_context's scheduler.
//
// asio::async_write on a socket with room in its send buffer already writes speculatively inside
// the initiating call, but its completion is still posted: one more handler hop (the scheduler's
// queue, its lock and a zero-timeout epoll_wait) per write, two per proxied request (the request to
// the engine, the answer to the client). write_now sends with one sendmsg(MSG_DONTWAIT | MSG_NOSIGNAL)
// on the socket's descriptor (the socket's own blocking mode is not touched) and only awaits
// async_write for what the kernel did not take. Asio has no "complete inline if possible" write,
// hence this small piece by hand.
//
// Same contract as async_write with as_tuple: {error, bytes written}; an error from sendmsg other than
// EAGAIN / EINTR is returned as that errno (EPIPE, ECONNRESET, EBADF once the socket was closed).
// One writer at a time per socket, as for async_write.
#pragma once
#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <tuple>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/system/error_code.hpp>

namespace sluice {

template <class Socket, size_t N>
boost::asio::awaitable<std::tuple<boost::system::error_code, size_t>> write_now(
    Socket& socket, std::array<boost::asio::const_buffer, N> bufs) {
  std::array<iovec, N> iov{};
  int count = 0;
  size_t total = 0;
  for (const auto& b : bufs) {
    if (b.size() == 0) continue;
    iov[count++] = iovec{const_cast<void*>(b.data()), b.size()};
    total += b.size();
  }
  if (total == 0) co_return std::tuple{boost::system::error_code{}, size_t{0}};
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = static_cast<size_t>(count);
  ssize_t sent = ::sendmsg(socket.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      co_return std::tuple{boost::system::error_code(errno, boost::system::system_category()), size_t{0}};
    sent = 0;
  }
  const size_t done = static_cast<size_t>(sent);
  if (done == total) co_return std::tuple{boost::system::error_code{}, total};
  boost::beast::buffers_suffix<std::array<boost::asio::const_buffer, N>> rest(bufs);
  rest.consume(done);
  auto [ec, n] = co_await boost::asio::async_write(socket, rest, boost::asio::as_tuple(boost::asio::use_awaitable));
  co_return std::tuple{ec, done + n};
}

}  // namespace sluice
