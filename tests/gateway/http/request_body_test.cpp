#include "gateway/http/request_body.h"

#include <gtest/gtest.h>

#include <boost/beast/http/parser.hpp>
#include <cstring>
#include <string>

namespace sluice {
namespace {

namespace http = boost::beast::http;

// Feeds `wire` to a RequestBody parser in pieces of `piece` bytes, as reads from a socket would
// (bytes the parser did not take yet stay pending, as in the session's flat_buffer).
BodyBytes read_body(const std::string& wire, size_t piece, std::string* padding = nullptr) {
  http::request_parser<RequestBody> parser;
  parser.eager(true);
  boost::beast::error_code ec;
  std::string pending;
  for (size_t at = 0; at < wire.size() && !parser.is_done();) {
    const size_t n = std::min(piece, wire.size() - at);
    pending.append(wire, at, n);
    at += n;
    const size_t used = parser.put(boost::asio::buffer(pending), ec);
    if (ec == http::error::need_more) ec = {};
    EXPECT_FALSE(ec) << ec.message();
    pending.erase(0, used);
  }
  EXPECT_TRUE(parser.is_done());
  const BodyBytes& b = parser.get().body();
  if (padding) {
    *padding = b.capacity() >= b.size() + kBodyPadding ? "padded" : "short";
    if (*padding == "padded")
      for (size_t i = 0; i < kBodyPadding; ++i)
        if (b.data()[b.size() + i] != '\0') *padding = "not zeroed";
  }
  return std::move(parser.get().body());  // the buffer itself: its padding goes with it
}

// As the session reads a Content-Length body: the header (and `head_extra` body bytes that came
// with it) through a buffer, then the rest straight into the body string, grown at most `ahead`
// bytes past what was put (zero-filled), in reads of at most `piece` bytes.
BodyBytes read_in_place(const std::string& wire, size_t head_extra, size_t ahead, size_t piece, std::string* padding) {
  http::request_parser<RequestBody> parser;
  parser.eager(true);
  boost::beast::error_code ec;
  const size_t head = wire.find("\r\n\r\n") + 4;
  const size_t first = std::min(wire.size(), head + head_extra);
  size_t at = parser.put(boost::asio::buffer(wire.data(), first), ec);
  if (ec == http::error::need_more) ec = {};
  EXPECT_FALSE(ec) << ec.message();
  while (at < first && !parser.is_done()) {  // the body bytes that came with the header
    at += parser.put(boost::asio::buffer(wire.data() + at, first - at), ec);
    EXPECT_FALSE(ec) << ec.message();
  }
  const uint64_t length = parser.content_length().value_or(0);
  BodyBytes& body = parser.get().body();
  while (!parser.is_done()) {
    const size_t filled = static_cast<size_t>(length - parser.content_length_remaining().value_or(0));
    body.reserve(length + kBodyPadding);  // as the session does
    if (body.size() <= filled) body.resize_for_overwrite(std::min<size_t>(filled + ahead, length));
    const size_t n = std::min({piece, body.size() - filled, wire.size() - at});
    std::memcpy(body.data() + filled, wire.data() + at, n);  // the socket's read
    at += n;
    const char* before = body.data();
    parser.put(boost::asio::const_buffer(body.data() + filled, n), ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_EQ(body.data(), before);  // taken in place: the string was not reallocated
  }
  if (padding) {
    *padding = body.capacity() >= body.size() + kBodyPadding ? "padded" : "short";
    if (*padding == "padded")
      for (size_t i = 0; i < kBodyPadding; ++i)
        if (body.data()[body.size() + i] != '\0') *padding = "not zeroed";
  }
  return std::move(body);
}

std::string request_with(const std::string& body) {
  return "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

TEST(RequestBody, ContentLengthBodiesArriveWholeWithZeroedPaddingPastTheEnd) {
  std::string body = R"({"model":"m","messages":[{"role":"user","content":")";
  body += std::string(200000, 'x') + R"("}]})";
  for (size_t piece : {size_t{7}, size_t{4096}, size_t{1} << 20}) {
    std::string padded;
    EXPECT_EQ(read_body(request_with(body), piece, &padded).view(), body) << piece;
    EXPECT_EQ(padded, "padded") << piece;
  }
}

