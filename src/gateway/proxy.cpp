#include "gateway/proxy.h"
#include "gateway/pick_request.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "core/picker/pool_router.h"
#include "core/openai/response_fields.h"
#include "core/openai/sse.h"
#include "gateway/gateway.h"
#include "gateway/http/http_util.h"
#include "gateway/http/retry_after.h"
#include "gateway/http/session.h"
#include "gateway/http/upstream_pool.h"

namespace sluice {

namespace http = boost::beast::http;
namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxBufferedBody = 64u << 20;    // a non-streaming response larger than this is a 502
constexpr size_t kRelayChunk = 16u << 10;
constexpr int kClientClosedStatus = 499;          // nginx's convention, for logs and metrics

bool iequals(std::string_view a, std::string_view b) { return boost::beast::iequals(a, b); }

std::string tenant_of(const DownstreamRequest& req, const RequestModel& m) {
  auto h = req["x-gateway-inference-fairness-id"];
  if (!h.empty()) return std::string(h);
  if (!m.user.empty()) return m.user;
  return "-";
}

asio::awaitable<void> admit_into(AdmissionRuntime& admission, AdmitRequest req, AdmitResult& out) {
  out = co_await admission.admit(req);
}

// The usage-only chunk a stream ends with when stream_options.include_usage is set.
bool is_usage_only_chunk(const SseEvent& ev) {
  return ev.has_data && ev.data.find("\"choices\":[]") != std::string_view::npos && find_usage(ev.data).has_value();
}

class RequestLife {
 public:
  RequestLife(Session& s, ApiKind kind, DownstreamRequest& req, bool keep_alive)
      : s_(s), gw_(s.gateway()), gen_(gw_.current()), tmo_(gen_->config->timeouts), kind_(kind), req_(req), keep_alive_(keep_alive),
        start_(SteadyClock::now()), total_deadline_(start_ + tmo_.total) {}

  asio::awaitable<bool> run();

 private:
  asio::awaitable<void> forward_and_relay(std::vector<Candidate> candidates);
  asio::awaitable<bool> forward(const std::vector<Candidate>& candidates);
  asio::awaitable<boost::system::error_code> send_and_read_head();
  asio::awaitable<void> relay_buffered();
  asio::awaitable<void> relay_stream();
  asio::awaitable<bool> read_upstream(char* data, size_t size, size_t& got, boost::system::error_code& ec);
  asio::awaitable<bool> write_client(std::string_view a, std::string_view b = {}, std::string_view c = {});
  asio::awaitable<bool> reject(const ApiError& e, std::string_view reason, const ResponseHeaders& extra = {});
  // Failures are recorded, then answered by one coroutine at the top level (respond_failure):
  // an error response before any byte was sent, or an error event that ends a started stream.
  struct Failure {
    Outcome outcome = Outcome::upstream_error;
    ApiError error;
    std::string reason;
    bool mid_stream = false;
    std::string partial_event;  // unsent bytes of an incomplete event (rewriting mode)
    bool partial_pending = false;
  };
  void fail(Outcome o, ApiError e, std::string reason);
  void fail_upstream(boost::system::error_code ec, bool mid_stream);
  // Passive outlier detection: the attempt on the current endpoint ended this way.
  void report_attempt(AttemptResult r);
  // A retry on candidate `next` is allowed: it exists, the per-request count and the pool budget allow it.
  bool may_retry(size_t next, size_t candidates);
  asio::awaitable<void> respond_failure();
  void on_event(const SseEvent& ev, SteadyClock::time_point now);
  void take_usage(const Usage& u);
  std::string response_head_from_upstream(bool chunked, size_t content_length);
  void finish(Outcome o, int status, std::string_view reason = {});

