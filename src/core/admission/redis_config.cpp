#include "core/admission/redis_config.h"

#include <charconv>

#include "core/config_yaml.h"

namespace sluice {

using namespace config_yaml;

// redis://HOST:PORT[/0] or unix:///absolute/path. Hand-parsed: the project's URL parser
// (core/url.h) is for http(s) URLs, and these two shapes are all a gateway needs.
void parse_redis_url(const std::string& url, const std::string& key, RedisSpec& out) {
  constexpr std::string_view kTcp = "redis://", kUnix = "unix://";
  std::string_view u = url;
  if (u.substr(0, kUnix.size()) == kUnix) {
    out.unix_path = std::string(u.substr(kUnix.size()));
    if (out.unix_path.empty() || out.unix_path[0] != '/') fail(key, "expected unix:///absolute/path");
    return;
  }
  if (u.substr(0, kTcp.size()) != kTcp) fail(key, "expected redis://HOST:PORT or unix:///path");
  u.remove_prefix(kTcp.size());
  if (auto slash = u.find('/'); slash != std::string_view::npos) {
    if (u.substr(slash) != "/" && u.substr(slash) != "/0") fail(key, "only database 0 is supported");
    u = u.substr(0, slash);
  }
  if (u.find('@') != std::string_view::npos) fail(key, "credentials in the URL are not supported");
  const auto colon = u.rfind(':');
  std::string_view host = colon == std::string_view::npos ? u : u.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty()) fail(key, "missing host");
  out.host = std::string(host);
  if (colon != std::string_view::npos) {
    const std::string_view p = u.substr(colon + 1);
    unsigned v = 0;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), v);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || v == 0 || v > 65535)
      fail(key, "expected a port in 1..65535");
    out.port = static_cast<uint16_t>(v);
  }
}

namespace {

double get_fraction(const YAML::Node& n, const std::string& path) {
  const double v = get<double>(n, path, "a number");
  if (!(v >= 0.0 && v <= 1.0)) fail(path, "expected a number in [0, 1]");
  return v;
}

}  // namespace

RedisSpec parse_redis_yaml(const YAML::Node& node) {
  if (!node.IsMap()) fail("redis", "expected a mapping");
  check_keys(node, "redis", {"url", "on_error", "timeout_ms", "key_prefix", "replica_window_ms", "lease"});
  RedisSpec s;
  if (const auto& l = node["lease"]; l && l.IsMap())  // its keys first: `validate` names a misspelt one
    check_keys(l, "redis.lease", {"share", "max_slice", "idle_return_ms", "sync_interval_ms", "refresh_ms"});
  if (!node["url"]) fail("redis.url", "is required");
  s.url = get<std::string>(node["url"], "redis.url", "a string");
  parse_redis_url(s.url, "redis.url", s);
  if (node["on_error"]) {
    const auto v = get<std::string>(node["on_error"], "redis.on_error", "open or closed");
    if (v != "open" && v != "closed") fail("redis.on_error", "expected open or closed");
    s.fail_open = v == "open";
  }
  if (node["timeout_ms"]) s.timeout = get_ms(node["timeout_ms"], "redis.timeout_ms");
  if (node["key_prefix"]) s.key_prefix = get<std::string>(node["key_prefix"], "redis.key_prefix", "a string");
  if (node["replica_window_ms"]) s.replica_window = get_ms(node["replica_window_ms"], "redis.replica_window_ms");
  if (const auto& l = node["lease"]) {
    check_keys(l, "redis.lease", {"share", "max_slice", "idle_return_ms", "sync_interval_ms", "refresh_ms"});
    if (l["share"]) s.lease.share = get_fraction(l["share"], "redis.lease.share");
    if (l["max_slice"]) s.lease.max_slice = get_fraction(l["max_slice"], "redis.lease.max_slice");
    if (l["idle_return_ms"]) s.lease.idle_return = get_ms(l["idle_return_ms"], "redis.lease.idle_return_ms");
    if (l["sync_interval_ms"]) s.lease.sync_interval = get_ms(l["sync_interval_ms"], "redis.lease.sync_interval_ms");
    if (l["refresh_ms"]) s.lease.refresh = get_ms(l["refresh_ms"], "redis.lease.refresh_ms");
  }
  return s;
}

}  // namespace sluice
