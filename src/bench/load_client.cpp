#include "bench/load_client.h"

#include <fmt/format.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <memory>
#include <simdjson.h>

#include "core/openai/sse.h"
#include "core/url.h"

namespace sluice::bench {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

std::variant<HttpTarget, std::string> http_target(const std::string& url) {
  std::string error;
  auto u = parse_http_url(url, error);
  if (!u) return error;
  HttpTarget t{std::move(u->host), u->port, std::move(u->target)};
  while (!t.path_prefix.empty() && t.path_prefix.back() == '/') t.path_prefix.pop_back();
  return t;
}

namespace {

// What one SSE/JSON chunk says: a content token, and/or usage totals.
struct ChunkInfo {
  bool content = false;
  int64_t completion_tokens = -1;
};

ChunkInfo inspect_chunk(simdjson::ondemand::parser& parser, std::string_view json) {
  ChunkInfo info;
  simdjson::padded_string p(json);
  simdjson::ondemand::document doc;
  if (parser.iterate(p).get(doc)) return info;
  simdjson::ondemand::object obj;
  if (doc.get_object().get(obj)) return info;
  for (auto field : obj) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return info;
    if (key == "choices") {
      simdjson::ondemand::array arr;
      if (field.value().get_array().get(arr)) continue;
      for (auto choice : arr) {
        simdjson::ondemand::object c;
        if (choice.get_object().get(c)) break;
        for (auto cf : c) {
          std::string_view ck;
          if (cf.unescaped_key().get(ck)) break;
          if (ck == "text") {
            std::string_view s;
            if (!cf.value().get_string().get(s) && !s.empty()) info.content = true;
          } else if (ck == "delta" || ck == "message") {
            simdjson::ondemand::object d;
            if (cf.value().get_object().get(d)) continue;
            std::string_view s;
            if (!d["content"].get_string().get(s) && !s.empty()) info.content = true;
          }
        }
        break;  // the first choice is enough
      }
    } else if (key == "usage") {
      simdjson::ondemand::object u;
      if (field.value().get_object().get(u)) continue;
      int64_t n = 0;
      if (!u["completion_tokens"].get_int64().get(n)) info.completion_tokens = n;
    }
  }
  return info;
}

struct Shared {
  const LoadOptions& opt;
  tcp::endpoint endpoint;
  Clock::time_point start;
  std::vector<workload::RequestRecord>& records;
  std::atomic<int64_t> finished{0}, ok{0};  // read by the progress thread
};

asio::awaitable<void> one_request(Shared& sh, workload::WorkloadRequest r) {
  auto ex = co_await asio::this_coro::executor;
  if (!sh.opt.model.empty() && r.adapter.empty()) r.model = sh.opt.model;
  workload::RequestRecord rec;
  rec.tenant = r.tenant;
  rec.status = 0;
  rec.input_tokens = r.input_tokens();
  const auto sent = Clock::now();
  rec.arrival = std::chrono::duration_cast<Duration>(sent - sh.start);
  auto sock = std::make_shared<tcp::socket>(ex);
  asio::steady_timer deadline(ex);
  deadline.expires_after(sh.opt.timeout);
  deadline.async_wait([sock](boost::system::error_code ec) {
    if (!ec) sock->close();
  });
  int64_t content_chunks = 0, usage_tokens = -1;
  auto finish = [&] {
    rec.e2e = std::chrono::duration_cast<Duration>(Clock::now() - sent);
    rec.output_tokens = usage_tokens >= 0 ? usage_tokens : content_chunks;
  };
  do {
    auto [cec] = co_await sock->async_connect(sh.endpoint, tuple_awaitable);
    if (cec) break;
    http::request<http::string_body> req{http::verb::post, sh.opt.target.path_prefix + r.path(), 11};
    req.set(http::field::host, sh.opt.target.host + ":" + std::to_string(sh.opt.target.port));
    req.set(http::field::content_type, "application/json");
    req.set(http::field::connection, "close");
    if (!sh.opt.api_key.empty()) req.set(http::field::authorization, "Bearer " + sh.opt.api_key);
    else if (sh.opt.tenant_as_api_key) req.set(http::field::authorization, "Bearer " + r.tenant);
    req.body() = r.body();
    req.prepare_payload();
    auto [wec, wn] = co_await http::async_write(*sock, req, tuple_awaitable);
    if (wec) break;
    beast::flat_buffer buf;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    auto [hec, hn] = co_await http::async_read_header(*sock, buf, parser, tuple_awaitable);
    if (hec) break;
    rec.status = int(parser.get().result_int());
    SseParser sse;
    const bool streamed = parser.get()[http::field::content_type].starts_with("text/event-stream");
    std::string whole;
    simdjson::ondemand::parser json;
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof chunk;
      auto [rec_ec, n] = co_await http::async_read_some(*sock, buf, parser, tuple_awaitable);
      if (rec_ec == http::error::need_buffer) rec_ec = {};
      if (rec_ec) {
        if (rec.status == 200) rec.status = 0;  // cut mid-stream
        break;
      }
      const size_t got = sizeof chunk - parser.get().body().size;
      if (!streamed) {
        whole.append(chunk, got);
        continue;
      }
      sse.append(std::string_view(chunk, got));
      SseEvent ev;
      while (sse.next(ev)) {
        if (!ev.has_data || ev.data == "[DONE]") continue;
        auto info = inspect_chunk(json, ev.data);
        if (info.content) {
          if (!rec.ttft) rec.ttft = std::chrono::duration_cast<Duration>(Clock::now() - sent);
          ++content_chunks;
        }
        if (info.completion_tokens >= 0) usage_tokens = info.completion_tokens;
      }
    }
    if (!streamed && rec.status == 200) {
      auto info = inspect_chunk(json, whole);
      if (info.completion_tokens >= 0) usage_tokens = info.completion_tokens;
      else if (info.content) content_chunks = 1;
    }
  } while (false);
  finish();
  deadline.cancel();
  boost::system::error_code ignored;
  sock->close(ignored);
  const double k = sh.opt.time_scale;
  rec.arrival = std::chrono::duration_cast<Duration>(rec.arrival * k);
  rec.e2e = std::chrono::duration_cast<Duration>(rec.e2e * k);
  if (rec.ttft) rec.ttft = std::chrono::duration_cast<Duration>(*rec.ttft * k);
  const bool ok = rec.status == 200;
  sh.records.push_back(std::move(rec));
  sh.finished.fetch_add(1, std::memory_order_relaxed);
  if (ok) sh.ok.fetch_add(1, std::memory_order_relaxed);
}