  Session& s_;
  Gateway& gw_;
  const std::shared_ptr<const Generation> gen_;  // this request's config generation, to its end
  const Timeouts& tmo_;
  ApiKind kind_;
  DownstreamRequest& req_;
  bool keep_alive_;
  SteadyClock::time_point start_, total_deadline_;
  RequestRecord rec_;
  std::optional<RequestModel> model_;
  const ModelRoute* route_ = nullptr;
  PoolRuntime* pool_ = nullptr;
  PoolRouter* router_ = nullptr;
  PoolHealth* health_ = nullptr;
  PickRequest pick_;
  int64_t predicted_cached_ = 0;  // the chosen candidate's predicted cached prompt tokens
  DispatchGuard guard_;
  std::unique_ptr<AdmissionTicket> ticket_;
  bool strip_usage_ = false;  // include_usage was injected: drop the usage-only chunk
  std::string rewritten_body_;
  std::string_view body_;
  UpstreamLease lease_;
  boost::beast::flat_buffer up_buffer_;
  std::optional<http::response_parser<http::buffer_body>> up_parser_;
  std::optional<ModelRewriter> response_rewriter_;  // alias: target -> the name the client used
  Histogram* itl_ = nullptr;
  SteadyClock::time_point last_token_{};
  std::optional<Failure> failure_;
  bool finished_ = false;
  bool broken_ = false;  // the client connection cannot carry another response
};

// ============================ the life of one request ============================
asio::awaitable<bool> RequestLife::run() {
  auto rid = req_["x-request-id"];
  rec_.id = rid.empty() || rid.size() > 128 ? new_request_id() : std::string(rid);
  rec_.path = std::string(req_.target());

  // ---- parse: once, with simdjson ----
  auto parsed = parse_request(kind_, req_.body());
  if (!parsed.ok()) co_return co_await reject(parsed.error, "bad_request");
  model_ = std::move(parsed.request);
  rec_.model = model_->model;
  rec_.stream = model_->stream;
  rec_.tenant = tenant_of(req_, *model_);
  route_ = gen_->config->find_model(model_->model);

  // ---- authenticate + admit: the admission layer's hook ----
  if (gen_->admission && route_) {
    AdmitResult admitted;  // the wait in the admission queue watches the client (a disconnect leaves it)
    co_await s_.while_watching_client(admit_into(
        *gen_->admission, AdmitRequest{*model_, *route_, rec_.tenant, req_.base(), [this] { return s_.client_gone(); }}, admitted));
    rec_.pool = route_->pool;
    if (admitted.client_left) {
      finish(Outcome::client_cancelled, kClientClosedStatus, "cancelled_queued");
      co_return false;
    }
    if (admitted.denial) {
      ResponseHeaders extra;
      for (auto& [k, v] : admitted.denial->headers()) extra.emplace_back(std::string(k), std::move(v));
      for (auto& [k, v] : admitted.headers) extra.emplace_back(std::string(k), std::move(v));
      co_return co_await reject(admitted.denial->error, to_string(admitted.denial->reason), extra);
    }
    ticket_ = std::move(admitted.ticket);
    if (ticket_ && !ticket_->tenant().empty()) rec_.tenant = std::string(ticket_->tenant());
  }

  // ---- resolve the model: alias, adapter, pool ----
  if (!route_)
    co_return co_await reject(api_error(404, fmt::format("The model `{}` does not exist.", model_->model),
                                        "invalid_request_error", "model", "model_not_found"), "unknown_model");
  rec_.pool = route_->pool;
  pool_ = gen_->pool(route_->pool);
  router_ = &pool_->router;
  const bool embedding_pool = router_->config().kind == PoolKind::embedding;
  if (embedding_pool != (kind_ == ApiKind::embedding))
    co_return co_await reject(api_error(400, fmt::format("The model `{}` does not support {}.", model_->model,
                                                         kind_ == ApiKind::embedding ? "embeddings" : "completions"),
                                        "invalid_request_error", "model", "model_not_supported"), "wrong_api");
  itl_ = pool_->series.itl;

  // ---- pick: every healthy endpoint, best first ----
  pick_ = make_pick_request(kind_, *route_, *model_);
  health_ = &pool_->health;
  health_->refresh(gw_.now());
  health_->on_request(gw_.now());
  const auto pick_started = SteadyClock::now();
  auto candidates = router_->rank(pick_, gw_.now());
  pool_->series.pick->observe(std::chrono::duration<double>(SteadyClock::now() - pick_started).count());
  if (candidates.empty()) {
    // Our own Retry-After is jittered, so clients told to come back do not return all at once.
    thread_local AdmissionRng rng{std::random_device{}()};
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(jittered(std::chrono::seconds(1), rng));
    const ResponseHeaders retry{{"retry-after", std::to_string((wait.count() + 999) / 1000)},
                                {"retry-after-ms", std::to_string(wait.count())}};
    co_return co_await reject(api_error(503, fmt::format("No healthy endpoint serves `{}` right now.", model_->model),
                                        "server_error", {}, "no_endpoint"), "no_endpoint", retry);
  }

  // ---- forward + relay, watching the client for a disconnect ----
  // Admission: enforce the reserved output bound upstream; ask a stream for its usage (to settle
  // the reservation) and strip that chunk again when the client did not ask for it.
  const bool generating = kind_ != ApiKind::embedding;
  const std::optional<int64_t> inject_max = ticket_ && generating ? ticket_->inject_max_tokens() : std::nullopt;
  strip_usage_ = ticket_ && generating && model_->stream && !model_->include_usage;
  if (route_->is_alias() || inject_max || strip_usage_) {
    BodyRewrite rw{.model = std::nullopt, .inject_max_tokens = inject_max, .inject_include_usage = strip_usage_};
    if (route_->is_alias()) rw.model = route_->target;
    rewritten_body_ = rewrite_body(req_.body(), *model_, rw);
    body_ = rewritten_body_;
    if (route_->is_alias()) response_rewriter_.emplace(route_->target, route_->name);
  } else {
    body_ = req_.body();
  }
  co_await s_.while_watching_client(forward_and_relay(std::move(candidates)));
  if (!finished_) finish(s_.client_gone() ? Outcome::client_cancelled : Outcome::upstream_error,
                         s_.client_gone() ? kClientClosedStatus : 502, "internal");
  co_return keep_alive_ && !broken_ && !s_.client_gone();
}

asio::awaitable<void> RequestLife::forward_and_relay(std::vector<Candidate> candidates) {
  if (co_await forward(candidates)) {
    const auto ct = up_parser_->get()[http::field::content_type];
    if (ct.size() >= 17 && iequals(ct.substr(0, 17), "text/event-stream")) co_await relay_stream();
    else co_await relay_buffered();
  }
  if (failure_) co_await respond_failure();
}

// ---- forward: lease a connection to the best candidate, send, read the response head ----
// Nothing has reached the client yet, so a connect failure, a reset before the response head, or a
// 502/503 head is retried on the next-ranked candidate (at most retry.max_retries times, within the
// pool's retry budget). An upstream Retry-After up to retry.max_retry_after is waited out first; a
// longer one passes the response on. A timeout is not retried (the engine may still be working).
asio::awaitable<bool> RequestLife::forward(const std::vector<Candidate>& candidates) {
  boost::system::error_code last_error;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const auto& cand = candidates[i];
    rec_.attempts = static_cast<int>(i) + 1;
    rec_.endpoint = router_->config().endpoints[cand.endpoint].name;
    predicted_cached_ = cand.predicted_cached_tokens;
    guard_ = router_->dispatch(pick_, cand, gw_.now());
    if (ticket_) ticket_->on_dispatched();
    bool retry = false;
    for (bool fresh_retry = false;;) {
      auto acquired = co_await s_.upstream_pool().acquire(
          *pool_, cand.endpoint, std::min(SteadyClock::now() + tmo_.connect, total_deadline_));
      if (s_.client_gone()) {
        finish(Outcome::client_cancelled, kClientClosedStatus, "client_closed");
        co_return false;
      }
      if (acquired.error) {
        last_error = acquired.error;
        spdlog::debug("request {}: connect to {} failed: {}", rec_.id, rec_.endpoint, last_error.message());
        report_attempt(last_error == asio::error::timed_out ? AttemptResult::timeout : AttemptResult::connect_error);
        retry = may_retry(i + 1, candidates.size());
        break;
      }
      lease_ = std::move(acquired.lease);
      s_.set_upstream(&lease_.socket());
      auto ec = co_await send_and_read_head();
      if (!ec) {
        const int status = rec_.status;
        report_attempt(attempt_result_of_status(status));
        if (status != 502 && status != 503) co_return true;
        const auto wait = upstream_retry_after(up_parser_->get());
        if ((wait && *wait > router_->config().retry.max_retry_after) || !may_retry(i + 1, candidates.size()))
          co_return true;  // pass the upstream's answer on
        spdlog::debug("request {}: {} answered {}, retrying", rec_.id, rec_.endpoint, status);
        s_.set_upstream(nullptr);
        lease_ = {};
        if (wait && *wait > Duration::zero()) {
          asio::steady_timer timer(co_await asio::this_coro::executor);
          timer.expires_at(std::min(SteadyClock::now() + *wait, total_deadline_));
          co_await timer.async_wait(use_tuple);
          if (s_.client_gone()) {
            finish(Outcome::client_cancelled, kClientClosedStatus, "client_closed");
            co_return false;
          }
        }
        retry = true;
        break;
      }
      s_.set_upstream(nullptr);
      const bool nothing_received = up_buffer_.size() == 0;
      const bool reset = ec == asio::error::eof || ec == http::error::end_of_stream ||
                         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
      const bool clean = !s_.client_gone() && s_.watchdog().expired() == Phase::none;
      if (lease_.reused() && nothing_received && !fresh_retry && clean && reset) {
        fresh_retry = true;  // a kept-alive connection the server had closed: once more, on a new one
        lease_ = {};
        continue;
      }
      if (reset && clean && may_retry(i + 1, candidates.size())) {
        spdlog::debug("request {}: {} reset before answering ({}), retrying", rec_.id, rec_.endpoint, ec.message());
        report_attempt(AttemptResult::server_error);
        lease_ = {};
        last_error = ec;
        retry = true;
        break;
      }
      fail_upstream(ec, false);  // counts the attempt
      co_return false;
    }
    if (!retry) break;
  }
  guard_.release();
  if (last_error == asio::error::timed_out)
    fail(Outcome::timeout, api_error(504, "Timed out connecting to the model server.", "server_error", {}, "upstream_connect_timeout"),
         "connect_timeout");
  else
    fail(Outcome::upstream_error,
         api_error(502, fmt::format("Could not connect to a model server ({}).", last_error.message()), "server_error", {},
                   "upstream_connect_error"),
         "connect_error");
  co_return false;
}

