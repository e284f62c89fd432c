// The upstream exchange (gateway/http/upstream_exchange.h) against a real loopback peer: the response
// head is taken from the bytes already in the socket when send() looks (one recv, parsed in place),
// and the async read brings whatever is missing: a head split across segments, an interim 100
// Continue before the final head, a peer that closed before answering. The client is watched only
// once the exchange waits for the engine.
#include "gateway/http/upstream_exchange.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/error.hpp>
#include <gtest/gtest.h>

#include "loopback_pool.h"

namespace sluice {
namespace {

// The narrow downstream the exchange talks to: a client that stays, deadlines recorded.
class StayingClient final : public Downstream {
 public:
  asio::awaitable<bool> write(std::string_view, std::string_view, std::string_view, std::optional<Progress>) override { co_return true; }
  bool gone() const override { return false; }
  asio::cancellation_slot cancel_slot() override { return signal_.slot(); }
  void deadline(SteadyClock::time_point, Phase phase) override { last_phase = phase; }
  void clear_deadline() override { last_phase = Phase::none; }
  Phase expired() const override { return Phase::none; }
  asio::awaitable<void> watching(asio::awaitable<void> work, WatchFrom) override { co_await std::move(work); }
  void watch_now() override { ++watches; }
  Phase last_phase = Phase::none;
  int watches = 0;

 private:
  asio::cancellation_signal signal_;
};

struct Fixture : testing::LoopbackPool {
  std::optional<tcp::socket> server;  // the engine's end of the connection
  bool server_accepted = false;
  StayingClient client;
  UpstreamLease connect() {
    acceptor.async_accept([this](boost::system::error_code ec, tcp::socket s) {
      if (!ec) server.emplace(std::move(s));
      server_accepted = true;
    });
    AcquireResult r = acquire();
    run_until(server_accepted);
    EXPECT_FALSE(r.error) << r.error.message();
    return std::move(r.lease);
  }
  // The engine's bytes, written now (they wait in the gateway's receive buffer).
  void engine_writes(std::string_view bytes) { asio::write(*server, asio::buffer(bytes)); }

  struct Result {
    boost::system::error_code ec;
    int status = 0;
    std::string body;
    bool nothing_received = false;
  };
  // send() one request, then read the whole body; `later`: bytes the engine writes 50 ms after.
  Result exchange(const std::string& later = {}) {
    Result res;
    bool done = false;
    UpstreamExchange up(connect(), client, ExchangeDeadlines{std::chrono::seconds(2), std::chrono::seconds(2),
                                                            SteadyClock::now() + std::chrono::seconds(5)});
    if (!pre.empty()) engine_writes(pre);
    asio::steady_timer timer(io);
    if (!later.empty()) {
      timer.expires_after(std::chrono::milliseconds(50));
      timer.async_wait([&](boost::system::error_code) { engine_writes(later); });
    }
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      res.ec = co_await up.send("POST /v1/completions HTTP/1.1\r\nHost: e0\r\nContent-Length: 2\r\n\r\n", "{}");
      res.nothing_received = up.nothing_received();
      if (!res.ec) {
        res.status = up.status();
        char buf[64];
        while (!up.body_done()) {
          size_t got = 0;
          boost::system::error_code ec;
          if (!co_await up.read(buf, sizeof buf, got, ec)) {
            res.ec = ec;
            break;
          }
          res.body.append(buf, got);
        }
      }
      done = true;
    }, asio::detached);
    run_until(done);
    EXPECT_TRUE(done);
    return res;
  }
  std::string pre;  // bytes the engine has written before send() reads
};

void expect_answer(const Fixture::Result& r, int status, std::string_view body) {
  ASSERT_FALSE(r.ec) << r.ec.message();
  EXPECT_EQ(r.status, status);
  EXPECT_EQ(r.body, body);
}

TEST(UpstreamExchange, AnAnswerAlreadyHereIsReadWhole) {
  Fixture f;
  f.pre = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}";
  const auto r = f.exchange();
  expect_answer(r, 200, "{\"ok\":true}");
  EXPECT_EQ(f.client.watches, 0);  // nothing waited for the engine: the client is not watched
}

TEST(UpstreamExchange, TheClientIsWatchedWhileTheBodyIsWaitedFor) {
  Fixture f;
  f.pre = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n";  // the head now, the body 50 ms later (a stream)
  const auto r = f.exchange("hello");
  expect_answer(r, 200, "hello");
  EXPECT_GE(f.client.watches, 1);
}

TEST(UpstreamExchange, AHeadSplitAcrossSegmentsIsCompletedByTheAsyncRead) {
  Fixture f;
  f.pre = "HTTP/1.1 200 OK\r\nContent-Le";  // half a head now, the rest 50 ms later
  const auto r = f.exchange("ngth: 5\r\n\r\nhello");
  expect_answer(r, 200, "hello");
  EXPECT_GE(f.client.watches, 1);  // it waited for the rest of the head
}

TEST(UpstreamExchange, AnInterimHeadBeforeTheFinalOneIsDropped) {
  Fixture f;
  f.pre = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok";
  const auto r = f.exchange();
  expect_answer(r, 201, "ok");
}

TEST(UpstreamExchange, AnAnswerThatArrivesLaterIsWaitedFor) {
  Fixture f;
  const auto r = f.exchange("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy");
  expect_answer(r, 503, "busy");
  EXPECT_GE(f.client.watches, 1);  // watched while it waited: a client that leaves then cancels it
}

TEST(UpstreamExchange, APeerThatClosedBeforeAnsweringIsAnErrorWithNothingReceived) {
  Fixture f;
  Fixture::Result r;
  {
    bool closed = false;
    f.acceptor.async_accept([&](boost::system::error_code ec, tcp::socket s) {
      if (!ec) s.close();  // the engine closes at once (a kept-alive connection it had timed out)
      closed = true;
    });
    AcquireResult a = f.acquire();
    f.run_until(closed);
    ASSERT_FALSE(a.error) << a.error.message();
    UpstreamExchange up(std::move(a.lease), f.client,
                        ExchangeDeadlines{std::chrono::seconds(2), std::chrono::seconds(2), SteadyClock::now() + std::chrono::seconds(5)});
    bool sent = false;
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
      r.ec = co_await up.send("POST / HTTP/1.1\r\nHost: e0\r\nContent-Length: 2\r\n\r\n", "{}");
      r.nothing_received = up.nothing_received();
      sent = true;
    }, asio::detached);
    f.run_until(sent);
    ASSERT_TRUE(sent);
  }
  EXPECT_TRUE(r.ec == boost::beast::http::error::end_of_stream || r.ec == asio::error::eof ||
              r.ec == asio::error::connection_reset || r.ec == asio::error::broken_pipe)
      << r.ec.message();
  EXPECT_TRUE(r.nothing_received);  // so the gateway retries it once on a fresh connection
}

}  // namespace
}  // namespace sluice