TEST(RequestBody, BytesReadStraightIntoTheBodyAreTakenInPlace) {
  std::string body = R"({"model":"m","messages":[{"role":"user","content":")";
  for (int i = 0; i < 30000; ++i) body += static_cast<char>('a' + i % 26);
  body += R"("}]})";
  // Reads smaller than the growth (the string is longer than the bytes put until the end), equal
  // to it, larger than it; with and without body bytes arriving with the header.
  for (size_t head_extra : {size_t{0}, size_t{100}})
    for (auto [ahead, piece] : {std::pair<size_t, size_t>{4096, 1000}, {4096, 4096}, {1000, 4096}, {1 << 20, 7777}}) {
      std::string padded;
      EXPECT_EQ(read_in_place(request_with(body), head_extra, ahead, piece, &padded).view(), body) << ahead << " " << piece;
      EXPECT_EQ(padded, "padded") << ahead << " " << piece;
    }
}

TEST(RequestBody, BodyBytesKeepTheirContentsAsTheyGrow) {
  BodyBytes b;
  EXPECT_EQ(b.size(), 0u);
  b.append("abc", 3);
  b.reserve(1000);  // keeps the bytes
  EXPECT_EQ(b.view(), "abc");
  EXPECT_GE(b.capacity(), 1000u);
  b.resize_for_overwrite(6);
  std::memcpy(b.data() + 3, "def", 3);
  for (int i = 0; i < 2000; ++i) b.append("x", 1);  // grows past the reserve
  EXPECT_EQ(b.size(), 2006u);
  EXPECT_EQ(b.view().substr(0, 7), "abcdefx");
  BodyBytes copy = b;
  EXPECT_EQ(copy.view(), b.view());
  b.resize_for_overwrite(2);  // cuts
  EXPECT_EQ(b.view(), "ab");
  copy = b;
  EXPECT_EQ(copy.view(), "ab");
  BodyBytes moved = std::move(copy);
  EXPECT_EQ(moved.view(), "ab");
}

TEST(RequestBody, ChunkedBodiesArriveWhole) {
  const std::string wire =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n3\r\n12}\r\n0\r\n\r\n";
  EXPECT_EQ(read_body(wire, 3).view(), "{\"a\":12}");
}

TEST(RequestBody, AParseInPlaceGivesWhatACopiedParseGives) {
  std::string padded;
  const std::string body = R"({"model":"m","max_tokens":7,"messages":[{"role":"system","content":"be brief"},)"
                           R"({"role":"user","content":"hello \u00e9"}]})";
  const BodyBytes got = read_body(request_with(body), 16, &padded);
  ASSERT_EQ(padded, "padded");
  const ParseResult in_place = parse_request(ApiKind::chat, got, {}, true);
  const ParseResult copied = parse_request(ApiKind::chat, body);
  ASSERT_TRUE(in_place.ok());
  ASSERT_TRUE(copied.ok());
  EXPECT_EQ(in_place.request->model, copied.request->model);
  EXPECT_EQ(in_place.request->rendered, copied.request->rendered);
  EXPECT_EQ(in_place.request->max_output_tokens, copied.request->max_output_tokens);
  EXPECT_EQ(in_place.request->max_output_tokens, 7);
  // Bad JSON is refused the same way in place.
  const std::string bad = R"({"model":"m","messages":[)";
  const BodyBytes bad_got = read_body(request_with(bad), 5, &padded);
  EXPECT_FALSE(parse_request(ApiKind::chat, bad_got, {}, true).ok());
}

}  // namespace
}  // namespace sluice