bool RequestLife::may_retry(size_t next, size_t candidates) {
  if (next >= candidates || static_cast<int>(next) > router_->config().retry.max_retries) return false;
  if (s_.client_gone() || SteadyClock::now() >= total_deadline_) return false;
  if (health_ && !health_->try_retry(gw_.now())) {
    spdlog::debug("request {}: retry budget of pool {} exhausted", rec_.id, router_->config().name);
    return false;
  }
  return true;
}

void RequestLife::report_attempt(AttemptResult r) {
  if (health_ && guard_) health_->on_attempt(guard_.endpoint(), r, gw_.now());
}

asio::awaitable<boost::system::error_code> RequestLife::send_and_read_head() {
  const auto& ep = router_->config().endpoints[guard_.endpoint()];
  std::string head;
  head.reserve(512);
  fmt::format_to(std::back_inserter(head), "POST {} HTTP/1.1\r\nHost: {}:{}\r\n", std::string_view(req_.target()),
                 ep.address.host, ep.address.port);
  bool has_content_type = false;
  for (const auto& f : req_.base()) {
    const std::string_view name = f.name_string();
    if (is_hop_by_hop(name)) continue;
    // With admission on, the bearer key is the gateway's (never forwarded) and the priority header its own.
    if (ticket_ && (f.name() == http::field::authorization || iequals(name, "x-sluice-priority"))) continue;
    has_content_type |= f.name() == http::field::content_type;
    head.append(name).append(": ").append(f.value()).append("\r\n");
  }
  if (!has_content_type) head += "Content-Type: application/json\r\n";
  fmt::format_to(std::back_inserter(head), "x-request-id: {}\r\nContent-Length: {}\r\n\r\n", rec_.id, body_.size());

  s_.watchdog().arm_capped(tmo_.first_byte, Phase::first_byte, total_deadline_, Phase::total);
  std::array<asio::const_buffer, 2> bufs{asio::buffer(head), asio::buffer(body_)};
  auto [wec, wn] = co_await asio::async_write(lease_.socket(), bufs, use_tuple);
  if (wec) co_return wec;
  up_buffer_.clear();
  up_parser_.emplace();
  up_parser_->header_limit(64u << 10);
  up_parser_->body_limit(boost::none);
  auto [ec, n] = co_await http::async_read_header(lease_.socket(), up_buffer_, *up_parser_, use_tuple);
  if (!ec) rec_.status = up_parser_->get().result_int();
  co_return ec;
}

