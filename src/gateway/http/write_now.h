// write_now: write a few buffers to a TCP socket, in the common case without a trip through the
// io_context's scheduler.
//
// asio::async_write on a socket with room in its send buffer already writes speculatively inside
// the initiating call, but its completion is still posted: one more handler hop (the scheduler's
// queue, its lock and a zero-timeout epoll_wait) per write, two per proxied request (the request to
// the engine, the answer to the client). write_now sends with one sendmsg(MSG_DONTWAIT | MSG_NOSIGNAL)
// on the socket's descriptor (the socket's own blocking mode is not touched); the caller awaits
// write_rest (async_write) only for what the kernel did not take:
//   const WriteNow w = write_now(socket, bufs);
//   auto [ec, n] = w.result();
//   if (!w.complete()) std::tie(ec, n) = co_await write_rest(socket, bufs, w);
// (Not a conditional expression around the co_await: GCC 12 mishandles temporaries there.)
// Asio has no "complete inline if possible" write, hence this small piece by hand.
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

// What one write_now sendmsg did: done of total bytes taken, or an error. complete(): nothing left to
// await (all sent, or failed).
struct WriteNow {
  boost::system::error_code ec;
  size_t done = 0, total = 0;
  bool complete() const { return ec || done == total; }
  std::tuple<boost::system::error_code, size_t> result() const { return {ec, done}; }
};

// The attempt: a plain function, not a coroutine, so the common case (the kernel takes it all)
// allocates no coroutine frame (a frame per call missed Asio's recycling cache of 2 and cost an
// aligned_alloc and a free, ~300 instructions, twice per proxied request: callgrind).
template <class Socket, size_t N>
WriteNow write_now(Socket& socket, const std::array<boost::asio::const_buffer, N>& bufs) {
  std::array<iovec, N> iov{};
  int count = 0;
  WriteNow w;
  for (const auto& b : bufs) {
    if (b.size() == 0) continue;
    iov[count++] = iovec{const_cast<void*>(b.data()), b.size()};
    w.total += b.size();
  }
  if (w.total == 0) return w;
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = static_cast<size_t>(count);
  const ssize_t sent = ::sendmsg(socket.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (sent >= 0) w.done = static_cast<size_t>(sent);
  else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    w.ec = boost::system::error_code(errno, boost::system::system_category());
  return w;
}

// The rest of an incomplete write_now, awaited: {error, bytes written in all}.
template <class Socket, size_t N>
boost::asio::awaitable<std::tuple<boost::system::error_code, size_t>> write_rest(
    Socket& socket, std::array<boost::asio::const_buffer, N> bufs, WriteNow w) {
  boost::beast::buffers_suffix<std::array<boost::asio::const_buffer, N>> rest(bufs);
  rest.consume(w.done);
  auto [ec, n] = co_await boost::asio::async_write(socket, rest, boost::asio::as_tuple(boost::asio::use_awaitable));
  co_return std::tuple{ec, w.done + n};
}

}  // namespace sluice
