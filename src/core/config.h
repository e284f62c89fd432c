// sluice's configuration: YAML parsed and validated once into an immutable snapshot. Every error
// names the field it is about (e.g. `pools[1].endpoints[0]: expected host:port`). A reload builds
// a whole new snapshot and swaps it atomically; nothing mutates a Config after load.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config_error.h"
#include "core/epp/epp_config.h"
#include "core/health/outlier_detector.h"
#include "core/time.h"
#include "core/url.h"

namespace sluice {

struct AdmissionSpec;  // core/admission/admission_config.h
struct RedisSpec;      // core/admission/redis_config.h
struct PeerLoadSpec;   // core/picker/peer_load_config.h

enum class EngineKind { vllm, sglang, trtllm };
std::string_view to_string(EngineKind k);

enum class PoolKind { chat, embedding };

struct Address {
  std::string host;
  uint16_t port = 0;
  std::string str() const { return format_host_port(host, port); }  // IPv6 in brackets
};

// TLS (docs/config.md, "tls"; the gateway's tls/ bridge does the OpenSSL work). Downstream: the
// API listener terminates TLS with this certificate chain and key (PEM files). Upstream: an
// endpoint written https://host:port is reached over TLS, verified against `ca_file` (the system
// store when empty) and `server_name` (the endpoint's host when empty) unless verify is false.
struct TlsServerConfig {
  std::string cert_file, key_file;
  bool enabled() const { return !cert_file.empty(); }
};
struct TlsClientConfig {
  bool enabled = false;
  std::string ca_file;
  bool verify = true;
  std::string server_name;
};

struct EndpointConfig {
  std::string name;         // defaults to host:port
  Address address;
  EngineKind engine = EngineKind::vllm;
  std::string metrics_path = "/metrics";
  std::string duty_cycle_url;  // optional DCGM exporter URL; empty: read the engine's own gauge
  // The exporter's `gpu` label values that are this endpoint's GPUs (averaged); empty: every GPU
  // the exporter reports (one exporter per node serves several engines' GPUs).
  std::vector<std::string> duty_cycle_gpus;
  // Authorization sent to this engine ("Bearer <key>", from upstream_auth; core/upstream_auth.h);
  // empty: none. Never logged.
  std::string authorization;
  TlsClientConfig tls;  // https:// endpoints
  // The engine's own host:port when `address` is a local TLS bridge's (gateway/tls/): the Host
  // header sent upstream. Empty: `address`.
  std::string host_header;
  // The engine's KV-event PUB socket and replay ROUTER (tcp://host:port; empty: none), from the
  // endpoint's `kv_events:` / `kv_events_replay:` or the pool's `kv_events:` default.
  std::string kv_events;
  std::string kv_events_replay;
};

// Engine KV events (`kv_events:` per pool; core/prefix/kv_event_index.h). The pool default gives
// every endpoint without its own address tcp://<endpoint host>:<port + i> (i = its index in the
// list when offset_by_index, as vLLM offsets by data-parallel rank and `sluice sim` by replica).
struct KvEventsConfig {
  bool enabled = false;       // some endpoint has an events address
  uint16_t port = 0;          // pool default; 0: none
  uint16_t replay_port = 0;   // pool default; 0: none
  bool offset_by_index = true;
  std::string topic;          // subscription prefix; empty: every topic
  Duration stale_after = std::chrono::seconds(2);
  Duration recent_window = std::chrono::seconds(2);
  Duration replay_timeout = std::chrono::milliseconds(500);
};

// Where the engine-event index's lookup takes a request's token ids from (`token_ids:` per pool;
// core/prefix/render_tokens.h, gateway/render_client.h). `estimate`: from the text by the byte
// rule (exact for `sluice sim`, an estimate for a real tokenizer). `render`: the engine's own
// ids, asked from a healthy endpoint's vLLM render route before the pick, within `timeout`,
// remembered in an LRU of `cache_entries` answers holding at most `cache_tokens` ids; a timeout,
// an error or an unreadable answer falls back to the estimate for that request. Needs kv_events.
struct TokenIdsConfig {
  enum class Source { estimate, render };
  Source source = Source::estimate;
  Duration timeout = std::chrono::milliseconds(50);
  size_t cache_entries = 4096;
  size_t cache_tokens = size_t{8} << 20;  // 32 MiB of ids
};

struct UpstreamLimits {
  int max_connections_per_endpoint = 512;  // open connections, busy + idle
  int max_idle_per_endpoint = 64;          // idle keep-alive connections kept for reuse
  Duration idle_timeout = std::chrono::seconds(30);
};

struct ScrapeConfig {
  Duration interval = std::chrono::milliseconds(50);
  Duration timeout = std::chrono::milliseconds(500);
  Duration stale_after = std::chrono::milliseconds(500);  // older metrics are not trusted
};

// Active health checking (`health:` per pool): GET `path` on every endpoint each interval; a probe
// fails on a connect error, a timeout or a non-2xx status (core/health/active_health.h).
struct HealthCheckConfig {
  bool enabled = true;
  std::string path = "/health";
  Duration interval = std::chrono::milliseconds(1000);
  Duration timeout = std::chrono::milliseconds(500);
  int unhealthy_threshold = 3;
  int healthy_threshold = 2;
};

// Retries (`retry:` per pool): a connect failure, a reset or a 502/503 before any byte reached the
// client is retried on the next-ranked endpoint, at most `max_retries` times, within a pool-wide
// budget (core/health/retry_budget.h). An upstream Retry-After up to `max_retry_after` is waited
// out before the retry; a longer one passes the response on.
struct RetryConfig {
  int max_retries = 2;
  double budget_ratio = 0.2;
  double budget_min_per_second = 3;
  Duration max_retry_after = std::chrono::milliseconds(1000);
};

struct PoolConfig {
  std::string name;
  PoolKind kind = PoolKind::chat;
  std::string policy = "sluice";           // see core/picker/policy_factory.h
  std::map<std::string, double> policy_params;  // weights and thresholds by name
  EngineKind engine = EngineKind::vllm;
  std::vector<EndpointConfig> endpoints;
  // The pool's `upstream_auth:` ("Bearer <key>"; empty: none), the default of every endpoint
  // without its own, discovered ones included. Never logged.
  std::string upstream_authorization;
  UpstreamLimits upstream;
  ScrapeConfig scrape;
  int max_in_flight_per_endpoint = 256;    // hard cap: beyond it requests wait in the gateway
  // Engine-signal saturation (fresh scrapes only): an endpoint whose engine queue or KV usage is at
  // these limits takes no more requests; when every endpoint is saturated, requests wait in the
  // gateway's queue (and sheddable ones are refused) instead of piling onto the engines.
  double saturation_max_waiting = 16;
  double saturation_max_kv_usage = 0.95;
  HealthCheckConfig health;
  OutlierConfig outlier;                   // passive ejection (`outlier:`)
  RetryConfig retry;
  // Endpoints from Kubernetes (`discovery: {kubernetes: ...}`): `endpoints` may then be empty;
  // the watch adds and removes them live (gateway/discovery/).
  std::optional<KubernetesDiscoveryConfig> discovery;
  KvEventsConfig kv_events;
  TokenIdsConfig token_ids;
  // The pool's YAML as parsed (canonical dump): equal fingerprints mean an identical pool, which a
  // reload keeps running as it is (prefix index, signals, connections). Empty: never reused.
  std::string fingerprint;
};

// A client-facing model name. `target` is what is forwarded upstream (an alias pins a version by
// naming a different target); `adapter_of` marks a LoRA adapter whose parent is that base model.
struct ModelRoute {
  std::string name;
  std::string pool;
  std::string target;
  std::string adapter_of;
  bool is_alias() const { return name != target; }
};

struct ServerLimits {
  size_t max_body_bytes = 8u << 20;
  size_t max_header_bytes = 16u << 10;
  size_t max_header_count = 100;  // header fields per request; more -> 431 (beside the byte limit)
  Duration header_timeout = std::chrono::seconds(10);   // slow clients get 408
  Duration idle_timeout = std::chrono::seconds(60);     // keep-alive between requests
  int max_connections = 10000;             // at the limit idle keep-alive connections are closed first
  // Request-body bytes buffered by all connections together (read, not yet finished with); past
  // it a request gets 503 + Retry-After and its connection is closed. Bounds what unauthenticated
  // clients holding unfinished bodies can make the gateway keep (10,000 x 8 MiB otherwise).
  size_t max_buffered_body_bytes = 256u << 20;
};

struct Timeouts {
  Duration connect = std::chrono::seconds(2);
  Duration first_byte = std::chrono::seconds(120);
  Duration idle_gap = std::chrono::seconds(60);    // between stream chunks
  Duration total = std::chrono::minutes(30);
};

// Gives each endpoint of `pool` without its own events addresses the pool default's
// (`kv_events: {port, replay_port, offset_by_index}`: tcp://<endpoint host>:<port + index>), and
// sets kv_events.enabled. Endpoints whose port would pass 65535 get none. Used when the file is
// parsed (which refuses such ports first) and again for each set of discovered endpoints.
void apply_kv_events_defaults(PoolConfig& pool);

struct Config {
  Address listen{"127.0.0.1", 8080};
  Address admin{"127.0.0.1", 9090};
  TlsServerConfig tls;  // `tls:`: HTTPS on `listen` (not reloadable)
  int workers = 2;
  ServerLimits limits;
  Timeouts timeouts;
  Duration drain_timeout = std::chrono::seconds(30);
  bool expose_routing_headers = false;  // x-sluice-endpoint, x-sluice-predicted-cached-tokens
  std::vector<PoolConfig> pools;
  std::vector<ModelRoute> models;
  // Tenants, token budgets, priorities and the gateway queue (`tenants:` and `admission:`).
  // Never null; `admission->enabled` is false when no tenants are configured.
  std::shared_ptr<const AdmissionSpec> admission;
  // The Endpoint Picker listener (`ext_proc:`, Envoy ext_proc over gRPC); unset: none.
  std::optional<ExtProcConfig> ext_proc;
  // Shared token buckets across replicas (`redis:`); null = local buckets.
  std::shared_ptr<const RedisSpec> redis;
  // Gateway replicas share in-flight load (`peer_load:`); null = off.
  std::shared_ptr<const PeerLoadSpec> peer_load;

  const PoolConfig* find_pool(std::string_view name) const;
  const ModelRoute* find_model(std::string_view name) const;
};

// Parses and validates; throws ConfigError naming the field on any problem.
std::shared_ptr<const Config> parse_config(const std::string& yaml_text);
std::shared_ptr<const Config> load_config_file(const std::string& path);

// The embedded default: one chat pool of simulated replicas on the given loopback ports, with an
// alias and an adapter, plus an embeddings pool (used by `sluice serve` with no config).
std::string default_config_yaml(const std::vector<uint16_t>& chat_ports, uint16_t embed_port,
                                uint16_t listen_port, uint16_t admin_port);

}  // namespace sluice