// One read of upstream body bytes (any amount) under the idle-gap / total deadline.
asio::awaitable<bool> RequestLife::read_upstream(char* data, size_t size, size_t& got, boost::system::error_code& ec) {
  got = 0;
  while (got == 0 && !up_parser_->is_done()) {
    auto& body = up_parser_->get().body();
    body.data = data;
    body.size = size;
    s_.watchdog().arm_capped(tmo_.idle_gap, Phase::stream_gap, total_deadline_, Phase::total);
    auto [e, n] = co_await http::async_read_some(lease_.socket(), up_buffer_, *up_parser_, use_tuple);
    if (e == http::error::need_buffer) e = {};
    got = size - body.size;
    if (e) {
      ec = e;
      co_return false;
    }
  }
  co_return true;
}

asio::awaitable<bool> RequestLife::write_client(std::string_view a, std::string_view b, std::string_view c) {
  s_.watchdog().arm_capped(tmo_.idle_gap, Phase::client_write, total_deadline_, Phase::total);
  co_return co_await s_.write(a, b, c);
}

std::string RequestLife::response_head_from_upstream(bool chunked, size_t content_length) {
  const auto& res = up_parser_->get();
  std::string head;
  head.reserve(384);
  auto reason = res.reason();
  fmt::format_to(std::back_inserter(head), "HTTP/1.1 {} {}\r\n", res.result_int(), std::string_view(reason.data(), reason.size()));
  for (const auto& f : res.base()) {
    const std::string_view name = f.name_string();
    if (is_hop_by_hop(name)) continue;
    head.append(name).append(": ").append(f.value()).append("\r\n");
  }
  head.append("x-request-id: ").append(rec_.id).append("\r\n");
  if (const HeaderList* extra = ticket_ ? ticket_->response_headers() : nullptr)
    for (const auto& [k, v] : *extra) head.append(k).append(": ").append(v).append("\r\n");
  if (gen_->config->expose_routing_headers)
    head += fmt::format("x-sluice-endpoint: {}\r\nx-sluice-predicted-cached-tokens: {}\r\n", rec_.endpoint,
                        predicted_cached_);
  if (chunked) head += "Transfer-Encoding: chunked\r\n";
  else fmt::format_to(std::back_inserter(head), "Content-Length: {}\r\n", content_length);
  if (!keep_alive_) head += "Connection: close\r\n";
  head += "\r\n";
  return head;
}

