#include "core/url.h"

#include <gtest/gtest.h>

#include "core/config.h"

namespace sluice {
namespace {

HttpUrl ok(std::string_view s) {
  std::string error;
  auto u = parse_http_url(s, error);
  EXPECT_TRUE(u) << s << ": " << error;
  return u.value_or(HttpUrl{});
}

std::string refused(std::string_view s) {
  std::string error;
  EXPECT_FALSE(parse_http_url(s, error)) << s;
  EXPECT_FALSE(error.empty()) << s;
  return error;
}

TEST(HttpUrl, HostPortAndTarget) {
  auto u = ok("http://127.0.0.1:9400/metrics");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, 9400);
  EXPECT_EQ(u.target, "/metrics");
  u = ok("http://dcgm.local");
  EXPECT_EQ(u.host, "dcgm.local");
  EXPECT_EQ(u.port, 80);
  EXPECT_EQ(u.target, "");  // no path: the caller's default
  u = ok("http://h:8080/a/b?x=1&y=%20");
  EXPECT_EQ(u.target, "/a/b?x=1&y=%20");
  EXPECT_EQ(ok("http://h?q").target, "/?q");
  EXPECT_EQ(ok("HTTP://Host:1/").host, "Host");  // the scheme is case-insensitive
  EXPECT_EQ(ok("http://h:65535/").port, 65535);
}

TEST(HttpUrl, Ipv6LiteralLosesItsBrackets) {
  auto u = ok("http://[::1]:8000/metrics");
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.port, 8000);
  EXPECT_EQ(u.target, "/metrics");
  EXPECT_EQ(ok("http://[2001:db8::7]/").host, "2001:db8::7");
}

TEST(HttpUrl, BadInputsAreRefusedWithAReason) {
  EXPECT_NE(refused("127.0.0.1:9400/metrics").find("not an absolute URL"), std::string::npos);
  EXPECT_NE(refused("/metrics").find("not an absolute URL"), std::string::npos);
  EXPECT_NE(refused("https://h/metrics").find("unsupported scheme"), std::string::npos);
  EXPECT_NE(refused("ftp://h/").find("unsupported scheme"), std::string::npos);
  EXPECT_NE(refused("http://h:70000/").find("port must be"), std::string::npos);
  EXPECT_NE(refused("http://h:0/").find("port must be"), std::string::npos);
  EXPECT_NE(refused("http://h:99999999999999999999/").find("port must be"), std::string::npos);
  refused("http://h:8a/");
  refused("http://:80/");
  refused("http:///metrics");
  refused("http://u:p@h/");
  refused("http://h/#frag");
  refused("http://[::1/");
  refused("http://h h/");
  refused("");
}

TEST(HostPort, NamesIpv4AndIpv6) {
  std::string error;
  auto a = parse_host_port("localhost:8080", error);
  ASSERT_TRUE(a) << error;
  EXPECT_EQ(a->host, "localhost");
  EXPECT_EQ(a->port, 8080);
  auto b = parse_host_port("[::1]:0", error);
  ASSERT_TRUE(b) << error;
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 0);
  EXPECT_EQ(format_host_port(b->host, 9), "[::1]:9");
  EXPECT_EQ(format_host_port("10.0.0.1", 9), "10.0.0.1:9");
  for (const char* bad : {"localhost", ":80", "h:", "h:65536", "h:-1", "h:8a", "u@h:80", "http://h:80", "[::1]", ""})
    EXPECT_FALSE(parse_host_port(bad, error)) << bad;
}

TEST(HostPort, ConfigAddressesAndDutyCycleUrlAreValidatedAtLoad) {
  const auto cfg = parse_config(
      "pools: [{name: p, endpoints: ['[::1]:8001', {address: '127.0.0.1:8002', duty_cycle_url: 'http://[::1]:9400'}]}]\n"
      "models: [{name: m, pool: p}]\n");
  EXPECT_EQ(cfg->pools[0].endpoints[0].address.host, "::1");
  EXPECT_EQ(cfg->pools[0].endpoints[0].name, "[::1]:8001");
  try {
    parse_config(
        "pools: [{name: p, endpoints: [{address: '127.0.0.1:8002', duty_cycle_url: 'https://dcgm:9400'}]}]\n"
        "models: [{name: m, pool: p}]\n");
    ADD_FAILURE() << "https duty_cycle_url accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pools[0].endpoints[0].duty_cycle_url: unsupported scheme"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sluice
