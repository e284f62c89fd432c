// YAML -> Config. Strict: unknown keys are errors (a typo must not silently fall back to a
// default), every value is range-checked, and every message names the field's path.
#include "core/config.h"

#include "core/admission/admission_config.h"
#include "core/admission/redis_config.h"
#include "core/picker/peer_load_config.h"
#include "core/config_yaml.h"
#include "core/picker/policy_factory.h"
#include "core/tls_config.h"
#include "core/upstream_auth.h"
#include "core/url.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

namespace sluice {

std::string_view to_string(EngineKind k) {
  switch (k) {
    case EngineKind::vllm: return "vllm";
    case EngineKind::sglang: return "sglang";
    case EngineKind::trtllm: return "trtllm";
  }
  return "vllm";
}

const PoolConfig* Config::find_pool(std::string_view name) const {
  for (const auto& p : pools)
    if (p.name == name) return &p;
  return nullptr;
}

const ModelRoute* Config::find_model(std::string_view name) const {
  for (const auto& m : models)
    if (m.name == name) return &m;
  return nullptr;
}

namespace {

using namespace config_yaml;

Address parse_address(const YAML::Node& n, const std::string& path) {
  const auto s = get<std::string>(n, path, "host:port");
  std::string error;
  auto hp = parse_host_port(s, error);
  if (!hp) fail(path, error);
  return Address{std::move(hp->host), hp->port};
}

// An endpoint: `host:port`, or `http://host:port` as engines' docs write it (a trailing "/" is
// allowed; a path, query or any other scheme is refused with a message saying what to write).
Address parse_endpoint_address(const YAML::Node& n, const std::string& path, bool* https = nullptr) {
  const auto s = get<std::string>(n, path, "host:port or http://host:port");
  const auto scheme_end = s.find("://");
  if (scheme_end == std::string::npos) return parse_address(n, path);
  std::string error;
  // https://: TLS to the engine (gateway/tls/); the URL is checked as its http:// twin.
  const bool tls = s.compare(0, 8, "https://") == 0;
  if (https) *https = tls;
  auto url = parse_http_url(tls ? "http://" + s.substr(8) : s, error);
  if (!url) fail(path, error + "; an endpoint is host:port or http://host:port");
  if (!url->target.empty() && url->target != "/")
    fail(path, "'" + s + "' has a path or query; an endpoint is host:port or http://host:port (the engine's "
               "OpenAI routes are /v1/...; a path prefix is not supported)");
  std::string authority = s.substr(scheme_end + 3);
  if (!authority.empty() && authority.back() == '/') authority.pop_back();
  auto hp = parse_host_port(authority, error);
  if (!hp || hp->port == 0) fail(path, "'" + s + "' has no port; an endpoint is http://host:port (the port is required)");
  return Address{std::move(hp->host), hp->port};
}

EngineKind parse_engine(const YAML::Node& n, const std::string& path) {
  auto s = get<std::string>(n, path, "an engine name");
  if (s == "vllm") return EngineKind::vllm;
  if (s == "sglang") return EngineKind::sglang;
  if (s == "trtllm") return EngineKind::trtllm;
  fail(path, "unknown engine '" + s + "' (expected vllm, sglang or trtllm)");
}

EndpointConfig parse_endpoint(const YAML::Node& n, const std::string& path, EngineKind pool_engine,
                              const std::string& pool_authorization, const TlsClientConfig& pool_tls) {
  EndpointConfig e;
  e.engine = pool_engine;
  e.authorization = pool_authorization;
  e.tls = pool_tls;
  if (n.IsScalar()) {
    e.address = parse_endpoint_address(n, path, &e.tls.enabled);
  } else {
    check_keys(n, path, {"address", "name", "engine", "metrics_path", "duty_cycle_url", "duty_cycle_gpus", "upstream_auth",
                         "upstream_tls", "kv_events", "kv_events_replay"});
    if (n["upstream_tls"]) parse_tls_client(n["upstream_tls"], path + ".upstream_tls", e.tls);
    if (n["upstream_auth"]) e.authorization = parse_upstream_auth(n["upstream_auth"], path + ".upstream_auth");
    for (const char* key : {"kv_events", "kv_events_replay"}) {
      if (!n[key]) continue;
      auto v = get<std::string>(n[key], path + "." + key, "tcp://host:port");
      const auto colon = v.rfind(':');
      if (!v.starts_with("tcp://") || colon == std::string::npos || colon < 6 || colon + 1 == v.size())
        fail(path + "." + key, "expected tcp://host:port, got '" + v + "'");
      (std::string_view(key) == "kv_events" ? e.kv_events : e.kv_events_replay) = std::move(v);
    }
    if (!n["address"]) fail(path + ".address", "is required");
    e.address = parse_endpoint_address(n["address"], path + ".address", &e.tls.enabled);
    if (n["upstream_tls"] && !e.tls.enabled) fail(path + ".upstream_tls", "applies to https:// endpoints only");
    if (n["name"]) e.name = get<std::string>(n["name"], path + ".name", "a string");
    if (n["engine"]) e.engine = parse_engine(n["engine"], path + ".engine");
    if (n["metrics_path"]) e.metrics_path = get<std::string>(n["metrics_path"], path + ".metrics_path", "a path");
    if (n["duty_cycle_url"]) {
      e.duty_cycle_url = get<std::string>(n["duty_cycle_url"], path + ".duty_cycle_url", "a URL");
      std::string error;
      if (!parse_http_url(e.duty_cycle_url, error)) fail(path + ".duty_cycle_url", error);
    }
    if (const auto& g = n["duty_cycle_gpus"]) {
      const auto gp = path + ".duty_cycle_gpus";
      if (!g.IsSequence() || g.size() == 0) fail(gp, "expected a list of GPU indices (the exporter's gpu label), e.g. [0, 1]");
      for (size_t i = 0; i < g.size(); ++i) e.duty_cycle_gpus.push_back(get<std::string>(g[i], fmt::format("{}[{}]", gp, i), "a GPU index"));
      if (e.duty_cycle_url.empty()) fail(gp, "needs duty_cycle_url (the DCGM exporter to read them from)");
    }
  }
  if (e.name.empty()) e.name = e.address.str();
  if (e.address.port == 0) fail(path, "endpoint port must not be 0");
  return e;
}

PoolConfig parse_pool(const YAML::Node& n, const std::string& path) {
  check_keys(n, path, {"name", "kind", "policy", "policy_params", "engine", "endpoints", "upstream", "scrape",
                       "max_in_flight_per_endpoint", "saturation", "health", "outlier", "retry", "discovery",
                       "kv_events", "upstream_auth", "upstream_tls", "token_ids"});
  PoolConfig p;
  if (!n["name"]) fail(path + ".name", "is required");
  p.name = get<std::string>(n["name"], path + ".name", "a string");
  if (n["kind"]) {
    auto k = get<std::string>(n["kind"], path + ".kind", "chat or embedding");
    if (k == "chat") p.kind = PoolKind::chat;
    else if (k == "embedding" || k == "embeddings") p.kind = PoolKind::embedding;
    else fail(path + ".kind", "expected chat or embedding, got '" + k + "'");
  }
  if (n["policy"]) p.policy = get<std::string>(n["policy"], path + ".policy", "a policy name");
  {
    auto names = policy_names();
    if (std::find(names.begin(), names.end(), p.policy) == names.end()) {
      std::string known;
      for (const auto& k : names) known += (known.empty() ? "" : ", ") + k;
      fail(path + ".policy", "unknown policy '" + p.policy + "' (known: " + known + ")");
    }
  }
  if (n["policy_params"]) {
    const auto& pp = n["policy_params"];
    if (!pp.IsMap()) fail(path + ".policy_params", "expected a mapping of name: number");
    for (const auto& kv : pp) {
      auto key = kv.first.as<std::string>();
      p.policy_params[key] = get<double>(kv.second, path + ".policy_params." + key, "a number");
    }
  }
  check_policy_params(p, path);  // a misspelt parameter is refused here, by validate as by serve
  if (n["engine"]) p.engine = parse_engine(n["engine"], path + ".engine");
  if (n["discovery"]) p.discovery = parse_discovery_yaml(n["discovery"], path + ".discovery");
  std::string pool_authorization;
  if (n["upstream_auth"]) pool_authorization = parse_upstream_auth(n["upstream_auth"], path + ".upstream_auth");
  p.upstream_authorization = pool_authorization;
  TlsClientConfig pool_tls;
  if (n["upstream_tls"]) parse_tls_client(n["upstream_tls"], path + ".upstream_tls", pool_tls);
  // Discovered pods are reached at their IP over plain HTTP (the TLS bridges are set up for the
  // listed https:// endpoints only): refused rather than silently sent in the clear.
  if (p.discovery && n["upstream_tls"])
    fail(path + ".upstream_tls", "cannot apply to discovered endpoints (pods are reached over http); list https:// endpoints instead");
  if (p.discovery && n["endpoints"] && !n["endpoints"].IsSequence()) fail(path + ".endpoints", "expected a list");
  if (!p.discovery && (!n["endpoints"] || !n["endpoints"].IsSequence() || n["endpoints"].size() == 0))
    fail(path + ".endpoints", "is required and must list at least one endpoint");
  std::set<std::string> seen;
  for (size_t i = 0; n["endpoints"] && i < n["endpoints"].size(); ++i) {
    auto ep = parse_endpoint(n["endpoints"][i], fmt::format("{}.endpoints[{}]", path, i), p.engine, pool_authorization, pool_tls);
    if (!seen.insert(ep.address.str()).second)
      fail(fmt::format("{}.endpoints[{}]", path, i), "duplicate endpoint " + ep.address.str());
    p.endpoints.push_back(std::move(ep));
  }
  if (const auto& k = n["kv_events"]) {
    const auto kp = path + ".kv_events";
    check_keys(k, kp, {"port", "replay_port", "offset_by_index", "topic", "stale_after_ms", "recent_window_ms",
                       "replay_timeout_ms"});
    if (k["port"]) p.kv_events.port = static_cast<uint16_t>(get_int(k["port"], kp + ".port", 1, 65535));
    if (k["replay_port"])
      p.kv_events.replay_port = static_cast<uint16_t>(get_int(k["replay_port"], kp + ".replay_port", 1, 65535));
    if (k["offset_by_index"]) p.kv_events.offset_by_index = get<bool>(k["offset_by_index"], kp + ".offset_by_index", "true or false");
    if (k["topic"]) p.kv_events.topic = get<std::string>(k["topic"], kp + ".topic", "a string");
    if (k["stale_after_ms"]) p.kv_events.stale_after = get_ms(k["stale_after_ms"], kp + ".stale_after_ms");
    if (k["recent_window_ms"]) p.kv_events.recent_window = get_ms(k["recent_window_ms"], kp + ".recent_window_ms");
    if (k["replay_timeout_ms"]) p.kv_events.replay_timeout = get_ms(k["replay_timeout_ms"], kp + ".replay_timeout_ms");
    const int off = p.kv_events.offset_by_index && !p.endpoints.empty() ? static_cast<int>(p.endpoints.size()) - 1 : 0;
    for (uint16_t port : {p.kv_events.port, p.kv_events.replay_port})
      if (port && port + off > 65535) fail(kp, fmt::format("port {} + endpoint index {} is past 65535", port, off));
  }
  apply_kv_events_defaults(p);
  if (const auto& t = n["token_ids"]) {
    const auto tp = path + ".token_ids";
    check_keys(t, tp, {"source", "timeout_ms", "cache_entries", "cache_tokens"});
    if (t["source"]) {
      const auto src = get<std::string>(t["source"], tp + ".source", "render or estimate");
      if (src == "render") p.token_ids.source = TokenIdsConfig::Source::render;
      else if (src == "estimate") p.token_ids.source = TokenIdsConfig::Source::estimate;
      else fail(tp + ".source", "expected render or estimate, got '" + src + "'");
    }
    if (t["timeout_ms"]) p.token_ids.timeout = get_ms(t["timeout_ms"], tp + ".timeout_ms", 1, 10000);
    if (t["cache_entries"])
      p.token_ids.cache_entries = static_cast<size_t>(get_int(t["cache_entries"], tp + ".cache_entries", 0, 10'000'000));
    if (t["cache_tokens"])
      p.token_ids.cache_tokens = static_cast<size_t>(get_int(t["cache_tokens"], tp + ".cache_tokens", 0, int64_t{1} << 32));
    // The ids only feed the engine-event index: without one, the call would cost TTFT for nothing.
    if (p.token_ids.source == TokenIdsConfig::Source::render) {
      if (!p.kv_events.enabled && p.kv_events.port == 0)
        fail(tp + ".source", "render needs the engines' KV events (pools[].kv_events or endpoints' kv_events): "
                             "the token ids are looked up only in the event index");
      if (p.kind == PoolKind::embedding) fail(tp + ".source", "render is for chat pools (an embedding pool keeps no prefix index)");
      // The render routes are vLLM's (SGLang and TRT-LLM serve none): every call would fail.
      for (size_t i = 0; i < p.endpoints.size(); ++i)
        if (p.endpoints[i].engine != EngineKind::vllm)
          fail(tp + ".source", fmt::format("render needs vLLM engines (its /v1/chat/completions/render route); "
                                           "endpoints[{}] is {}", i, to_string(p.endpoints[i].engine)));
    }
  }
  if (const auto& u = n["upstream"]) {
    const auto up = path + ".upstream";
    check_keys(u, up, {"max_connections_per_endpoint", "max_idle_per_endpoint", "idle_timeout_ms"});
    if (u["max_connections_per_endpoint"])
      p.upstream.max_connections_per_endpoint = get_int(u["max_connections_per_endpoint"], up + ".max_connections_per_endpoint", 1, 100000);
    if (u["max_idle_per_endpoint"])
      p.upstream.max_idle_per_endpoint = get_int(u["max_idle_per_endpoint"], up + ".max_idle_per_endpoint", 0, 100000);
    if (u["idle_timeout_ms"]) p.upstream.idle_timeout = get_ms(u["idle_timeout_ms"], up + ".idle_timeout_ms");
  }
  if (const auto& s = n["scrape"]) {
    const auto sp = path + ".scrape";
    check_keys(s, sp, {"interval_ms", "timeout_ms", "stale_after_ms"});
    if (s["interval_ms"]) p.scrape.interval = get_ms(s["interval_ms"], sp + ".interval_ms", 5, 600000);
    if (s["timeout_ms"]) p.scrape.timeout = get_ms(s["timeout_ms"], sp + ".timeout_ms");
    if (s["stale_after_ms"]) p.scrape.stale_after = get_ms(s["stale_after_ms"], sp + ".stale_after_ms");
  }
  if (const auto& h = n["health"]) {
    const auto hp = path + ".health";
    check_keys(h, hp, {"enabled", "path", "interval_ms", "timeout_ms", "unhealthy_threshold", "healthy_threshold"});
    if (h["enabled"]) p.health.enabled = get<bool>(h["enabled"], hp + ".enabled", "true or false");
    if (h["path"]) p.health.path = get<std::string>(h["path"], hp + ".path", "a path");
    if (p.health.path.empty() || p.health.path[0] != '/') fail(hp + ".path", "must start with '/'");
    if (h["interval_ms"]) p.health.interval = get_ms(h["interval_ms"], hp + ".interval_ms", 10, 600000);
    if (h["timeout_ms"]) p.health.timeout = get_ms(h["timeout_ms"], hp + ".timeout_ms", 1, 600000);
    if (h["unhealthy_threshold"])
      p.health.unhealthy_threshold = static_cast<int>(get_int(h["unhealthy_threshold"], hp + ".unhealthy_threshold", 1, 1000));
    if (h["healthy_threshold"])
      p.health.healthy_threshold = static_cast<int>(get_int(h["healthy_threshold"], hp + ".healthy_threshold", 1, 1000));
  }
  if (const auto& o = n["outlier"]) {
    const auto op = path + ".outlier";
    check_keys(o, op, {"consecutive_failures", "base_ejection_ms", "max_ejection_ms", "max_ejected_fraction"});
    if (o["consecutive_failures"])
      p.outlier.consecutive_failures = static_cast<int>(get_int(o["consecutive_failures"], op + ".consecutive_failures", 1, 100000));
    if (o["base_ejection_ms"]) p.outlier.base_ejection = get_ms(o["base_ejection_ms"], op + ".base_ejection_ms");
    if (o["max_ejection_ms"]) p.outlier.max_ejection = get_ms(o["max_ejection_ms"], op + ".max_ejection_ms");
    if (p.outlier.max_ejection < p.outlier.base_ejection)
      fail(op + ".max_ejection_ms", "must be at least base_ejection_ms");
    if (o["max_ejected_fraction"]) {
      p.outlier.max_ejected_fraction = get<double>(o["max_ejected_fraction"], op + ".max_ejected_fraction", "a number");
      if (!(p.outlier.max_ejected_fraction >= 0 && p.outlier.max_ejected_fraction <= 1))
        fail(op + ".max_ejected_fraction", "must be between 0 and 1");
    }
  }
  if (const auto& r = n["retry"]) {
    const auto rp = path + ".retry";
    check_keys(r, rp, {"max_retries", "budget_ratio", "budget_min_per_second", "max_retry_after_ms"});
    if (r["max_retries"]) p.retry.max_retries = static_cast<int>(get_int(r["max_retries"], rp + ".max_retries", 0, 10));
    if (r["budget_ratio"]) {
      p.retry.budget_ratio = get<double>(r["budget_ratio"], rp + ".budget_ratio", "a number");
      if (!(p.retry.budget_ratio >= 0 && p.retry.budget_ratio <= 1)) fail(rp + ".budget_ratio", "must be between 0 and 1");
    }
    if (r["budget_min_per_second"]) {
      p.retry.budget_min_per_second = get<double>(r["budget_min_per_second"], rp + ".budget_min_per_second", "a number");
      if (!(p.retry.budget_min_per_second >= 0 && p.retry.budget_min_per_second <= 1e6))
        fail(rp + ".budget_min_per_second", "must be between 0 and 1000000");
    }
    if (r["max_retry_after_ms"]) p.retry.max_retry_after = get_ms(r["max_retry_after_ms"], rp + ".max_retry_after_ms", 0, 60000);
  }
  if (const auto& s = n["saturation"]) {
    const auto sp = path + ".saturation";
    check_keys(s, sp, {"max_waiting", "max_kv_usage"});
    if (s["max_waiting"]) p.saturation_max_waiting = static_cast<double>(get_int(s["max_waiting"], sp + ".max_waiting", 1, 1000000));
    if (s["max_kv_usage"]) {
      p.saturation_max_kv_usage = get<double>(s["max_kv_usage"], sp + ".max_kv_usage", "a number");
      if (!(p.saturation_max_kv_usage > 0 && p.saturation_max_kv_usage <= 1))
        fail(sp + ".max_kv_usage", "must be in (0, 1]");
    }
  }
  if (n["max_in_flight_per_endpoint"])
    p.max_in_flight_per_endpoint = get_int(n["max_in_flight_per_endpoint"], path + ".max_in_flight_per_endpoint", 1, 1000000);
  return p;
}

}  // namespace

namespace {
std::shared_ptr<const Config> parse_config_tree(const std::string& yaml_text);
}  // namespace

std::shared_ptr<const Config> parse_config(const std::string& yaml_text) {
  // yaml-cpp throws its own exceptions for shapes the checks above do not anticipate (tags, odd
  // node kinds); they become ConfigErrors too, never an escape (a fuzzer find).
  try {
    return parse_config_tree(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("invalid config at line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
}

namespace {
std::shared_ptr<const Config> parse_config_tree(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(fmt::format("YAML syntax error at line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (!root || root.IsNull()) throw ConfigError("config is empty");
  check_keys(root, "", {"listen", "admin", "tls", "workers", "limits", "timeouts", "drain_timeout_ms",
                        "expose_routing_headers", "pools", "models", "tenants", "admission", "ext_proc",
                        "redis", "peer_load"});
  auto cfg = std::make_shared<Config>();
  if (root["listen"]) cfg->listen = parse_address(root["listen"], "listen");
  if (root["admin"]) cfg->admin = parse_address(root["admin"], "admin");
  if (root["tls"]) cfg->tls = parse_tls_server(root["tls"], "tls");
  if (root["workers"]) cfg->workers = static_cast<int>(get_int(root["workers"], "workers", 1, 256));
  if (const auto& l = root["limits"]) {
    check_keys(l, "limits", {"max_body_bytes", "max_header_bytes", "header_timeout_ms", "idle_timeout_ms", "max_connections",
                              "max_buffered_body_bytes", "max_header_count"});
    if (l["max_body_bytes"]) cfg->limits.max_body_bytes = get_int(l["max_body_bytes"], "limits.max_body_bytes", 1024, 1LL << 32);
    if (l["max_header_bytes"]) cfg->limits.max_header_bytes = get_int(l["max_header_bytes"], "limits.max_header_bytes", 512, 1 << 20);
    if (l["max_header_count"]) cfg->limits.max_header_count = get_int(l["max_header_count"], "limits.max_header_count", 8, 10000);
    if (l["header_timeout_ms"]) cfg->limits.header_timeout = get_ms(l["header_timeout_ms"], "limits.header_timeout_ms");
    if (l["idle_timeout_ms"]) cfg->limits.idle_timeout = get_ms(l["idle_timeout_ms"], "limits.idle_timeout_ms");
    if (l["max_connections"]) cfg->limits.max_connections = get_int(l["max_connections"], "limits.max_connections", 1, 1000000);
    if (l["max_buffered_body_bytes"])
      cfg->limits.max_buffered_body_bytes = get_int(l["max_buffered_body_bytes"], "limits.max_buffered_body_bytes", 1024, 1LL << 40);
  }
  if (const auto& t = root["timeouts"]) {
    check_keys(t, "timeouts", {"connect_ms", "first_byte_ms", "idle_ms", "total_ms"});
    if (t["connect_ms"]) cfg->timeouts.connect = get_ms(t["connect_ms"], "timeouts.connect_ms");
    if (t["first_byte_ms"]) cfg->timeouts.first_byte = get_ms(t["first_byte_ms"], "timeouts.first_byte_ms");
    if (t["idle_ms"]) cfg->timeouts.idle_gap = get_ms(t["idle_ms"], "timeouts.idle_ms");
    if (t["total_ms"]) cfg->timeouts.total = get_ms(t["total_ms"], "timeouts.total_ms");
  }
  if (root["drain_timeout_ms"]) cfg->drain_timeout = get_ms(root["drain_timeout_ms"], "drain_timeout_ms", 0);
  if (root["expose_routing_headers"])
    cfg->expose_routing_headers = get<bool>(root["expose_routing_headers"], "expose_routing_headers", "true or false");

  if (root["ext_proc"]) cfg->ext_proc = parse_ext_proc_yaml(root["ext_proc"], "ext_proc");

  if (!root["pools"] || !root["pools"].IsSequence() || root["pools"].size() == 0)
    fail("pools", "is required and must list at least one pool");
  for (size_t i = 0; i < root["pools"].size(); ++i) {
    auto p = parse_pool(root["pools"][i], fmt::format("pools[{}]", i));
    p.fingerprint = YAML::Dump(root["pools"][i]);
    p.fingerprint += upstream_auth_fingerprint(p.upstream_authorization);
    for (const auto& ep : p.endpoints) p.fingerprint += upstream_auth_fingerprint(ep.authorization);
    if (cfg->find_pool(p.name)) fail(fmt::format("pools[{}].name", i), "duplicate pool name '" + p.name + "'");
    cfg->pools.push_back(std::move(p));
  }

  if (!root["models"] || !root["models"].IsSequence() || root["models"].size() == 0)
    fail("models", "is required and must list at least one model");
  const auto& models = root["models"];
  for (size_t i = 0; i < models.size(); ++i) {
    const auto path = fmt::format("models[{}]", i);
    check_keys(models[i], path, {"name", "pool", "alias_of", "adapter_of"});
    ModelRoute m;
    if (!models[i]["name"]) fail(path + ".name", "is required");
    m.name = get<std::string>(models[i]["name"], path + ".name", "a string");
    if (m.name.empty()) fail(path + ".name", "must not be empty");
    if (cfg->find_model(m.name)) fail(path + ".name", "duplicate model name '" + m.name + "'");
    if (models[i]["alias_of"]) m.target = get<std::string>(models[i]["alias_of"], path + ".alias_of", "a model name");
    if (models[i]["adapter_of"]) m.adapter_of = get<std::string>(models[i]["adapter_of"], path + ".adapter_of", "a model name");
    if (models[i]["pool"]) m.pool = get<std::string>(models[i]["pool"], path + ".pool", "a pool name");
    if (!m.target.empty() && !m.adapter_of.empty()) fail(path, "a model is either an alias or an adapter, not both");
    if (m.target.empty()) m.target = m.name;
    cfg->models.push_back(std::move(m));
  }
  // Second pass: aliases and adapters inherit the pool of what they point at.
  for (size_t i = 0; i < cfg->models.size(); ++i) {
    auto& m = cfg->models[i];
    const auto path = fmt::format("models[{}]", i);
    std::string parent = m.is_alias() ? m.target : m.adapter_of;
    if (!parent.empty()) {
      const ModelRoute* base = cfg->find_model(parent);
      if (!base) fail(path, "points at '" + parent + "', which is not a configured model");
      if (base->is_alias()) fail(path, "points at '" + parent + "', which is itself an alias; point at the target");
      if (m.pool.empty()) m.pool = base->pool;
    }
    if (m.pool.empty()) fail(path + ".pool", "is required");
    if (!cfg->find_pool(m.pool)) fail(path + ".pool", "unknown pool '" + m.pool + "'");
  }
  auto admission = parse_admission_yaml(root);
  if (!admission.ok()) throw ConfigError(admission.error);
  if (admission.spec.enabled) {
    auto registry = TenantRegistry::build(admission.spec.tenants);
    if (!registry.registry) throw ConfigError(registry.error);
    // A tenant's model names are client-facing names of `models:` (a misspelt one would silently
    // allow nothing, or limit nothing).
    const auto& tenants = admission.spec.tenants.tenants;
    for (size_t i = 0; i < tenants.size(); ++i) {
      for (size_t m = 0; m < tenants[i].allowed_models.size(); ++m)
        if (!cfg->find_model(tenants[i].allowed_models[m]))
          fail(fmt::format("tenants[{}].allowed_models[{}]", i, m),
               "unknown model '" + tenants[i].allowed_models[m] + "' (not in models:)");
      for (size_t m = 0; m < tenants[i].model_limits.size(); ++m)
        if (!cfg->find_model(tenants[i].model_limits[m].model))
          fail(fmt::format("tenants[{}].models[{}].model", i, m),
               "unknown model '" + tenants[i].model_limits[m].model + "' (not in models:)");
    }
  }
  if (const auto& r = root["redis"]) {
    // The section's own keys first, so that `validate` names a misspelt one in any config.
    cfg->redis = std::make_shared<const RedisSpec>(parse_redis_yaml(r));
    if (!admission.spec.enabled) fail("redis", "shares token budgets and needs a tenants: section");
  }
  if (const auto& p = root["peer_load"])
    cfg->peer_load = std::make_shared<const PeerLoadSpec>(parse_peer_load_yaml(p, cfg->redis.get()));
  const YAML::Node& croot = root;
  for (const char* key : {"tenants", "admission", "redis"})
    admission.spec.fingerprint += (croot[key] ? YAML::Dump(croot[key]) : std::string("~")) + "\n---\n";
  cfg->admission = std::make_shared<const AdmissionSpec>(std::move(admission.spec));
  return cfg;
}
}  // namespace

std::shared_ptr<const Config> load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return parse_config(ss.str());
  } catch (const ConfigError& e) {
    throw ConfigError(path + ": " + e.what());
  }
}

std::string default_config_yaml(const std::vector<uint16_t>& chat_ports, uint16_t embed_port, uint16_t listen_port,
                                uint16_t admin_port) {
  std::string eps;
  for (auto p : chat_ports) eps += fmt::format("      - 127.0.0.1:{}\n", p);
  return fmt::format(R"(listen: 127.0.0.1:{}
admin: 127.0.0.1:{}
workers: 2
expose_routing_headers: true
pools:
  - name: chat-8b
    kind: chat
    policy: sluice
    endpoints:
{}  - name: embeddings
    kind: embedding
    policy: least_request
    endpoints:
      - 127.0.0.1:{}
models:
  - name: meta-llama/Llama-3.1-8B-Instruct
    pool: chat-8b
  - name: llama-3-8b
    alias_of: meta-llama/Llama-3.1-8B-Instruct
  - name: sql-lora
    adapter_of: meta-llama/Llama-3.1-8B-Instruct
  - name: BAAI/bge-small-en-v1.5
    pool: embeddings
)",
                     listen_port, admin_port, eps, embed_port);
}

void apply_kv_events_defaults(PoolConfig& p) {
  for (size_t i = 0; i < p.endpoints.size(); ++i) {
    auto& ep = p.endpoints[i];
    const int off = p.kv_events.offset_by_index ? static_cast<int>(i) : 0;
    auto addr = [&](uint16_t port) {
      if (port + off > 65535) return std::string();
      return fmt::format("tcp://{}:{}", ep.address.host.find(':') != std::string::npos ? "[" + ep.address.host + "]" : ep.address.host,
                         port + off);
    };
    if (ep.kv_events.empty() && p.kv_events.port) ep.kv_events = addr(p.kv_events.port);
    if (ep.kv_events_replay.empty() && p.kv_events.replay_port) ep.kv_events_replay = addr(p.kv_events.replay_port);
  }
  p.kv_events.enabled = false;
  for (const auto& ep : p.endpoints) p.kv_events.enabled = p.kv_events.enabled || !ep.kv_events.empty();
}

}  // namespace sluice