// ---- relay a whole (non-streaming) body: read it, rewrite the model for an alias, send ----
asio::awaitable<void> RequestLife::relay_buffered() {
  // Read straight into the body: sized by Content-Length when known, else grown a chunk at a time.
  std::string body;
  size_t used = 0;
  const size_t step = std::min<uint64_t>(up_parser_->content_length().value_or(kRelayChunk), kMaxBufferedBody) + 1;
  while (!up_parser_->is_done()) {
    if (body.size() - used < 512) body.resize(used + std::max<size_t>(step, kRelayChunk / 4));
    size_t got = 0;
    boost::system::error_code ec;
    if (!co_await read_upstream(body.data() + used, body.size() - used, got, ec)) {
      fail_upstream(ec, false);
      co_return;
    }
    used += got;
    if (used > kMaxBufferedBody) {
      fail(Outcome::upstream_error, api_error(502, "The model server's response is too large.", "server_error"),
           "response_too_large");
      co_return;
    }
  }
  body.resize(used);
  s_.set_upstream(nullptr);
  if (up_parser_->keep_alive() && up_buffer_.size() == 0) lease_.reusable();
  lease_ = {};  // back to the pool before we write downstream

  std::string rewritten;
  std::string_view out = body;
  if (response_rewriter_ && response_rewriter_->append(body, rewritten)) out = rewritten;
  if (auto u = find_usage(body)) take_usage(*u);
  guard_.on_first_token();
  if (rec_.completion_tokens > 0) guard_.on_tokens(rec_.completion_tokens);
  if (ticket_ && rec_.completion_tokens > 0) ticket_->on_output(rec_.completion_tokens);
  const int status = up_parser_->get().result_int();
  if (!co_await write_client(response_head_from_upstream(false, out.size()), out)) {
    finish(Outcome::client_cancelled, kClientClosedStatus, "client_closed");
    co_return;
  }
  finish(status < 400 ? Outcome::ok : Outcome::upstream_error, status, status < 400 ? "" : "upstream_status");
}

