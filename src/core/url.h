// The one URL parser of the tree, over Boost.URL (RFC 3986): absolute http URLs (a DCGM
// exporter's duty_cycle_url, the load generator's --url and --metrics-url) and host:port
// authorities (config addresses). Hosts come back ready for a resolver: an IPv6 literal without
// its brackets, a registered name percent-decoded.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

struct HttpUrl {
  std::string host;
  uint16_t port = 80;
  // Path and query as they go on the request line ("/metrics?x=1"); empty when the URL has
  // neither, so each caller picks its default ("/", "/metrics").
  std::string target;
};

// `http://host[:port][/path][?query]`. Refused, with a reason in `error`: no scheme or a relative
// reference, any scheme but http (https included: nothing here speaks TLS), userinfo, a fragment,
// an empty host, a port outside 1..65535.
std::optional<HttpUrl> parse_http_url(std::string_view url, std::string& error);

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// `host:port`, `1.2.3.4:port` or `[v6]:port`; the port is required and 0..65535 (0: let the OS
// choose, for listen addresses). Refused: no port, a non-numeric port, userinfo, an empty host.
std::optional<HostPort> parse_host_port(std::string_view s, std::string& error);

// host:port as it would be written back: IPv6 literals in brackets.
std::string format_host_port(std::string_view host, uint16_t port);

}  // namespace sluice