asio::awaitable<void> open_loop(Shared& sh, workload::Workload& wl) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  while (auto r = wl.next()) {
    const auto at = sh.start + std::chrono::duration_cast<Clock::duration>(r->arrival / sh.opt.time_scale);
    if (at > Clock::now()) {
      timer.expires_at(at);
      co_await timer.async_wait(tuple_awaitable);
    }
    asio::co_spawn(ex, one_request(sh, std::move(*r)), asio::detached);
  }
}

asio::awaitable<void> closed_loop_worker(Shared& sh, workload::Workload& wl) {
  while (auto r = wl.next()) co_await one_request(sh, std::move(*r));
}

}  // namespace

LoadResult run_load(workload::Workload& wl, const LoadOptions& opt) {
  LoadResult out;
  asio::io_context io;
  tcp::resolver resolver(io);
  boost::system::error_code ec;
  auto results = resolver.resolve(opt.target.host, std::to_string(opt.target.port), ec);
  if (ec || results.empty()) {
    // Every request fails to connect: record them as such.
    while (auto r = wl.next()) {
      workload::RequestRecord rec;
      rec.tenant = r->tenant;
      rec.status = 0;
      rec.arrival = r->arrival;
      out.records.push_back(rec);
    }
    return out;
  }
  Shared sh{opt, results.begin()->endpoint(), Clock::now(), out.records};
  // Progress on long runs: a line every progress_every_s from a thread that only reads counters.
  std::mutex progress_mu;
  std::condition_variable progress_cv;
  bool progress_stop = false;
  std::thread progress;
  if (opt.progress_every_s > 0)
    progress = std::thread([&] {
      std::unique_lock lock(progress_mu);
      const auto every = std::chrono::duration<double>(opt.progress_every_s);
      while (!progress_cv.wait_for(lock, every, [&] { return progress_stop; }))
        fmt::print(stderr, "bench: {:.0f} s: {} requests finished, {} ok\n",
                   std::chrono::duration<double>(Clock::now() - sh.start).count(), sh.finished.load(), sh.ok.load());
    });
  if (wl.arrivals().kind == workload::ArrivalKind::concurrency) {
    for (int i = 0; i < wl.arrivals().concurrency; ++i) asio::co_spawn(io, closed_loop_worker(sh, wl), asio::detached);
  } else {
    asio::co_spawn(io, open_loop(sh, wl), asio::detached);
  }
  io.run();
  if (progress.joinable()) {
    {
      std::lock_guard lock(progress_mu);
      progress_stop = true;
    }
    progress_cv.notify_one();
    progress.join();
  }
  out.wall_seconds = std::chrono::duration<double>(Clock::now() - sh.start).count();
  return out;
}

namespace {

asio::awaitable<void> get_once(HttpUrl target, Duration timeout, std::string api_key, std::string& body,
                               std::string& error) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  auto [rec, eps] = co_await resolver.async_resolve(target.host, std::to_string(target.port), tuple_awaitable);
  if (rec) {
    error = rec.message();
    co_return;
  }
  beast::tcp_stream stream(ex);
  stream.expires_after(timeout);
  auto [cec, ep] = co_await stream.async_connect(eps, tuple_awaitable);
  if (cec) {
    error = "connect: " + cec.message();
    co_return;
  }
  http::request<http::empty_body> req{http::verb::get, target.target.empty() ? "/" : target.target, 11};
  req.set(http::field::host, target.host);
  req.set(http::field::connection, "close");
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  auto [wec, wn] = co_await http::async_write(stream, req, tuple_awaitable);
  if (wec) {
    error = "write: " + wec.message();
    co_return;
  }
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64u << 20);
  auto [hec, hn] = co_await http::async_read(stream, buf, parser, tuple_awaitable);
  if (hec) {
    error = "read: " + hec.message();
    co_return;
  }
  if (parser.get().result_int() != 200) {
    error = "status " + std::to_string(parser.get().result_int());
    co_return;
  }
  body = std::move(parser.get().body());
}

}  // namespace

std::string http_get(const std::string& url, std::string& error, Duration timeout, const std::string& api_key) {
  auto t = parse_http_url(url, error);
  if (!t) return "";
  asio::io_context io;
  std::string body;
  asio::co_spawn(io, get_once(std::move(*t), timeout, api_key, body, error), asio::detached);
  io.run();
  return body;
}

}  // namespace sluice::bench