// ---- relay an SSE stream: every read is written downstream at once, as one HTTP chunk ----
asio::awaitable<void> RequestLife::relay_stream() {
  if (!co_await write_client(response_head_from_upstream(true, 0))) {
    finish(Outcome::client_cancelled, kClientClosedStatus, "client_closed");
    co_return;
  }
  SseParser sse;
  std::string chunk(kRelayChunk, '\0');
  std::string out;
  bool rewriting = response_rewriter_.has_value() || strip_usage_;
  while (!up_parser_->is_done()) {
    size_t got = 0;
    boost::system::error_code ec;
    if (!co_await read_upstream(chunk.data(), chunk.size(), got, ec)) {
      fail_upstream(ec, true);
      failure_->partial_pending = !sse.pending().empty();
      if (rewriting) failure_->partial_event = std::string(sse.pending());
      co_return;
    }
    const auto now = SteadyClock::now();
    const std::string_view bytes(chunk.data(), got);
    sse.append(bytes);
    out.clear();
    SseEvent ev;
    while (sse.next(ev)) {
      on_event(ev, now);
      if (!rewriting || (strip_usage_ && is_usage_only_chunk(ev))) continue;
      if (response_rewriter_) response_rewriter_->append(ev.raw, out);
      else out.append(ev.raw);
    }
    if (rewriting && sse.failed()) {  // an event too large to hold: relay the rest untouched
      out.append(sse.pending());
      rewriting = false;
    }
    const std::string_view send = rewriting ? std::string_view(out) : bytes;
    if (send.empty()) continue;
    if (!co_await write_client(fmt::format("{:x}\r\n", send.size()), send, "\r\n")) {
      rec_.cancelled_while_streaming = true;
      finish(Outcome::client_cancelled, kClientClosedStatus, "client_closed");
      co_return;
    }
  }
  s_.set_upstream(nullptr);
  if (up_parser_->keep_alive() && up_buffer_.size() == 0) lease_.reusable();
  lease_ = {};
  std::string tail;
  if (rewriting && !sse.pending().empty()) tail = fmt::format("{:x}\r\n{}\r\n", sse.pending().size(), sse.pending());
  tail += "0\r\n\r\n";
  if (!co_await write_client(tail)) {
    rec_.cancelled_while_streaming = true;
    finish(Outcome::client_cancelled, kClientClosedStatus, "client_closed");
    co_return;
  }
  const int status = up_parser_->get().result_int();
  finish(status < 400 ? Outcome::ok : Outcome::upstream_error, status, status < 400 ? "" : "upstream_status");
}

void RequestLife::on_event(const SseEvent& ev, SteadyClock::time_point now) {
  if (!ev.has_data || ev.data == "[DONE]") return;
  if (carries_tokens(ev.data)) {
    ++rec_.token_events;
    if (!rec_.ttft) {
      rec_.ttft = now - start_;
      guard_.on_first_token();
    } else {
      const auto gap = now - last_token_;
      rec_.max_gap = std::max<Duration>(rec_.max_gap, gap);
      itl_->observe(to_seconds(gap));
    }
    last_token_ = now;
    guard_.on_tokens(1);
    if (ticket_) ticket_->on_output(1);
  }
  if (auto u = find_usage(ev.data)) take_usage(*u);
}

void RequestLife::take_usage(const Usage& u) {
  rec_.prompt_tokens = u.prompt_tokens;
  rec_.completion_tokens = u.completion_tokens;
  rec_.cached_tokens = u.cached_tokens;
}

void RequestLife::fail(Outcome o, ApiError e, std::string reason) {
  if (failure_) return;
  failure_.emplace();
  failure_->outcome = o;
  failure_->error = std::move(e);
  failure_->reason = std::move(reason);
}

