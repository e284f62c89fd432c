#include "gateway/signals/scraper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include "core/picker/policy_factory.h"

namespace sluice {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// A tiny keep-alive metrics server: answers every GET with `body`, counting connections.
struct MetricsServer {
  tcp::acceptor acceptor;
  std::string body;
  std::atomic<int> connections{0}, requests{0};
  MetricsServer(asio::io_context& io, std::string b) : acceptor(io, {asio::ip::make_address("127.0.0.1"), 0}), body(std::move(b)) {}
  uint16_t port() const { return acceptor.local_endpoint().port(); }
  asio::awaitable<void> serve(tcp::socket sock) {
    beast::flat_buffer buf;
    for (;;) {
      http::request<http::string_body> req;
      auto [err, n] = co_await http::async_read(sock, buf, req, asio::as_tuple(asio::use_awaitable));
      if (err) co_return;
      ++requests;
      http::response<http::string_body> res{req.target() == "/metrics" ? http::status::ok : http::status::not_found, 11};
      res.body() = body;
      res.keep_alive(true);
      res.prepare_payload();
      auto [werr, wn] = co_await http::async_write(sock, res, asio::as_tuple(asio::use_awaitable));
      if (werr) co_return;
    }
  }
  asio::awaitable<void> accept() {
    for (;;) {
      auto [err, sock] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
      if (err) co_return;
      ++connections;
      asio::co_spawn(acceptor.get_executor(), serve(std::move(sock)), asio::detached);
    }
  }
};

TEST(Scraper, ScrapesKeepsAliveAndCountsErrors) {
  asio::io_context io;
  MetricsServer server(io,
                       "vllm:num_requests_waiting{engine=\"0\"} 7\nvllm:num_requests_running 3\n"
                       "vllm:kv_cache_usage_perc 0.4\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"900\"} 1\n");
  MetricsServer junk(io, "not metrics at all\n");
  asio::co_spawn(io, server.accept(), asio::detached);
  asio::co_spawn(io, junk.accept(), asio::detached);
  // A port with nothing listening: bind, read the port, close.
  uint16_t dead_port;
  {
    tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
    dead_port = a.local_endpoint().port();
  }
  PoolConfig pool;
  pool.name = "chat";
  pool.scrape.interval = std::chrono::milliseconds(20);
  pool.scrape.timeout = std::chrono::milliseconds(200);
  for (auto [name, port] : {std::pair<std::string, uint16_t>{"good", server.port()}, {"junk", junk.port()}, {"dead", dead_port}}) {
    EndpointConfig e;
    e.name = name;
    e.address = {"127.0.0.1", port};
    pool.endpoints.push_back(e);
  }
  pool.policy = "sluice";
  PoolRouter router(pool, make_policy(pool, 1));
  auto epoch = std::chrono::steady_clock::now();
  auto now = [epoch] { return std::chrono::duration_cast<Time>(std::chrono::steady_clock::now() - epoch); };
  auto scrapers = start_scrapers(io, {&router}, now);
  asio::steady_timer stop_timer(io, std::chrono::milliseconds(400));
  stop_timer.async_wait([&](auto) {
    scrapers->stop();
    server.acceptor.close();
    junk.acceptor.close();
  });
  std::thread watchdog([&] {
    for (int i = 0; i < 100 && !io.stopped(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    io.stop();
  });
  io.run_for(std::chrono::seconds(4));
  io.stop();
  watchdog.join();

  auto snap = router.snapshot(now());
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_TRUE(snap[0].signals.present);
  EXPECT_DOUBLE_EQ(snap[0].signals.waiting, 7);
  EXPECT_DOUBLE_EQ(snap[0].signals.running, 3);
  EXPECT_EQ(snap[0].signals.kv_capacity_blocks, 900);
  EXPECT_EQ(snap[0].load.scrape_errors_total, 0);
  EXPECT_GE(server.requests.load(), 5);
  EXPECT_EQ(server.connections.load(), 1);  // kept alive
  EXPECT_FALSE(snap[1].signals.present);
  EXPECT_GE(snap[1].load.scrape_errors_total, 3);
  EXPECT_FALSE(snap[2].signals.present);
  EXPECT_GE(snap[2].load.scrape_errors_total, 3);
  EXPECT_TRUE(snap[2].healthy);  // a failing scrape does not make an endpoint unhealthy
  auto st = scrapers->status();
  ASSERT_EQ(st.size(), 3u);
  EXPECT_GE(st[0].ok_total, 5);
  EXPECT_TRUE(st[0].last_error.empty());
  EXPECT_NE(st[1].last_error.find("no waiting/running"), std::string::npos) << st[1].last_error;
  EXPECT_NE(st[2].last_error.find("connect"), std::string::npos) << st[2].last_error;
}

}  // namespace
}  // namespace sluice
