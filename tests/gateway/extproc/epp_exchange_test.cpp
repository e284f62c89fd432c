// EppExchange against a real Gateway (no sockets: endpoints are never contacted; the decision
// runs on an io_context): the routed answer, the alias rewrite, the subset hint, refusals, and
// the response side's accounting through the one completion path.
#include "gateway/extproc/epp_exchange.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include "core/prom_text.h"
#include "gateway/gateway.h"

namespace sluice {
namespace {

const char* kConfig = R"(
ext_proc: {listen: 127.0.0.1:0, destinations: 2}
pools:
  - name: chat
    endpoints: [127.0.0.1:18001, 127.0.0.1:18002, 127.0.0.1:18003]
    health: {enabled: false}
models:
  - {name: base-model, pool: chat}
  - {name: short, alias_of: base-model}
)";

struct EppExchangeTest : ::testing::Test {
  std::shared_ptr<const Config> cfg = parse_config(kConfig);
  Gateway gw{cfg, GatewayOptions{"off", 1}};
  boost::asio::io_context io;

  std::shared_ptr<EppExchange> exchange(const std::string& path, const std::string& body) {
    auto ex = std::make_shared<EppExchange>(gw, *cfg->ext_proc);
    ex->set_request_headers({{":method", "POST"}, {":path", path}, {"content-type", "application/json"}});
    EXPECT_TRUE(ex->append_request_body(body));
    return ex;
  }
  EppAnswer decide(EppExchange& ex) {
    std::optional<EppAnswer> got;
    if (auto now = ex.decide(io.get_executor(), [&](EppAnswer a) { got = std::move(a); })) {
      got = std::move(*now);
    } else {
      io.run();
      io.restart();
    }
    EXPECT_TRUE(got);
    return got ? *got : EppAnswer{};
  }
  double requests(std::string_view outcome) {
    double total = 0;
    const std::string text = gw.registry().render();
    for (const auto& s : parse_prom_text(text).samples)
      if (s.name == "sluice_requests_total" && s.label("outcome") && *s.label("outcome") == outcome) total += s.value;
    return total;
  }
  static std::string header(const EppHeaders& h, std::string_view k) {
    for (const auto& [key, v] : h)
      if (key == k) return v;
    return {};
  }
};

TEST_F(EppExchangeTest, RoutesWithAliasRewriteAndFallbackList) {
  const std::string body = R"({"model":"short","stream":true,"messages":[{"role":"user","content":"hi"}]})";
  auto ex = exchange("/v1/chat/completions", body);
  auto a = decide(*ex);
  ASSERT_FALSE(a.immediate);
  EXPECT_EQ(std::count(a.destination.begin(), a.destination.end(), ','), 1);  // destinations: 2
  EXPECT_EQ(header(a.set_headers, "x-gateway-destination-endpoint"), a.destination);
  ASSERT_TRUE(a.body_replacement);
  EXPECT_NE(a.body_replacement->find(R"("model":"base-model")"), std::string::npos);
  EXPECT_EQ(header(a.set_headers, "content-length"), std::to_string(a.body_replacement->size()));

  auto rh = ex->on_response_headers({{":status", "200"}, {"content-type", "text/event-stream"}}, false);
  EXPECT_NE(std::find(rh.remove_headers.begin(), rh.remove_headers.end(), "content-length"), rh.remove_headers.end());
  std::string out;
  // One event split across two chunks: nothing passes until it is whole, then renamed back.
  ex->on_response_body(R"(data: {"model":"base-model","choices":[{"delta":{"content":"a"}}]})", false, out);
  EXPECT_EQ(out, "");
  ex->on_response_body("\n\ndata: [DONE]\n\n", true, out);
  EXPECT_NE(out.find(R"("model":"short")"), std::string::npos);
  EXPECT_NE(out.find("data: [DONE]"), std::string::npos);
  EXPECT_TRUE(ex->finished());
  EXPECT_EQ(requests("ok"), 1);
}

TEST_F(EppExchangeTest, SubsetHintAndRefusals) {
  auto ex = exchange("/v1/chat/completions", R"({"model":"base-model","messages":[{"role":"user","content":"x"}]})");
  ex->set_subset({"127.0.0.1:18002"});
  auto a = decide(*ex);
  EXPECT_EQ(a.destination, "127.0.0.1:18002");
  EXPECT_FALSE(a.body_replacement);  // nothing to rewrite: the original body goes on

  auto none = exchange("/v1/chat/completions", R"({"model":"base-model","messages":[{"role":"user","content":"x"}]})");
  none->set_subset({"10.1.1.1:80"});
  auto b = decide(*none);
  EXPECT_TRUE(b.immediate);
  EXPECT_EQ(b.status, 503);
  EXPECT_EQ(header(b.reply_headers, "x-llm-d-request-dropped-reason"), "rejected-no-endpoints");

  auto bad = exchange("/v1/chat/completions", "{not json");
  EXPECT_EQ(decide(*bad).status, 400);
  auto path = exchange("/v1/models", "{}");
  EXPECT_EQ(decide(*path).status, 404);
  EXPECT_EQ(requests("rejected"), 3);
}

TEST_F(EppExchangeTest, StreamEndingMidResponseIsCancelledOnce) {
  auto ex = exchange("/v1/completions", R"({"model":"base-model","prompt":"p","stream":true})");
  ASSERT_FALSE(decide(*ex).immediate);
  ex->on_response_headers({{":status", "200"}, {"content-type", "text/event-stream"}}, false);
  std::string out;
  ex->on_response_body("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", false, out);
  EXPECT_EQ(out, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n");  // no rewrite: passed as it came
  ex->cancel();
  ex->stream_ended();
  ex->stream_ended();
  EXPECT_TRUE(ex->finished());
  EXPECT_EQ(requests("client_cancelled"), 1);
  ex.reset();  // the destructor does not complete it twice
  EXPECT_EQ(requests("client_cancelled"), 1);
}

TEST_F(EppExchangeTest, BodyOverTheLimitIsRefused) {
  auto ex = std::make_shared<EppExchange>(gw, *cfg->ext_proc);
  ex->set_request_headers({{":path", "/v1/completions"}});
  EXPECT_FALSE(ex->append_request_body(std::string(cfg->limits.max_body_bytes + 1, 'x')));
  EXPECT_EQ(ex->answer_too_large().status, 413);
}

}  // namespace
}  // namespace sluice