// Classifies a failed upstream operation: the client left, a deadline passed, or the upstream broke.
void RequestLife::fail_upstream(boost::system::error_code ec, bool mid_stream) {
  const Phase expired = s_.watchdog().expired();
  if (!s_.client_gone() && expired != Phase::total)
    report_attempt(expired == Phase::first_byte || expired == Phase::stream_gap ? AttemptResult::timeout
                                                                                 : AttemptResult::server_error);
  if (s_.client_gone()) {
    fail(Outcome::client_cancelled, {}, "client_closed");
  } else if (expired == Phase::first_byte) {
    fail(Outcome::timeout, api_error(504, "The model server did not start responding in time.", "server_error", {}, "upstream_timeout"),
         "first_byte_timeout");
  } else if (expired == Phase::stream_gap) {
    fail(Outcome::timeout,
         api_error(504, "The model server stopped sending in the middle of the response.", "server_error", {}, "upstream_timeout"),
         "idle_timeout");
  } else if (expired == Phase::total) {
    fail(Outcome::timeout,
         api_error(504, "The request took longer than the gateway's total timeout.", "server_error", {}, "upstream_timeout"),
         "total_timeout");
  } else {
    fail(Outcome::upstream_error, api_error(502, fmt::format("The model server failed: {}.", ec.message()), "server_error", {}, "upstream_error"),
         "upstream_io");
  }
  failure_->mid_stream = mid_stream;
}

asio::awaitable<void> RequestLife::respond_failure() {
  s_.set_upstream(nullptr);
  lease_ = {};  // a failed exchange never goes back to the pool: closed
  Failure& f = *failure_;
  if (f.outcome == Outcome::client_cancelled) {
    rec_.cancelled_while_streaming = f.mid_stream;
    finish(f.outcome, kClientClosedStatus, f.reason);
    co_return;
  }
  if (!f.mid_stream) {
    const std::string response = error_response(f.error, keep_alive_);
    if (!co_await write_client(response)) broken_ = true;
    finish(f.outcome, f.error.status, f.reason);
    co_return;
  }
  // The head is sent: end the stream with an error event and [DONE], after closing a partial event.
  std::string events = f.partial_event;
  if (f.partial_pending) events += "\n\n";
  events += stream_error_events(f.error);
  const std::string tail = fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", events.size(), events);
  if (!co_await write_client(tail)) broken_ = true;
  finish(f.outcome, rec_.status, f.reason);
}

asio::awaitable<bool> RequestLife::reject(const ApiError& e, std::string_view reason, const ResponseHeaders& extra) {
  ResponseHeaders headers = extra;
  headers.emplace_back("x-request-id", rec_.id);
  if (const HeaderList* more = ticket_ ? ticket_->response_headers() : nullptr)
    for (const auto& [k, v] : *more) headers.emplace_back(std::string(k), v);
  const bool ok = co_await write_client(error_response(e, keep_alive_, headers));
  finish(Outcome::rejected, e.status, reason);
  co_return ok && keep_alive_;
}

// The one completion path: every request passes here exactly once, however it ended.
void RequestLife::finish(Outcome o, int status, std::string_view reason) {
  if (finished_) return;
  finished_ = true;
  rec_.outcome = o;
  rec_.status = status;
  rec_.reason = std::string(reason);
  rec_.duration = SteadyClock::now() - start_;
  guard_.release();  // before the ticket: its release lets the admission dispatcher fill the slot
  // A cut or failed request is charged what was delivered (usage -1), not the engine's report.
  const bool completed = o == Outcome::ok;
  if (ticket_) ticket_->settle(completed ? rec_.prompt_tokens : -1, completed ? rec_.completion_tokens : -1);
  ticket_.reset();
  s_.set_upstream(nullptr);
  s_.watchdog().disarm();
  gw_.complete(rec_, *gen_);
}

}  // namespace

asio::awaitable<bool> proxy_request(Session& session, ApiKind kind, DownstreamRequest& request, bool keep_alive) {
  RequestLife life(session, kind, request, keep_alive);
  co_return co_await life.run();
}

}  // namespace sluice
