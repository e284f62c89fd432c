#include "gateway/http/http_util.h"

#include <gtest/gtest.h>

#include "gateway/observability/access_log.h"

namespace sluice {
namespace {

TEST(HttpUtil, ErrorResponseIsOpenAiShaped) {
  auto out = error_response(api_error(404, "The model `x` does not exist.", "invalid_request_error", "model", "model_not_found"), true);
  const std::string body = R"({"error":{"message":"The model `x` does not exist.","type":"invalid_request_error","param":"model","code":"model_not_found"}})";
  EXPECT_EQ(out.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);
  EXPECT_NE(out.find("Content-Type: application/json\r\n"), std::string::npos);
  EXPECT_NE(out.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
  EXPECT_EQ(out.find("Connection: close"), std::string::npos);
  EXPECT_EQ(out.substr(out.size() - body.size()), body);
}

TEST(HttpUtil, CloseAndExtraHeaders) {
  auto out = simple_response(405, "application/json", "{}", false, {{"Allow", "POST"}});
  EXPECT_NE(out.find("Allow: POST\r\n"), std::string::npos);
  EXPECT_NE(out.find("Connection: close\r\n"), std::string::npos);
}

TEST(HttpUtil, HopByHopHeadersAreCaseInsensitive) {
  EXPECT_TRUE(is_hop_by_hop("Connection"));
  EXPECT_TRUE(is_hop_by_hop("TRANSFER-ENCODING"));
  EXPECT_TRUE(is_hop_by_hop("content-length"));
  EXPECT_TRUE(is_hop_by_hop("X-Request-Id"));
  EXPECT_FALSE(is_hop_by_hop("authorization"));
  EXPECT_FALSE(is_hop_by_hop("content-type"));
}

TEST(HttpUtil, RequestIdsAreUniqueHex) {
  auto a = new_request_id(), b = new_request_id();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(HttpUtil, StreamErrorEventIsVllmShapedWithoutDone) {
  auto ev = stream_error_event(api_error(504, "late", "server_error"));
  EXPECT_EQ(ev, "data: {\"error\":{\"message\":\"late\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n");
}

TEST(AccessLog, LineIsJsonWithEveryField) {
  RequestRecord r;
  r.id = "id\"1";
  r.tenant = "t";
  r.model = "m";
  r.pool = "p";
  r.endpoint = "e";
  r.status = 200;
  r.outcome = Outcome::client_cancelled;
  r.prompt_tokens = 10;
  r.cached_tokens = 4;
  r.predicted_cached_tokens = 8;
  r.ttft = std::chrono::milliseconds(12);
  r.duration = std::chrono::milliseconds(30);
  auto line = access_log_line(r);
  EXPECT_EQ(line.rfind("{\"ts\":\"-\",\"id\":\"id\\\"1\",\"method\":\"-\",\"client\":\"-\",\"tenant\":\"t\",\"priority\":null,"
                       "\"model\":\"m\",\"pool\":\"p\",\"endpoint\":\"e\"", 0), 0u) << line;
  EXPECT_NE(line.find("\"queue_ms\":null"), std::string::npos) << line;
  EXPECT_NE(line.find("\"status\":200"), std::string::npos);
  EXPECT_NE(line.find("\"outcome\":\"client_cancelled\""), std::string::npos);
  EXPECT_NE(line.find("\"prompt_tokens\":10,\"completion_tokens\":null"), std::string::npos);
  EXPECT_NE(line.find("\"cached_tokens\":4,\"predicted_cached_tokens\":8"), std::string::npos) << line;
  EXPECT_NE(line.find("\"ttft_ms\":12.000,\"expected_ttft_ms\":null"), std::string::npos) << line;
  r.expected_ttft_ms = 10.5;  // the picker's, from its pick
  EXPECT_NE(access_log_line(r).find("\"ttft_ms\":12.000,\"expected_ttft_ms\":10.500"), std::string::npos);
  EXPECT_NE(line.find("\"duration_ms\":30.000}"), std::string::npos);
  EXPECT_EQ(line.find("client_retry"), std::string::npos) << line;  // only when the client sent one
  r.client_retry = 2;
  EXPECT_NE(access_log_line(r).find("\"attempts\":0,\"client_retry\":2,"), std::string::npos) << access_log_line(r);
}

TEST(AccessLog, ClientRetryCountIsAPlainNumberOrNothing) {
  EXPECT_EQ(client_retry_of("0"), 0);
  EXPECT_EQ(client_retry_of("2"), 2);
  EXPECT_EQ(client_retry_of("9999"), 9999);
  for (const char* bad : {"", "10000", "-1", "+1", " 1", "1 ", "1.0", "x", "0x1"}) EXPECT_EQ(client_retry_of(bad), -1) << bad;
}

}  // namespace
}  // namespace sluice

namespace sluice {
namespace {
TEST(HttpUtil, HopByHopByFieldAgreesWithByName) {
  using boost::beast::http::field;
  using boost::beast::http::string_to_field;
  for (std::string_view name : {"Connection", "keep-alive", "Proxy-Connection", "Transfer-Encoding", "TE", "Trailer",
                                "Upgrade", "Host", "Content-Length", "Expect", "x-request-id", "Proxy-Authorization",
                                "Proxy-Authenticate", "Content-Type", "Authorization", "x-custom", "Accept"})
    EXPECT_EQ(is_hop_by_hop(string_to_field(name), name), is_hop_by_hop(name)) << name;
}
}  // namespace
}  // namespace sluice
