// Request framing and header rules a proxy must enforce before it reads a body (RFC 9112 6.1,
// 6.3, 3.2; RFC 9110 5.3), checked on the parsed header block. Beast's parser accepts some framing
// that a front proxy may read differently; each such request is refused here and its connection
// closed, so no byte of it can be parsed as a next request (request smuggling).
//
//   Transfer-Encoding whose final coding is not `chunked` (gzip, identity, xchunked, chunk,
//     "chunked, identity"), `chunked` applied twice, or any TE in an HTTP/1.0 request  -> 400
//   Transfer-Encoding and Content-Length together                                    -> 400
//   Content-Length as a list ("5, 5") or repeated                                    -> 400
//   a coding other than `chunked` before it ("gzip, chunked": not implemented)        -> 501
//   more than one Host header, or a Host with a list                                  -> 400
//
// Every refusal closes the connection (the framing of what follows is unknown).
#pragma once
#include "gateway/observability/reason.h"
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

namespace sluice {

struct FramingError {
  int status = 400;
  std::string message;
  Reason reason = Reason::bad_framing;  // access-log reason
};

std::optional<FramingError> check_request_framing(const boost::beast::http::request_header<>& req);

}  // namespace sluice
