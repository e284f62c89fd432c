#include "core/url.h"

#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <charconv>
// Boost.URL is used header-only: its implementation is compiled into this one translation unit.
#include <boost/url/src.hpp>

namespace sluice {

namespace urls = boost::urls;

namespace {

// The decimal port of an authority: 0..65535, digits only (Boost.URL's grammar takes any number
// of digits and does not range-check).
std::optional<uint16_t> parse_port(std::string_view p) {
  unsigned v = 0;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
  if (p.empty() || ec != std::errc() || end != p.data() + p.size() || v > 65535) return std::nullopt;
  return uint16_t(v);
}

// Host for a resolver: IPv6 without brackets, names decoded.
template <class View>
std::string resolver_host(const View& v) {
  return v.host_type() == urls::host_type::ipv6 ? std::string(v.encoded_host_address()) : v.host_address();
}

}  // namespace

std::optional<HttpUrl> parse_http_url(std::string_view url, std::string& error) {
  const auto r = urls::parse_uri(url);
  if (!r) {
    error = "not an absolute URL ('" + std::string(url) + "'; expected http://host[:port][/path])";
    return std::nullopt;
  }
  const urls::url_view& u = *r;
  if (u.scheme_id() != urls::scheme::http) {
    error = "unsupported scheme '" + std::string(u.scheme()) + "' in '" + std::string(url) +
            "' (expected http://host[:port][/path]; https is not supported)";
    return std::nullopt;
  }
  if (!u.has_authority() || u.encoded_host().empty()) {
    error = "no host in '" + std::string(url) + "'";
    return std::nullopt;
  }
  if (u.has_userinfo()) {
    error = "user information is not supported in '" + std::string(url) + "'";
    return std::nullopt;
  }
  if (u.has_fragment()) {
    error = "a fragment is not allowed in '" + std::string(url) + "'";
    return std::nullopt;
  }
  // RFC 3986 wants the path after an authority to be empty or to start with '/'; Boost.URL 1.81
  // reads "http://h:8a" as port 8 and path "a", so check it here.
  if (!u.encoded_path().empty() && u.encoded_path().front() != '/') {
    error = "malformed port or path in '" + std::string(url) + "'";
    return std::nullopt;
  }
  HttpUrl out;
  out.host = resolver_host(u);
  if (u.has_port()) {
    const auto p = parse_port(u.port());
    if (!p || *p == 0) {
      error = "port must be 1..65535 in '" + std::string(url) + "'";
      return std::nullopt;
    }
    out.port = *p;
  }
  out.target = std::string(u.encoded_path());
  if (u.has_query()) {
    if (out.target.empty()) out.target = "/";
    out.target += '?';
    out.target += u.encoded_query();
  }
  return out;
}

std::optional<HostPort> parse_host_port(std::string_view s, std::string& error) {
  const auto r = urls::parse_authority(s);
  if (!r || r->has_userinfo() || r->encoded_host().empty() || !r->has_port()) {
    error = "expected host:port, got '" + std::string(s) + "'";
    return std::nullopt;
  }
  const auto p = parse_port(r->port());
  if (!p) {
    error = "port must be 0..65535, got '" + std::string(s) + "'";
    return std::nullopt;
  }
  return HostPort{resolver_host(*r), *p};
}

std::string format_host_port(std::string_view host, uint16_t port) {
  if (host.find(':') != std::string_view::npos) return "[" + std::string(host) + "]:" + std::to_string(port);
  return std::string(host) + ":" + std::to_string(port);
}

}  // namespace sluice
