// The life of one model request (chat, completion, embedding), top to bottom in one coroutine
// (RequestLife::run in proxy.cpp):
//
//   parse (simdjson, once) -> authenticate (the generation's AdmissionRuntime; before the model
//   is resolved) -> resolve model (alias, adapter, pool, API kind) -> admit (budgets, the gateway
//   queue: waits while the pool is at its cap) -> pick (PoolRouter::rank: candidates best first)
//   -> forward (UpstreamExchange; the model rewritten only for an alias; x-request-id passed or
//   generated; each attempt returns what to do next: relay, retry on a fresh connection, retry on
//   the next candidate, stop) -> relay (SSE event by event, or the whole body) -> settle (usage,
//   DispatchGuard, admission ticket) -> log (Gateway::complete).
//
// Every ending goes through RequestLife::finish with an explicit Outcome and Reason. The request
// talks to its connection only through Downstream (http/downstream.h).
#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/openai/request.h"
#include "core/time.h"
#include "gateway/http/request_body.h"

namespace sluice {

class Gateway;
class UpstreamPool;
class Downstream;
using DownstreamRequest = boost::beast::http::request<RequestBody>;

struct RequestContext {
  Gateway& gateway;
  UpstreamPool& upstreams;  // the worker's upstream connections
  Downstream& downstream;   // the client connection
  Duration read_body{0};    // how long reading the request body took (the overhead histogram)
  std::chrono::steady_clock::time_point read_at;  // when the request was read: its duration and total timeout start here
  std::string_view client;  // the client's address (host:port), for the access log
};

// Serves one request; returns whether the client connection may be kept alive.
boost::asio::awaitable<bool> proxy_request(const RequestContext& ctx, ApiKind kind, DownstreamRequest& request,
                                           bool keep_alive);

}  // namespace sluice
