// The upstream response's parser (gateway/http/upstream_response.h): the head kept in order, look-ups
// by enum and by name, the standard reason when none was sent, and the body copied into the caller's
// buffer piece by piece (need_buffer when it is full), chunked or not.
#include "gateway/http/upstream_response.h"

#include <gtest/gtest.h>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

namespace sluice {
namespace {
namespace http = boost::beast::http;

// Feeds `wire` to the parser, draining the body through a buffer of `chunk` bytes; the body read.
std::string feed(UpstreamResponse& p, std::string_view wire, size_t chunk) {
  std::string body;
  std::string buf(chunk, '\0');
  while (!p.is_done()) {
    p.set_target(buf.data(), buf.size());
    boost::system::error_code ec;
    const size_t used = p.put(boost::asio::buffer(wire.data(), wire.size()), ec);
    body.append(buf.data(), chunk - p.target_left());
    wire.remove_prefix(used);
    if (ec && ec != http::error::need_buffer) {
      ADD_FAILURE() << ec.message();
      break;
    }
    if (used == 0 && p.target_left() == chunk && ec != http::error::need_buffer) {
      ADD_FAILURE() << "no progress";
      break;
    }
  }
  return body;
}

TEST(UpstreamResponse, KeepsTheHeadInOrderAndLooksFieldsUp) {
  UpstreamResponse p;
  p.eager(true);
  const std::string body = feed(p,
                                "HTTP/1.1 429 Slow Down\r\nContent-Type: application/json\r\nX-Engine: a\r\n"
                                "Retry-After-Ms: 250\r\nContent-Length: 11\r\n\r\n{\"e\":\"429\"}",
                                4);
  EXPECT_EQ(p.status(), 429);
  EXPECT_EQ(p.reason(), "Slow Down");
  ASSERT_EQ(p.field_count(), 4u);
  EXPECT_EQ(p.field(1).name_string, "X-Engine");
  EXPECT_EQ(p.field(1).value, "a");
  EXPECT_EQ(p.field(0).name, http::field::content_type);
  EXPECT_EQ(p.value(http::field::content_type), "application/json");
  EXPECT_EQ(p.value("retry-after-ms"), "250");
  EXPECT_EQ(p.value(http::field::retry_after), "");
  EXPECT_EQ(body, "{\"e\":\"429\"}");
  EXPECT_TRUE(p.keep_alive());
}

TEST(UpstreamResponse, ChunkedBodyThroughASmallBufferAndTheStandardReason) {
  UpstreamResponse p;
  p.eager(true);
  const std::string body = feed(p, "HTTP/1.1 200 \r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                                   "5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n", 3);
  EXPECT_EQ(p.status(), 200);
  EXPECT_EQ(p.reason(), "OK");
  EXPECT_EQ(body, "hello, world");
  EXPECT_FALSE(p.keep_alive());
}

TEST(UpstreamResponse, NoBufferYetAsksForOne) {
  UpstreamResponse p;
  boost::system::error_code ec;
  const std::string wire = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi";
  size_t used = p.put(boost::asio::buffer(wire), ec);  // the head
  ASSERT_FALSE(ec);
  ASSERT_TRUE(p.is_header_done());
  used += p.put(boost::asio::buffer(wire.data() + used, wire.size() - used), ec);
  EXPECT_EQ(ec, http::error::need_buffer);
  EXPECT_FALSE(p.is_done());
}

}  // namespace
}  // namespace sluice
