// The admin listener: GET /metrics (Prometheus text), /healthz, /readyz, and the live dashboard's
// embedded static files at /dashboard (dashboard_assets.h). Separate from the data
// path so scrapes and probes never queue behind client traffic limits. Connections are
// keep-alive, requests tiny; it runs on worker 0's io_context.
#pragma once
#include <string>
#include <string_view>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

namespace sluice {

class Gateway;

class AdminListener {
 public:
  AdminListener(boost::asio::io_context& io, Gateway& gateway, const boost::asio::ip::tcp::endpoint& at);
  uint16_t port() const;
  void start();
  void stop();

 private:
  boost::asio::awaitable<void> accept_loop();
  boost::asio::awaitable<void> serve(boost::asio::ip::tcp::socket socket);
  boost::asio::awaitable<std::string> explain_pick(bool is_post, std::string_view body, bool keep_alive);
  Gateway& gateway_;
  boost::asio::ip::tcp::acceptor acceptor_;
};

}  // namespace sluice
