#include "gateway/http/request_body.h"

#include <gtest/gtest.h>

#include <boost/beast/http/parser.hpp>
#include <string>

namespace sluice {
namespace {

namespace http = boost::beast::http;

// Feeds `wire` to a RequestBody parser in pieces of `piece` bytes, as reads from a socket would
// (bytes the parser did not take yet stay pending, as in the session's flat_buffer).
std::string read_body(const std::string& wire, size_t piece, std::string* padding = nullptr) {
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
  const std::string& b = parser.get().body();
  if (padding) {
    *padding = b.capacity() >= b.size() + kBodyPadding ? "padded" : "short";
    if (*padding == "padded")
      for (size_t i = 0; i < kBodyPadding; ++i)
        if (b.data()[b.size() + i] != '\0') *padding = "not zeroed";
  }
  return b;
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
    EXPECT_EQ(read_body(request_with(body), piece, &padded), body) << piece;
    EXPECT_EQ(padded, "padded") << piece;
  }
}

TEST(RequestBody, ChunkedBodiesArriveWhole) {
  const std::string wire =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n3\r\n12}\r\n0\r\n\r\n";
  EXPECT_EQ(read_body(wire, 3), "{\"a\":12}");
}

TEST(RequestBody, AParseInPlaceGivesWhatACopiedParseGives) {
  std::string padded;
  const std::string body = R"({"model":"m","max_tokens":7,"messages":[{"role":"system","content":"be brief"},)"
                           R"({"role":"user","content":"hello \u00e9"}]})";
  const std::string got = read_body(request_with(body), 16, &padded);
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
  const std::string bad_got = read_body(request_with(bad), 5, &padded);
  EXPECT_FALSE(parse_request(ApiKind::chat, bad_got, {}, true).ok());
}

}  // namespace
}  // namespace sluice
