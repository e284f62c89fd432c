#include "gateway/http/request_framing.h"

#include <vector>

#include <boost/beast/core/string.hpp>

namespace sluice {

namespace http = boost::beast::http;

namespace {

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The transfer codings of every Transfer-Encoding line, in order, without parameters.
std::vector<std::string_view> codings_of(const http::request_header<>& req) {
  std::vector<std::string_view> out;
  for (auto it = req.find(http::field::transfer_encoding); it != req.end() && it->name() == http::field::transfer_encoding; ++it) {
    std::string_view v = it->value();
    size_t start = 0;
    for (;;) {
      size_t comma = v.find(',', start);
      std::string_view item = v.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      if (auto semi = item.find(';'); semi != std::string_view::npos) item = item.substr(0, semi);
      item = trim_ows(item);
      out.push_back(item);  // an empty element is kept: it makes the list invalid below
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

FramingError bad(std::string message, Reason reason = Reason::bad_framing, int status = 400) {
  return FramingError{status, std::move(message), reason};
}

}  // namespace

std::optional<FramingError> check_request_framing(const http::request_header<>& req) {
  // One pass over the fields (a request has a handful; five keyed look-ups cost more than the walk).
  size_t hosts = 0, lengths = 0, encodings = 0;
  std::string_view host, length;
  for (const auto& f : req) {
    switch (f.name()) {
      case http::field::host: hosts += 1, host = f.value(); break;
      case http::field::content_length: lengths += 1, length = f.value(); break;
      case http::field::transfer_encoding: encodings += 1; break;
      default: break;
    }
  }
  // Host: exactly one for HTTP/1.1 (RFC 9112 3.2: more than one, or an invalid value, is a 400).
  if (hosts > 1) return bad("Request has more than one Host header.", Reason::bad_host);
  if (hosts == 1 && (host.find(',') != std::string_view::npos || host.find(' ') != std::string_view::npos))
    return bad("Request has an invalid Host header.", Reason::bad_host);

  // Content-Length: one header, one value. Beast accepts a list of equal values ("5, 5", which
  // RFC 9110 8.6 allows); a front proxy may not, so it is refused like any other ambiguity.
  if (lengths > 1 || (lengths == 1 && length.find(',') != std::string_view::npos))
    return bad("Request has more than one Content-Length.");

  if (encodings == 0) return std::nullopt;
  // RFC 9112 6.1: TE in HTTP/1.0 means faulty framing; 6.3: TE with Content-Length is a smuggling
  // attempt (or a broken client) and must be treated as an error by a server that forwards.
  if (req.version() < 11) return bad("Transfer-Encoding is not allowed in an HTTP/1.0 request.");
  if (lengths > 0)
    return bad("Request has both Transfer-Encoding and Content-Length.");
  const auto codings = codings_of(req);
  if (codings.empty() || !boost::beast::iequals(codings.back(), "chunked"))
    return bad("Transfer-Encoding must end with chunked.");
  for (size_t i = 0; i + 1 < codings.size(); ++i) {
    if (codings[i].empty() || boost::beast::iequals(codings[i], "chunked"))
      return bad("Transfer-Encoding is malformed (chunked must be applied once, last).");
  }
  if (codings.size() > 1)
    return bad("Transfer codings other than chunked are not supported.", Reason::unsupported_transfer_coding, 501);
  return std::nullopt;
}

}  // namespace sluice
