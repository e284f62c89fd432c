// A small HTTP/1.1 GET client for the gateway's own probes: the metrics scraper (and its DCGM
// duty-cycle fetch) and the active health checker. One connection to host:port; a deadline per GET
// that covers resolve/connect, write and read; a body limit; the connection kept alive between GETs
// when `keep_alive` is set (the scraper) or closed after each (the health checker). A transport
// failure (resolve, connect, write, read, timeout, body over the limit) is reported in `error` and
// drops the connection, so the next GET reconnects; any HTTP status is a transport success and the
// caller judges it. Beast's client templates are instantiated here only, once for both callers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "core/time.h"

namespace sluice {

struct HttpGetResult {
  int status = 0;        // 0 when the exchange failed
  std::string body;
  std::string error;     // empty when a response was read
};

class HttpGetConnection {
 public:
  HttpGetConnection(std::string host, uint16_t port, std::string user_agent, bool keep_alive);
  ~HttpGetConnection();
  HttpGetConnection(const HttpGetConnection&) = delete;
  HttpGetConnection& operator=(const HttpGetConnection&) = delete;

  // GET `target`; `accept` is sent as the Accept header when not empty.
  boost::asio::awaitable<HttpGetResult> get(const std::string& target, Duration timeout, size_t body_limit,
                                            std::string_view accept = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice
