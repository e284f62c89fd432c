// Small HTTP/1.1 helpers for the data path: serialising simple responses and OpenAI-style errors,
// the hop-by-hop header list, and request ids. Responses are written as raw bytes (one buffer for
// the head, one for the body) rather than through Beast's serializer: cheaper, and byte-exact.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/beast/http/field.hpp>

#include "core/openai/request.h"

namespace sluice {

using ResponseHeaders = std::vector<std::pair<std::string, std::string>>;

// "HTTP/1.1 <status> <reason>\r\n" + headers + Content-Length + Connection + "\r\n".
std::string response_head(int status, std::string_view content_type, size_t content_length, bool keep_alive,
                          const ResponseHeaders& extra = {});
// A whole response: head + body.
std::string simple_response(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                            const ResponseHeaders& extra = {});
// An OpenAI-style error response.
std::string error_response(const ApiError& e, bool keep_alive, const ResponseHeaders& extra = {});
ApiError api_error(int status, std::string message, std::string type = "invalid_request_error",
                   std::string param = {}, std::string code = {});

// Connection-scoped headers that a proxy must not forward (RFC 9110 7.6.1), plus the ones the
// gateway sets itself on the upstream request.
bool is_hop_by_hop(std::string_view name);
// The same by Beast's field enum first (one switch for the known names; the name for the rest).
bool is_hop_by_hop(boost::beast::http::field f, std::string_view name);

// 32 hex characters, random per request.
std::string new_request_id();

// The gateway's own Retry-After for a request no endpoint can take now (retry-after, retry-after-ms):
// 1 s jittered, so clients told to come back do not return all at once.
ResponseHeaders jittered_retry_after();

// The SSE error event sent when a stream fails after it started (vLLM's shape: `data: {"error":..}`).
std::string stream_error_event(const ApiError& e);

}  // namespace sluice
