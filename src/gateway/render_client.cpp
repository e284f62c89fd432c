#include "gateway/render_client.h"

#include <array>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/prom_writer.h"
#include "gateway/generation.h"

namespace sluice {

namespace http = boost::beast::http;
using namespace asio::experimental::awaitable_operators;

namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr uint32_t kMaxAnswerHead = 64u << 10;
constexpr uint64_t kMaxAnswerBody = 32u << 20;  // ~4M ids as JSON
constexpr size_t kMaxIds = size_t{1} << 22;
constexpr size_t kReadBuffer = 64u << 10;
constexpr auto kMissingRouteBackoff = std::chrono::seconds(30);
int64_t steady_ns(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

std::string_view to_string(RenderOutcome o) {
  switch (o) {
    case RenderOutcome::ok: return "ok";
    case RenderOutcome::cache_hit: return "cache_hit";
    case RenderOutcome::timeout: return "timeout";
    case RenderOutcome::error: return "error";
    case RenderOutcome::cancelled: return "cancelled";
    case RenderOutcome::estimate: break;
  }
  return "estimate";
}

std::string_view token_ids_source(RenderOutcome o) {
  switch (o) {
    case RenderOutcome::ok: return "render";
    case RenderOutcome::cache_hit: return "cache";
    default: return "estimate";
  }
}

RenderRuntime::RenderRuntime(const TokenIdsConfig& c)
    : config(c), cache(c.cache_entries, c.cache_tokens), latency(&overhead_buckets()) {}

asio::awaitable<RenderResult> render_token_ids(UpstreamPool& upstreams, PoolRuntime& pool, const RenderCall& call,
                                               asio::cancellation_slot client_left) {
  RenderRuntime& rt = *pool.render;
  RenderResult r;
  const auto counted = [&](RenderOutcome o) -> RenderResult& {
    r.outcome = o;
    rt.outcomes[static_cast<size_t>(o)].inc();
    return r;
  };
  const RenderKey key = render_key(call.model, call.adapter, call.body);
  if (auto hit = rt.cache.find(key)) {
    r.ids = std::move(hit);
    co_return counted(RenderOutcome::cache_hit);
  }

  if (steady_ns(SteadyClock::now()) < rt.missing_until_ns.load(std::memory_order_relaxed)) {
    r.error = "the engines serve no render route (404): not asked again yet";
    co_return counted(RenderOutcome::error);
  }

  // The next healthy endpoint in the rotation (any engine of the pool renders alike).
  const auto& eps = pool.config().endpoints;
  const size_t n = std::min(eps.size(), pool.router.size());
  size_t e = n;
  const uint64_t start = rt.cursor.fetch_add(1, std::memory_order_relaxed);
  for (size_t k = 0; k < n && e == n; ++k)
    if (pool.router.healthy((start + k) % n)) e = (start + k) % n;
  if (e == n) {
    r.error = "no healthy endpoint";
    co_return counted(RenderOutcome::error);
  }
  const EndpointConfig& ep = eps[e];
  r.endpoint = ep.name;

  const auto t0 = SteadyClock::now();
  const auto deadline = std::min(t0 + rt.config.timeout, call.total_deadline);
  const auto observe = [&] { rt.latency.observe(std::chrono::duration<double>(SteadyClock::now() - t0).count()); };
  auto acquired = co_await upstreams.acquire(pool, e, deadline);
  if (acquired.error) {
    observe();
    r.error = fmt::format("connect: {}", acquired.error.message());
    co_return counted(acquired.error == asio::error::timed_out ? RenderOutcome::timeout : RenderOutcome::error);
  }
  UpstreamLease lease = std::move(acquired.lease);
  tcp::socket& sock = lease.socket();
  if (call.client_gone && call.client_gone()) {  // left while we connected (the slot was not bound yet)
    lease.reusable();  // nothing was sent on it
    observe();
    r.error = "the client left";
    co_return counted(RenderOutcome::cancelled);
  }

  std::string head;
  head.reserve(384);
  const std::string_view route = call.kind == ApiKind::completion ? "/v1/completions/render" : "/v1/chat/completions/render";
  if (ep.host_header.empty())
    fmt::format_to(std::back_inserter(head), "POST {} HTTP/1.1\r\nHost: {}:{}\r\n", route, ep.address.host, ep.address.port);
  else
    fmt::format_to(std::back_inserter(head), "POST {} HTTP/1.1\r\nHost: {}\r\n", route, ep.host_header);
  head += "Content-Type: application/json\r\nAccept: application/json\r\n";
  if (!ep.authorization.empty()) fmt::format_to(std::back_inserter(head), "Authorization: {}\r\n", ep.authorization);
  else if (call.forward_client_auth && !call.authorization.empty())
    fmt::format_to(std::back_inserter(head), "Authorization: {}\r\n", call.authorization);
  fmt::format_to(std::back_inserter(head), "x-request-id: {}\r\nContent-Length: {}\r\n\r\n", call.request_id, call.body.size());

  // The client leaving closes the socket: the exchange below ends at once.
  bool client_gone = false, timed_out = false;
  if (client_left.is_connected())
    client_left.assign([&sock, &client_gone](asio::cancellation_type) {
      client_gone = true;
      boost::system::error_code ignored;
      sock.close(ignored);
    });
  boost::beast::flat_buffer buffer;
  // Beast reads max(512, capacity - size) bytes at a time: room for a long prompt's answer (~6 bytes
  // per id) in a few reads instead of hundreds.
  buffer.reserve(kReadBuffer);
  http::response_parser<http::string_body> parser;
  parser.header_limit(kMaxAnswerHead);
  parser.body_limit(kMaxAnswerBody);
  boost::system::error_code ec;
  auto exchange = [&]() -> asio::awaitable<void> {
    std::array<asio::const_buffer, 2> bufs{asio::buffer(head), asio::buffer(call.body)};
    auto [wec, wn] = co_await asio::async_write(sock, bufs, use_tuple);
    if (wec) {
      ec = wec;
      co_return;
    }
    auto [rec, rn] = co_await http::async_read(sock, buffer, parser, use_tuple);
    ec = rec;
  };
  // The deadline closes the socket itself rather than relying on the read's own cancellation.
  asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
  auto watchdog = [&]() -> asio::awaitable<void> {
    auto [tec] = co_await timer.async_wait(use_tuple);
    if (tec) co_return;  // the exchange ended first
    timed_out = true;
    boost::system::error_code ignored;
    sock.close(ignored);
  };
  co_await (exchange() || watchdog());
  if (client_left.is_connected()) client_left.clear();
  observe();
  if (client_gone) {
    r.error = "the client left";
    co_return counted(RenderOutcome::cancelled);
  }
  if (timed_out) {
    r.error = fmt::format("no answer within {} ms", std::chrono::duration_cast<std::chrono::milliseconds>(deadline - t0).count());
    co_return counted(RenderOutcome::timeout);
  }
  if (ec) {
    r.error = ec.message();
    co_return counted(RenderOutcome::error);
  }
  if (const int status = parser.get().result_int(); status != 200) {
    r.error = fmt::format("status {}", status);
    // A missing route (FastAPI's {"detail":"Not Found"}, or 405 / 501), not a missing model (an
    // OpenAI error body: one adapter not loaded must not stop the calls for the whole pool).
    const std::string_view answer = parser.get().body();
    if (status == 405 || status == 501 || (status == 404 && answer.find("\"detail\"") != std::string_view::npos &&
                                           answer.find("\"error\"") == std::string_view::npos)) {
      rt.missing_until_ns.store(steady_ns(SteadyClock::now() + kMissingRouteBackoff), std::memory_order_relaxed);
      spdlog::warn("pool {}: {} answered {} to its render route: token ids estimated for {} s", pool.config().name,
                   ep.name, status, kMissingRouteBackoff.count());
    }
    if (parser.keep_alive() && buffer.size() == 0) lease.reusable();
    co_return counted(RenderOutcome::error);
  }
  if (parser.keep_alive() && buffer.size() == 0) lease.reusable();
  RenderAnswer a = parse_render_answer(parser.get().body(), call.kind == ApiKind::completion, kMaxIds);
  if (!a.ids) {
    r.error = "unreadable answer: " + a.error;
    spdlog::debug("request {}: render answer of {} refused: {}", call.request_id, ep.name, a.error);
    co_return counted(RenderOutcome::error);
  }
  rt.cache.insert(key, a.ids);
  r.ids = std::move(a.ids);
  co_return counted(RenderOutcome::ok);
}

void append_render_metrics(std::string& out, const std::map<std::string, std::shared_ptr<PoolRuntime>, std::less<>>& pools) {
  bool any = false;
  for (const auto& [name, pool] : pools) any = any || pool->render;
  if (!any) return;
  PromWriter w(out);
  w.family("sluice_render_requests_total", "counter",
           "Token-id lookups through the engine's render route, by outcome (cache_hit: answered by the cache).");
  for (const auto& [name, pool] : pools) {
    if (!pool->render) continue;
    for (size_t o = 0; o < kRenderOutcomes; ++o)
      w.sample("sluice_render_requests_total", {{"pool", name}, {"outcome", to_string(static_cast<RenderOutcome>(o))}},
               pool->render->outcomes[o].value());
  }
  w.family("sluice_render_duration_seconds", "histogram", "Time of the render calls to the engine (cache hits excluded).");
  for (const auto& [name, pool] : pools) {
    if (!pool->render) continue;
    std::string labels;
    append_prom_labels(labels, {{"pool", name}});
    w.histogram("sluice_render_duration_seconds", labels, pool->render->latency.snapshot());
  }
  w.family("sluice_render_cache_hit_ratio", "gauge", "Share of render lookups answered by the cache, since start.");
  for (const auto& [name, pool] : pools) {
    if (!pool->render) continue;
    double total = 0;
    for (const auto& c : pool->render->outcomes) total += c.value();
    const double hits = pool->render->outcomes[static_cast<size_t>(RenderOutcome::cache_hit)].value();
    w.sample("sluice_render_cache_hit_ratio", {{"pool", name}}, total > 0 ? hits / total : 0.0);
  }
  w.family("sluice_render_cache_entries", "gauge", "Answers held by the render cache.");
  for (const auto& [name, pool] : pools)
    if (pool->render) w.sample("sluice_render_cache_entries", {{"pool", name}}, double(pool->render->cache.entries()));
  w.family("sluice_render_cache_tokens", "gauge", "Token ids held by the render cache (4 bytes each).");
  for (const auto& [name, pool] : pools)
    if (pool->render) w.sample("sluice_render_cache_tokens", {{"pool", name}}, double(pool->render->cache.tokens()));
}

}  // namespace sluice
