// The engine's token ids for the prefix lookup (issue 15, item 3), for a pool configured with
// `token_ids: {source: render}` (core/config.h TokenIdsConfig) and an engine-event index.
//
// Before the pick, the request's body is POSTed to vLLM's render route of a healthy endpoint
// (/v1/chat/completions/render for chat, /v1/completions/render for completions; no generation)
// and the returned `token_ids` are looked up in the KV-event index in place of the byte estimate
// (PickRequest::token_ids, core/prefix/kv_event_index.h).
//
//   which endpoint: the next healthy one in the pool's rotation. Every engine of a pool serves the
//     same model with the same tokenizer and template, so any of them gives the same ids; the pick
//     is not known yet (it needs the ids), and rotating spreads the tokenizing work (the API
//     server's CPU, not the GPU) and keeps a warm connection to every engine.
//   authorization: exactly what the forwarded request carries (proxy.cpp upstream_head): the
//     endpoint's `upstream_auth` key when configured, else the client's Authorization header, never
//     the client's key when tenants are enforced (that key is the gateway's). The render route is
//     behind the same `--api-key` as generation, so any other rule either fails on keyed engines
//     or leaks the gateway's tenant keys to the engines. (llm-d forwards the client's header.)
//   deadline: `timeout` (default 50 ms) from the start, for the connection, the write and the whole
//     answer; never past the request's own total deadline.
//   cancellation: the client's cancellation slot closes the socket at once when the client leaves
//     (the caller runs this under Downstream::watching).
//   cache: the pool's RenderCache (core/prefix/render_tokens.h), keyed by model + adapter + the
//     body's prompt-bearing bytes; answers are kept, failures are not.
//   fallback: a timeout, a connection error, a non-200 status or an answer that is not vLLM's shape
//     (parse_render_answer) is counted and the request is picked on the estimate; it never fails the
//     request. An engine without the route (404 Not Found from the web framework, not a model's 404;
//     405; 501) stops the calls for kMissingRouteBackoff
//     (30 s; logged once per occurrence): each request meanwhile is estimated and counted as an error.
// Connections come from the worker's UpstreamPool (the same slots as the forwarded requests); an
// answer read whole and cleanly gives its connection back.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include "core/config.h"
#include "core/metrics/histogram.h"
#include "core/metrics/series.h"
#include "core/openai/request.h"
#include "core/prefix/render_tokens.h"
#include "gateway/http/upstream_pool.h"

namespace sluice {

enum class RenderOutcome : uint8_t { ok, cache_hit, timeout, error, cancelled, estimate };
inline constexpr size_t kRenderOutcomes = 5;  // counted ones (not `estimate`)
std::string_view to_string(RenderOutcome o);
// Where the pick's token ids came from, for /debug/pick: render, cache or estimate.
std::string_view token_ids_source(RenderOutcome o);

// A pool's render state, shared by its workers (PoolRuntime::render).
class RenderRuntime {
 public:
  explicit RenderRuntime(const TokenIdsConfig& config);
  const TokenIdsConfig config;
  RenderCache cache;
  Counter outcomes[kRenderOutcomes];
  Histogram latency;  // calls to the engine (not cache hits), seconds
  std::atomic<uint64_t> cursor{0};
  // An engine answered 404/405/501 (no render route: a vLLM before the render routes): no calls
  // until then (steady-clock ns), the requests are estimated and counted as errors.
  std::atomic<int64_t> missing_until_ns{0};
};

struct RenderCall {
  ApiKind kind = ApiKind::chat;   // chat or completion (others are not rendered)
  std::string_view model;         // the name the engine serves: the target, or the adapter
  std::string_view adapter;
  std::string_view body;          // as it will be forwarded (an alias's target in place)
  std::string_view authorization; // the client's Authorization header; empty: none
  bool forward_client_auth = true;  // false when tenants are enforced
  std::string_view request_id;
  SteadyClock::time_point total_deadline = SteadyClock::time_point::max();
  std::function<bool()> client_gone;  // asked once connected (a leave while connecting); may be empty
};

struct RenderResult {
  RenderOutcome outcome = RenderOutcome::estimate;
  std::shared_ptr<const TokenIds> ids;  // set for ok and cache_hit
  std::string endpoint;                 // asked (empty for a cache hit)
  std::string error;                    // why it fell back
};

// Asks the pool's engines for `call`'s token ids (cache first); counts the outcome. `client_left`
// (may be unconnected) is emitted when the client leaves. Never throws for engine faults.
boost::asio::awaitable<RenderResult> render_token_ids(UpstreamPool& upstreams, PoolRuntime& pool, const RenderCall& call,
                                                      boost::asio::cancellation_slot client_left);

// sluice_render_* of every pool that renders (docs/metrics.md), at scrape time.
void append_render_metrics(std::string& out, const std::map<std::string, std::shared_ptr<PoolRuntime>, std::less<>>& pools);

}  // namespace sluice
