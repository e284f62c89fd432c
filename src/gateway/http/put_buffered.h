// Feeding what is already buffered to a Beast parser, without I/O. Used by the downstream session
// (a request that arrived whole, the usual case, needs no async read) and by the upstream exchange
// (body bytes that arrived with the response head): Beast's async reads would parse the same bytes,
// but complete through one more handler hop even with nothing to read.
#pragma once
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/system/error_code.hpp>

namespace sluice {

// Puts b's bytes into p until they run out, or (body) the message is done, or (not body) its header
// is. need_more is not an error: the caller's async read takes over. Other parser errors (need_buffer
// included) are returned. The parser's eager flag is the caller's.
template <class Parser>
boost::system::error_code put_buffered(Parser& p, boost::beast::flat_buffer& b, bool body) {
  boost::system::error_code ec;
  while (b.size() > 0 && !(body ? p.is_done() : p.is_header_done())) {
    const size_t n = p.put(b.data(), ec);
    b.consume(n);
    if (ec == boost::beast::http::error::need_more) return {};
    if (ec || n == 0) break;
  }
  return ec;
}

}  // namespace sluice
