// The life of one model request (chat, completion, embedding), top to bottom in one coroutine:
//
//   parse (simdjson, once) -> authenticate + admit (Gateway::admit hook) -> resolve model (alias,
//   adapter, pool) -> pick (PoolRouter::rank: candidates best first) -> forward (rewrite the model
//   only for an alias; x-request-id passed or generated; on connect failure before any byte reached
//   the client, the next candidate, at most 2 retries) -> relay (SSE event by event, or the whole
//   body) -> settle (usage, DispatchGuard, admission ticket) -> log (Gateway::complete).
//
// Every ending goes through RequestLife::finish with an explicit Outcome.
#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/openai/request.h"

namespace sluice {

class Session;
using DownstreamRequest = boost::beast::http::request<boost::beast::http::string_body>;

// Serves one request; returns whether the client connection may be kept alive.
boost::asio::awaitable<bool> proxy_request(Session& session, ApiKind kind, DownstreamRequest& request, bool keep_alive);

}  // namespace sluice
