#include "gateway/proxy.h"

#include <charconv>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/admission/tenants.h"
#include "core/openai/models_list.h"
#include "core/openai/response_fields.h"
#include "core/openai/sse.h"
#include "core/picker/pool_router.h"
#include "core/picker/shed_refusal.h"
#include "gateway/gateway.h"
#include "gateway/http/http_util.h"
#include "gateway/http/retry_after.h"
#include "gateway/http/upstream_exchange.h"
#include "gateway/pick_request.h"
#include "gateway/render_client.h"
#include "gateway/stream_tokens.h"

namespace sluice {

namespace http = boost::beast::http;
using namespace std::string_view_literals;

namespace {
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr size_t kMaxBufferedBody = 64u << 20;  // a non-streaming response larger than this is a 502
constexpr size_t kRelayChunk = 16u << 10;
constexpr int kClientClosedStatus = 499;        // nginx's convention, for logs and metrics
constexpr size_t kMaxEchoedModel = 256;         // a client-chosen name echoed in an error, at most

bool iequals(std::string_view a, std::string_view b) { return boost::beast::iequals(a, b); }

void append_header(std::string& out, std::string_view name, std::string_view value) {
  out.append(name).append(": ", 2).append(value).append("\r\n", 2);
}

std::string tenant_of(const DownstreamRequest& req, const RequestModel& m) {
  auto h = req["x-gateway-inference-fairness-id"];
  if (!h.empty()) return std::string(h);  // the access log truncates client-chosen values
  if (!m.user.empty()) return m.user;
  return "-";
}


// The usage-only chunk a stream ends with when stream_options.include_usage is set.
bool is_usage_only_chunk(const SseEvent& ev) {
  return ev.has_data && ev.data.find("\"choices\":[]") != std::string_view::npos && find_usage(ev.data).has_value();
}

// What a pool of the wrong kind does not support, in the error message.
std::string_view api_name(ApiKind k) {
  switch (k) {
    case ApiKind::embedding: return "embeddings";
    case ApiKind::response: return "the Responses API";
    case ApiKind::rerank: return "rerank";
    case ApiKind::score: return "score";
    default: return "completions";
  }
}

bool is_reset(boost::system::error_code ec) {
  return ec == asio::error::eof || ec == http::error::end_of_stream || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe;
}

// What one attempt on one candidate leads to: the retry decision is a value, not a set of flags.
struct Attempt {
  enum class Next {
    relay,             // a final response head to pass on: relay its body
    fresh_connection,  // a kept-alive connection the server had closed: once more, on a new one
    next_candidate,    // retry on the next-ranked candidate (after `wait`)
    stop,              // the request ends here (failure_ or the client left)
  };
  Next next = Next::stop;
  Duration wait{0};  // an upstream Retry-After to wait out first
};

class RequestLife {
 public:
  RequestLife(const RequestContext& ctx, ApiKind kind, DownstreamRequest& req, bool keep_alive)
      : gw_(ctx.gateway), upstreams_(ctx.upstreams), down_(ctx.downstream), gen_(gw_.current()),
        tmo_(gen_->config->timeouts), kind_(kind), req_(req), keep_alive_(keep_alive), client_(ctx.client),
        start_(ctx.read_at),
        total_deadline_(start_ + tmo_.total) {
    if (ctx.read_body.count() > 0) gw_.metrics().overhead(OverheadPhase::read_body).observe(to_seconds(ctx.read_body));
  }

  asio::awaitable<bool> run();

 private:
  asio::awaitable<void> render_token_ids();
  asio::awaitable<void> forward_and_relay(std::vector<Candidate> candidates);
  asio::awaitable<bool> forward(const std::vector<Candidate>& candidates);
  asio::awaitable<Attempt> attempt(size_t i, std::span<const Candidate> candidates, bool fresh);
  std::string upstream_head() const;
  asio::awaitable<void> relay_buffered();
  asio::awaitable<void> relay_stream();
  // now: the caller's clock reading, if it has one (the write's deadline counts from it).
  asio::awaitable<bool> write_client(std::string_view a, std::string_view b = {}, std::string_view c = {},
                                     SteadyClock::time_point now = SteadyClock::now());
  asio::awaitable<bool> reject(const ApiError& e, Reason reason, const ResponseHeaders& extra = {});
  // Failures are recorded, then answered once at the top level (respond_failure): an error
  // response before any byte was sent, or an error event that ends a started stream.
  struct Failure {
    Outcome outcome = Outcome::upstream_error;
    ApiError error;
    Reason reason = Reason::internal;
    bool mid_stream = false;
    std::string partial_event;  // unsent bytes of an incomplete event (rewriting mode)
    bool partial_pending = false;
  };
  void fail(Outcome o, ApiError e, Reason reason);
  void fail_upstream(boost::system::error_code ec, bool mid_stream);
  // Passive outlier detection: the attempt on the current endpoint ended this way.
  void report_attempt(AttemptResult r, std::optional<Time> at = std::nullopt);
  // A retry on candidate `next` is allowed: it exists, the per-request count and the pool budget allow
  // it, and one of the candidates from it on is below the in-flight cap.
  bool may_retry(size_t next, std::span<const Candidate> candidates);
  asio::awaitable<void> respond_failure();
  void on_event(const SseEvent& ev, SteadyClock::time_point now);
  void end_engine_answer();
  void release_endpoint();
  void client_write_failed();
  void flush_tokens() { tokens_.flush(guard_, ticket_.get()); }
  void learn_response(std::string_view json);
  std::string response_head_from_upstream(bool chunked, size_t content_length);
  // Records a phase that began at `since`; returns its end (the next phase's start: one clock read).
  SteadyClock::time_point observe(OverheadPhase p, SteadyClock::time_point since) {
    return observe(p, since, SteadyClock::now());
  }
  SteadyClock::time_point observe(OverheadPhase p, SteadyClock::time_point since, SteadyClock::time_point end) {
    gw_.metrics().overhead(p).observe(std::chrono::duration<double>(end - since).count());
    return end;
  }
  void finish(Outcome o, int status, Reason reason = Reason::none);

  Gateway& gw_;
  UpstreamPool& upstreams_;
  Downstream& down_;
  const std::shared_ptr<const Generation> gen_;  // this request's config generation, to its end
  const Timeouts& tmo_;
  ApiKind kind_;
  DownstreamRequest& req_;
  bool keep_alive_;
  std::string_view client_;
  SteadyClock::time_point start_, total_deadline_;
  Time picked_at_{};  // the ranking's time (the first placement's)
  SteadyClock::time_point picked_steady_{};  // the same on the steady clock
  RequestRecord rec_;
  std::optional<RequestModel> model_;
  const ModelRoute* route_ = nullptr;
  PoolRuntime* pool_ = nullptr;
  PoolRouter* router_ = nullptr;
  PoolHealth* health_ = nullptr;
  PickRequest pick_;
  std::shared_ptr<const TokenIds> token_ids_;  // the engine's, from its render route (or its cache)
  DispatchGuard guard_;
  std::unique_ptr<AdmissionTicket> ticket_;
  bool enforcing_ = false;    // tenants configured: the gateway's key, budgets, usage settlement
  bool strip_usage_ = false;  // include_usage was injected: drop the usage-only chunk
  std::string rewritten_body_;
  std::string_view body_;
  std::optional<UpstreamExchange> up_;
  std::optional<ModelRewriter> response_rewriter_;  // alias: target -> the name the client used
  Histogram* itl_ = nullptr;
  StreamTokens tokens_;  // the stream's tokens: TTFT, ITL, what the router and the ticket have not heard of
  std::optional<Failure> failure_;
  bool finished_ = false;
  bool broken_ = false;  // the client connection cannot carry another response
  bool pinned_ = false;  // previous_response_id: the one endpoint holding the state, no retry elsewhere
  bool learned_ = false; // this response's id was recorded in the ResponseLocator
  bool engine_done_ = false;  // a stream's end from the engine was taken (end_engine_answer)
};

// ============================ the life of one request ============================
// parse -> authenticate -> resolve -> admit -> pick -> forward / relay -> settle + log (finish).
asio::awaitable<bool> RequestLife::run() {
  auto rid = req_["x-request-id"];
  rec_.id = rid.empty() || rid.size() > 128 ? new_request_id() : std::string(rid);
  rec_.path = std::string(req_.target().substr(0, 256));
  rec_.method = "POST";  // the only method routed here (session.cpp)
  rec_.client = std::string(client_);
  rec_.client_retry = client_retry_of(req_["x-stainless-retry-count"]);
  auto& admission = *gen_->admission;
  enforcing_ = admission.enforcing();

  // ---- parse: once, with simdjson ----
  auto phase = start_;  // (the record's strings above: a few hundred nanoseconds, no second clock read)
  // The body reader left kBodyPadding zeroed bytes of capacity behind it: parsed in place. The
  // messages' text is kept only in the rendered prompt (nothing here reads it from the messages).
  const BodyBytes& body = req_.body();
  ParseLimits parse_limits;
  parse_limits.keep_message_text = false;
  auto parsed = parse_request(kind_, body, parse_limits, body.capacity() >= body.size() + kBodyPadding);
  phase = observe(OverheadPhase::parse, phase);  // and the authentication's start
  if (!parsed.ok()) co_return co_await reject(parsed.error, Reason::bad_request);
  model_ = std::move(parsed.request);
  rec_.model = truncate_echo(model_->model, kMaxEchoedModel);
  rec_.stream = model_->stream;
  rec_.tenant = tenant_of(req_, *model_);

  // ---- authenticate: before the model is resolved (no probing model names without a key) ----
  AuthOutcome auth = admission.authenticate(req_.base());
  if (auth.denial) {
    ResponseHeaders h;
    for (auto& [k, v] : auth.denial->headers()) h.emplace_back(std::string(k), std::move(v));
    co_return co_await reject(auth.denial->error, Reason::unauthorized, h);
  }
  if (enforcing_ && auth.tenant) {  // known from here on: every later line and reject names it
    rec_.tenant = auth.tenant->name;
    rec_.tenant_configured = true;
    rec_.priority = auth.tenant->priority;
  }

  // ---- resolve the model: alias, adapter, pool; the API kind it serves ----
  // A model outside the tenant's allow-list is answered as unknown (its existence is not revealed).
  route_ = visible_model(*gen_->config, auth.tenant, model_->model);
  if (!route_)
    co_return co_await reject(api_error(404, fmt::format("The model `{}` does not exist.", truncate_echo(model_->model, kMaxEchoedModel)),
                                        "invalid_request_error", "model", "model_not_found"),
                              gen_->config->find_model(model_->model) ? Reason::model_not_allowed : Reason::unknown_model);
  rec_.pool = route_->pool;
  pool_ = gen_->pool(route_->pool);
  router_ = &pool_->router;
  const bool embedding_pool = router_->config().kind == PoolKind::embedding;
  if (!any_pool_kind(kind_) && embedding_pool != needs_pooling_pool(kind_))
    co_return co_await reject(api_error(400, fmt::format("The model `{}` does not support {}.", model_->model, api_name(kind_)),
                                        "invalid_request_error", "model", "model_not_supported"), Reason::wrong_api);
  // The model's ITL series, resolved once: the per-token path only observes into it.
  if (const ModelSeries* series = gen_->series_for(route_->name)) itl_ = series->itl;

  // ---- admit: budgets, concurrency, the gateway queue (waits while the pool is at its cap) ----
  AdmitResult admitted;
  const AdmitRequest admit_request{*model_, *route_, auth.tenant, req_.base(), down_.cancel_slot(),
                                   [this] { return down_.gone(); }};
  if (auto now = admission.try_admit(admit_request)) admitted = std::move(*now);
  else co_await down_.watching([&]() -> asio::awaitable<void> { admitted = co_await admission.admit(admit_request); }());
  phase = observe(OverheadPhase::admit, phase);  // includes the queue wait (sluice_queue_time_seconds alone); the pick's start
  rec_.queue_time = admitted.queued;
  if (enforcing_) rec_.priority = admitted.priority;
  if (admitted.client_left || (!admitted.denial && down_.gone())) {
    ticket_ = std::move(admitted.ticket);
    finish(Outcome::client_cancelled, kClientClosedStatus, Reason::cancelled_queued);
    co_return false;
  }
  if (admitted.denial) {
    ResponseHeaders extra;
    for (auto& [k, v] : admitted.denial->headers()) extra.emplace_back(std::string(k), std::move(v));
    for (auto& [k, v] : admitted.headers) extra.emplace_back(std::string(k), std::move(v));
    co_return co_await reject(admitted.denial->error, reason_of(admitted.denial->reason), extra);
  }
  ticket_ = std::move(admitted.ticket);
  if (!ticket_->tenant().empty()) rec_.tenant = std::string(ticket_->tenant());

  // ---- token ids: the engine's own (its render route) for the event index, when the pool asks ----
  if (pool_->render && (kind_ == ApiKind::chat || kind_ == ApiKind::completion)) {
    co_await down_.watching(render_token_ids());
    if (down_.gone()) {
      finish(Outcome::client_cancelled, kClientClosedStatus, Reason::client_closed);
      co_return false;
    }
    phase = SteadyClock::now();  // the pick starts after the engine's render
  }

  // ---- pick: every healthy endpoint, best first ----
  pick_ = make_pick_request(kind_, *route_, *model_);
  if (token_ids_) {
    pick_.token_ids = *token_ids_;
    // The engine's count (a list of prompts: the first prompt's ids only, so keep the estimate).
    if (model_->num_inputs <= 1) pick_.input_tokens = static_cast<int64_t>(token_ids_->size());
  }
  health_ = &pool_->health;
  picked_steady_ = phase;
  const Time picked_at = picked_at_ = gw_.at(phase);
  health_->refresh(picked_at);
  auto candidates = router_->rank(pick_, picked_at);
  const auto pick_end = observe(OverheadPhase::pick, phase);
  pool_->series.pick->observe(std::chrono::duration<double>(pick_end - phase).count());
  if (candidates.empty())
    co_return co_await reject(api_error(503, fmt::format("No healthy endpoint serves `{}` right now.", model_->model),
                                        "server_error", {}, "no_endpoint"), Reason::no_endpoint, jittered_retry_after());
  // The picker found every endpoint too loaded to serve it within the SLO (policy.h, shed_advised).
  thread_local AdmissionRng shed_rng{std::random_device{}()};
  if (auto d = shed_refusal(*router_, candidates, admitted.priority, picked_at, shed_rng)) {
    ResponseHeaders h;
    for (auto& [k, v] : d->headers()) h.emplace_back(std::string(k), std::move(v));
    co_return co_await reject(d->error, Reason::over_slo, h);
  }

  // ---- previous_response_id: the state lives on the engine that stored it; only there ----
  if (!model_->previous_response_id.empty()) {
    if (auto place = gw_.responses().find(model_->previous_response_id, gw_.now())) {
      std::erase_if(candidates, [&](const Candidate& c) {
        return router_->config().endpoints[c.endpoint].address.str() != place->address;
      });
      if (place->pool != route_->pool || candidates.empty())
        co_return co_await reject(
            api_error(404, fmt::format("The response `{}` named by previous_response_id was stored on the model server {} (pool {}), "
                                       "which is not available now; its state is gone. Resend the conversation without "
                                       "previous_response_id.", truncate_echo(model_->previous_response_id), place->address, place->pool),
                      "invalid_request_error", "previous_response_id", "previous_response_unavailable"),
            Reason::no_endpoint);
      pinned_ = true;
    }
    // Unknown here (learned by another gateway, or before a restart): routed as usual; the engine
    // answers 404 when it does not hold it.
  }

  // ---- forward + relay, watching the client for a disconnect ----
  // The retry budget counts requests that reach an engine: refusals above (no endpoint, shed, a
  // stored response's engine gone) would otherwise raise the retry allowance as the pool overloads.
  health_->on_request(picked_at);
  // Admission: enforce the reserved output bound upstream; ask a stream for its usage (to settle
  // the reservation) and strip that chunk again when the client did not ask for it.
  const bool generating = generates(kind_);
  const std::optional<int64_t> inject_max = generating ? ticket_->inject_max_tokens() : std::nullopt;
  // (The Responses API's stream always ends with its usage, in response.completed.)
  strip_usage_ = enforcing_ && generating && model_->stream && !model_->include_usage && kind_ != ApiKind::response;
  if (route_->is_alias() || inject_max || strip_usage_) {
    BodyRewrite rw{.model = std::nullopt, .inject_max_tokens = inject_max, .inject_include_usage = strip_usage_};
    if (route_->is_alias()) rw.model = route_->target;
    rewritten_body_ = rewrite_body(req_.body(), *model_, rw);
    body_ = rewritten_body_;
    if (route_->is_alias()) response_rewriter_.emplace(route_->target, route_->name);
  } else {
    body_ = req_.body();
  }
  co_await down_.watching(forward_and_relay(std::move(candidates)), Downstream::WatchFrom::sent);

  // ---- settle + log: finish() is the one completion path ----
  if (!finished_) finish(down_.gone() ? Outcome::client_cancelled : Outcome::upstream_error,
                         down_.gone() ? kClientClosedStatus : 502, Reason::internal);
  co_return keep_alive_ && !broken_ && !down_.gone();
}

// The engine's token ids for this body (render_client.h): its answer, the cache's, or nothing (the
// pick then estimates them). Whatever the engine does, the request goes on.
asio::awaitable<void> RequestLife::render_token_ids() {
  if (down_.gone()) co_return;  // left while queued: nothing to ask for
  std::string alias_body;  // the engine knows the target, not the alias
  if (route_->is_alias()) {
    BodyRewrite rw;
    rw.model = route_->target;
    alias_body = rewrite_body(req_.body(), *model_, rw);
  }
  RenderCall call;
  call.kind = kind_;
  call.model = route_->target;
  call.adapter = route_->adapter_of.empty() ? std::string_view() : std::string_view(route_->name);
  call.body = route_->is_alias() ? std::string_view(alias_body) : std::string_view(req_.body());
  call.authorization = req_[http::field::authorization];
  call.forward_client_auth = !enforcing_;
  call.request_id = rec_.id;
  call.total_deadline = total_deadline_;
  call.client_gone = [this] { return down_.gone(); };
  RenderResult r = co_await sluice::render_token_ids(upstreams_, *pool_, call, down_.cancel_slot());
  if (!r.error.empty())
    spdlog::debug("request {}: token ids estimated ({} from {}: {})", rec_.id, to_string(r.outcome), r.endpoint, r.error);
  token_ids_ = std::move(r.ids);
}

asio::awaitable<void> RequestLife::forward_and_relay(std::vector<Candidate> candidates) {
  const bool placed = co_await forward(candidates);
  if (!placed && pinned_ && failure_ && failure_->outcome != Outcome::client_cancelled) {
    // The one engine that holds the conversation failed: say so, the error alone would not.
    failure_->error.message = fmt::format("The model server {} that stored the response `{}` named by previous_response_id "
                                          "failed ({}) Its state may be gone; resend the conversation without previous_response_id.",
                                          rec_.endpoint, truncate_echo(model_->previous_response_id), failure_->error.message);
    failure_->error.param = "previous_response_id";
  }
  if (placed) {
    const auto ct = up_->response().value(http::field::content_type);
    if (ct.size() >= 17 && iequals(ct.substr(0, 17), "text/event-stream"sv)) co_await relay_stream();
    else co_await relay_buffered();
  }
  if (failure_) co_await respond_failure();
}

// ---- forward: place the request on the best candidate, then follow each attempt's decision ----
asio::awaitable<bool> RequestLife::forward(const std::vector<Candidate>& candidates) {
  bool fresh = false;
  for (size_t i = 0; i < candidates.size();) {
    if (!guard_ || guard_.endpoint() != candidates[i].endpoint) {
      // The first candidate below the hard cap from i on (PoolRouter::place).
      // The first placement at the ranking's time (as in fleetsim); a retry's at its own.
      guard_ = router_->place(pick_, candidates, i, rec_.attempts == 0 ? picked_at_ : gw_.now());
      const auto& cand = candidates[i];
      // The TTFT the ranking expected there, from the pick: a first placement's only (a retry's
      // endpoint was ranked before the failed attempt).
      rec_.expected_ttft_ms = rec_.attempts == 0 && cand.expected_ttft_ms > 0 ? cand.expected_ttft_ms : -1.0;
      ++rec_.attempts;  // attempts made (a candidate skipped at the cap is not one)
      rec_.endpoint = router_->config().endpoints[cand.endpoint].name;
      rec_.predicted_cached_tokens = cand.predicted_cached_tokens;
      ticket_->on_dispatched();
    }
    const Attempt a = co_await attempt(i, candidates, fresh);
    switch (a.next) {
      case Attempt::Next::relay:
        co_return true;
      case Attempt::Next::stop:
        co_return false;
      case Attempt::Next::fresh_connection:
        fresh = true;
        continue;
      case Attempt::Next::next_candidate:
        if (a.wait > Duration::zero()) {
          down_.watch_now();  // the wait is cancelled if the client leaves (the answer that led here may have come at once)
          asio::steady_timer timer(co_await asio::this_coro::executor);
          timer.expires_at(std::min(SteadyClock::now() + a.wait, total_deadline_));
          auto slot = down_.cancel_slot();
          if (slot.is_connected()) slot.assign([&timer](asio::cancellation_type) { timer.cancel(); });
          co_await timer.async_wait(use_tuple);
          if (slot.is_connected()) slot.clear();
          if (down_.gone()) {
            finish(Outcome::client_cancelled, kClientClosedStatus, Reason::client_closed);
            co_return false;
          }
        }
        guard_.release();
        fresh = false;
        ++i;
        continue;
    }
  }
  co_return false;  // unreachable: the last candidate's attempt never asks for a next one
}

// One attempt on candidate i: lease a connection, send, read the final response head, decide.
// Nothing has reached the client yet, so a connect failure, a reset before the response head, a
// first-byte timeout (a hung engine) or a 502/503 head is retried on the next-ranked candidate (at
// most retry.max_retries times, within the pool's retry budget). An upstream Retry-After up to
// retry.max_retry_after is waited out first; a longer one passes the response on.
asio::awaitable<Attempt> RequestLife::attempt(size_t i, std::span<const Candidate> candidates, bool fresh) {
  // Retry on the next candidate when allowed; else record `failure` and stop.
  const auto retry_or_fail = [&](AttemptResult result, Failure failure) -> Attempt {
    report_attempt(result);
    if (may_retry(i + 1, candidates)) {
      spdlog::debug("request {}: {} failed ({}), retrying", rec_.id, rec_.endpoint, to_string(failure.reason));
      return {Attempt::Next::next_candidate};
    }
    guard_.release();
    fail(failure.outcome, std::move(failure.error), failure.reason);
    return {Attempt::Next::stop};
  };
  const auto upstream_failed = [](boost::system::error_code ec) {
    Failure f;
    f.error = api_error(502, fmt::format("The model server failed: {}.", ec.message()), "server_error", {}, "upstream_error");
    f.reason = Reason::upstream_io;
    return f;
  };

  auto phase = SteadyClock::now();
  // A connect, or a wait at the connection limit, may take a while: the client is watched from here.
  if (!upstreams_.has_idle(*pool_, guard_.endpoint())) down_.watch_now();
  // (No co_await inside a conditional expression: GCC 12 destroys the other branch's temporaries.)
  AcquireResult acquired;
  if (auto idle = upstreams_.take_idle(*pool_, guard_.endpoint(), phase)) acquired = std::move(*idle);
  else acquired = co_await upstreams_.acquire(*pool_, guard_.endpoint(), std::min(phase + tmo_.connect, total_deadline_));
  phase = observe(OverheadPhase::connect, phase);  // and the exchange's start
  if (down_.gone()) {
    finish(Outcome::client_cancelled, kClientClosedStatus, Reason::client_closed);
    co_return Attempt{Attempt::Next::stop};
  }
  if (acquired.error) {
    spdlog::debug("request {}: connect to {} failed: {}", rec_.id, rec_.endpoint, acquired.error.message());
    const bool timed_out = acquired.error == asio::error::timed_out;
    Failure f;
    f.outcome = timed_out ? Outcome::timeout : Outcome::upstream_error;
    f.error = timed_out ? api_error(504, "Timed out connecting to the model server.", "server_error", {}, "upstream_connect_timeout")
                        : api_error(502, fmt::format("Could not connect to a model server ({}).", acquired.error.message()),
                                    "server_error", {}, "upstream_connect_error");
    f.reason = timed_out ? Reason::connect_timeout : Reason::connect_error;
    co_return retry_or_fail(timed_out ? AttemptResult::timeout : AttemptResult::connect_error, std::move(f));
  }
  up_.reset();
  up_.emplace(std::move(acquired.lease), down_, ExchangeDeadlines{tmo_.first_byte, tmo_.idle_gap, total_deadline_});
  const auto ec = co_await up_->send(upstream_head(), body_, phase);
  if (!ec) {
    // The request written (the engine took its last byte), then the engine's own time to its head.
    const auto head_at = observe(OverheadPhase::first_upstream_byte, observe(OverheadPhase::send_request, phase, up_->sent_at()));
    rec_.status = up_->status();
    report_attempt(attempt_result_of_status(rec_.status), gw_.at(head_at));
    if (rec_.status != 502 && rec_.status != 503) co_return Attempt{Attempt::Next::relay};
    const auto wait = parse_retry_after(up_->response().value("retry-after-ms"), up_->response().value(http::field::retry_after));
    if ((wait && *wait > router_->config().retry.max_retry_after) || !may_retry(i + 1, candidates))
      co_return Attempt{Attempt::Next::relay};  // pass the upstream's answer on
    spdlog::debug("request {}: {} answered {}, retrying", rec_.id, rec_.endpoint, rec_.status);
    up_.reset();
    co_return Attempt{Attempt::Next::next_candidate, wait.value_or(Duration::zero())};
  }
  if (down_.gone()) {
    fail(Outcome::client_cancelled, {}, Reason::client_closed);
    co_return Attempt{Attempt::Next::stop};
  }
  const Phase expired = down_.expired();
  const bool reset = is_reset(ec);
  if (up_->reused() && up_->nothing_received() && !fresh && expired == Phase::none && reset) {
    up_.reset();
    co_return Attempt{Attempt::Next::fresh_connection};
  }
  if (expired == Phase::total) {
    fail_upstream(ec, false);
    co_return Attempt{Attempt::Next::stop};
  }
  up_.reset();
  // A hung engine (nothing within first_byte) is retried elsewhere like a reset: nothing reached
  // the client yet, and the outlier detector hears of the timeout.
  if (expired == Phase::first_byte) {
    Failure f;
    f.outcome = Outcome::timeout;
    f.error = api_error(504, "The model server did not start responding in time.", "server_error", {}, "upstream_timeout");
    f.reason = Reason::first_byte_timeout;
    co_return retry_or_fail(AttemptResult::timeout, std::move(f));
  }
  if (reset) co_return retry_or_fail(AttemptResult::server_error, upstream_failed(ec));
  report_attempt(AttemptResult::server_error);
  auto failure = upstream_failed(ec);
  fail(failure.outcome, std::move(failure.error), failure.reason);
  co_return Attempt{Attempt::Next::stop};
}

bool RequestLife::may_retry(size_t next, std::span<const Candidate> candidates) {
  // The attempts made so far (not the candidate's index: candidates at the cap may have been skipped).
  if (next >= candidates.size() || rec_.attempts > router_->config().retry.max_retries) return false;
  if (down_.gone() || SteadyClock::now() >= total_deadline_) return false;
  // The hard cap holds for retries too: no other endpoint has a slot, no retry.
  if (!router_->any_below_cap(candidates, next)) return false;
  if (health_ && !health_->try_retry(gw_.now())) {
    spdlog::debug("request {}: retry budget of pool {} exhausted", rec_.id, router_->config().name);
    return false;
  }
  return true;
}

void RequestLife::report_attempt(AttemptResult r, std::optional<Time> at) {
  if (health_ && guard_) health_->on_attempt(guard_.endpoint(), r, at ? *at : gw_.now());
}

std::string RequestLife::upstream_head() const {
  const auto& ep = router_->config().endpoints[guard_.endpoint()];
  std::string head;
  head.reserve(512);
  // Plain appends, not fmt::format_to: into a std::string through back_inserter, fmt's two calls
  // here cost ~2.7k instructions per request (callgrind, bench/results/overhead.txt run 15).
  char num[24];
  head.append("POST "sv).append(std::string_view(req_.target())).append(" HTTP/1.1\r\nHost: "sv);
  if (ep.host_header.empty())
    head.append(ep.address.host).append(":"sv).append(num, std::to_chars(num, num + sizeof num, ep.address.port).ptr);
  else  // a TLS endpoint behind its local bridge (tls/): the engine's own name
    head.append(ep.host_header);
  head.append("\r\n"sv);
  bool has_content_type = false;
  for (const auto& f : req_.base()) {
    const std::string_view name = f.name_string();
    if (is_hop_by_hop(f.name(), name)) continue;
    // With tenants, the bearer key is the gateway's (never forwarded) and the priority header its own;
    // an engine key configured for the endpoint (upstream_auth) replaces the client's in any case.
    if (f.name() == http::field::authorization && (enforcing_ || !ep.authorization.empty())) continue;
    if (enforcing_ && iequals(name, "x-sluice-priority")) continue;
    has_content_type |= f.name() == http::field::content_type;
    head.append(name).append(": ").append(f.value()).append("\r\n");
  }
  if (!has_content_type) head += "Content-Type: application/json\r\n";
  if (!ep.authorization.empty()) append_header(head, "Authorization", ep.authorization);
  append_header(head, "x-request-id", rec_.id);
  head.append("Content-Length: "sv).append(num, std::to_chars(num, num + sizeof num, body_.size()).ptr).append("\r\n\r\n"sv);
  return head;
}

asio::awaitable<bool> RequestLife::write_client(std::string_view a, std::string_view b, std::string_view c,
                                                SteadyClock::time_point now) {
  const auto at = now + tmo_.idle_gap;
  if (total_deadline_ < at) down_.deadline(total_deadline_, Phase::total);
  else down_.deadline(at, Phase::client_write);
  // idle_ms is a stalled client's limit, not a large answer's: the deadline moves while it reads.
  co_return co_await down_.write(a, b, c, Downstream::Progress{tmo_.idle_gap, total_deadline_});
}

std::string RequestLife::response_head_from_upstream(bool chunked, size_t content_length) {
  const UpstreamResponse& res = up_->response();
  std::string head;
  head.reserve(384);
  char num[24];
  head.append("HTTP/1.1 ", 9);
  head.append(num, std::to_chars(num, num + sizeof num, res.status()).ptr);
  head.append(" ", 1).append(res.reason()).append("\r\n", 2);
  for (size_t i = 0; i < res.field_count(); ++i) {
    const auto f = res.field(i);
    if (is_hop_by_hop(f.name, f.name_string)) continue;
    append_header(head, f.name_string, f.value);
  }
  append_header(head, "x-request-id", rec_.id);
  if (const HeaderList* extra = ticket_ ? ticket_->response_headers() : nullptr)
    for (const auto& [k, v] : *extra) append_header(head, k, v);
  if (gen_->config->expose_routing_headers) {
    append_header(head, "x-sluice-endpoint", rec_.endpoint);
    append_header(head, "x-sluice-predicted-cached-tokens",
                  std::string_view(num, std::to_chars(num, num + sizeof num, std::max<int64_t>(0, rec_.predicted_cached_tokens)).ptr));
  }
  if (chunked) head += "Transfer-Encoding: chunked\r\n";
  else append_header(head, "Content-Length", std::string_view(num, std::to_chars(num, num + sizeof num, content_length).ptr));
  if (!keep_alive_) head += "Connection: close\r\n";
  head += "\r\n";
  return head;
}

// ---- relay a whole (non-streaming) body: read it, rewrite the model for an alias, send ----
asio::awaitable<void> RequestLife::relay_buffered() {
  // Read straight into the body: sized by Content-Length when known, else grown a chunk at a time.
  std::string body;
  size_t used = 0;
  const auto length = up_->content_length();
  // Sized by Content-Length when known (+1 to see the end), else grown 4 KiB at a time.
  if (length) body.resize(std::min<uint64_t>(*length, kMaxBufferedBody) + 1);
  while (!up_->body_done()) {
    if (body.size() == used || (!length && body.size() - used < 512)) body.resize(used + kRelayChunk / 4);
    size_t got = 0;
    boost::system::error_code ec;
    if (!co_await up_->read(body.data() + used, body.size() - used, got, ec)) {
      fail_upstream(ec, false);
      co_return;
    }
    used += got;
    if (used > kMaxBufferedBody) {
      fail(Outcome::upstream_error, api_error(502, "The model server's response is too large.", "server_error"),
           Reason::response_too_large);
      co_return;
    }
  }
  body.resize(used);
  const int status = up_->status();
  up_->done();  // back to the pool before we write downstream

  std::string rewritten;
  std::string_view out = body;
  if (response_rewriter_ && response_rewriter_->append(body, rewritten)) out = rewritten;
  if (auto u = find_usage(body)) take_usage(rec_, *u);
  if (kind_ == ApiKind::response && status == 200) learn_response(body);
  const auto now = SteadyClock::now();
  guard_.on_whole_answer(gw_.at(now), rec_.completion_tokens);
  if (rec_.completion_tokens > 0) ticket_->on_output(rec_.completion_tokens);
  // The engine is done with the request: its share of the endpoint's accounting goes now, not after
  // the client has taken the answer (the router frees the slot when the upstream exchange ends:
  // core/admission/dispatcher.h; fleetsim's engines end a request at its last token). Held through
  // the write, a client slow to read (a large answer, a slow link) left a phantom decoder, with its
  // context's KV read, in every ranking of that endpoint, and its slot unused, until it had read
  // the answer; the client's next turn, sent the moment the answer arrived, could be ranked before
  // the release. A queued request may take the slot at once (with fair shares the tenant's share
  // is still held until the request ends: finish()).
  release_endpoint();
  if (!co_await write_client(response_head_from_upstream(false, out.size()), out, {}, now)) {
    client_write_failed();
    co_return;
  }
  finish(status < 400 ? Outcome::ok : Outcome::upstream_error, status, status < 400 ? Reason::none : Reason::upstream_status);
}

// ---- relay an SSE stream: every read is written downstream at once, as one HTTP chunk ----
// The idle gap counts from the last SSE *event*: a server that sends only comments (": ping")
// keeps the connection busy but the stream idle, and ends at idle_ms like a silent one.
asio::awaitable<void> RequestLife::relay_stream() {
  if (!co_await write_client(response_head_from_upstream(true, 0))) {
    client_write_failed();
    co_return;
  }
  SseParser sse;
  std::string chunk(kRelayChunk, '\0');
  std::string out;
  bool rewriting = response_rewriter_.has_value() || strip_usage_;
  auto last_event = SteadyClock::now();
  while (!up_->body_done()) {
    size_t got = 0;
    boost::system::error_code ec;
    if (!co_await up_->read(chunk.data(), chunk.size(), got, ec, last_event + tmo_.idle_gap)) {
      flush_tokens();
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
      if (ev.has_data) last_event = now;
      on_event(ev, now);
      if (!rewriting || (strip_usage_ && is_usage_only_chunk(ev))) continue;
      if (response_rewriter_) response_rewriter_->append(ev.raw, out);
      else out.append(ev.raw);
    }
    flush_tokens();  // once per read, not per token: the router's and the queue's locks
    if (rewriting && sse.failed()) {  // an event too large to hold: relay the rest untouched
      out.append(sse.pending());
      rewriting = false;
    }
    // The engine's last bytes are in: its accounting goes before they are written (relay_buffered).
    if (up_->body_done()) end_engine_answer();
    const std::string_view send = rewriting ? std::string_view(out) : bytes;
    if (send.empty()) continue;
    if (!co_await write_client(fmt::format("{:x}\r\n", send.size()), send, "\r\n")) {
      rec_.cancelled_while_streaming = true;
      client_write_failed();
      co_return;
    }
  }
  end_engine_answer();
  const int status = up_->status();
  std::string tail;
  if (rewriting && !sse.pending().empty()) tail = fmt::format("{:x}\r\n{}\r\n", sse.pending().size(), sse.pending());
  tail += "0\r\n\r\n";
  if (!co_await write_client(tail)) {
    rec_.cancelled_while_streaming = true;
    client_write_failed();
    co_return;
  }
  finish(status < 400 ? Outcome::ok : Outcome::upstream_error, status, status < 400 ? Reason::none : Reason::upstream_status);
}

// The stream's end from the engine (once): its decode's sample, the connection back to the pool,
// and the endpoint's accounting released before the last bytes go to the client (relay_buffered).
void RequestLife::end_engine_answer() {
  if (engine_done_) return;
  engine_done_ = true;
  if (up_->status() < 400) guard_.on_stream_end(gw_.now());  // its last token came: the decode's sample
  up_->done();
  release_endpoint();
}

// The engine has answered: the request's share of its endpoint goes, and a queued request may take
// the slot (relay_buffered).
void RequestLife::release_endpoint() {
  guard_.release();
  gen_->admission->poke();
}

void RequestLife::on_event(const SseEvent& ev, SteadyClock::time_point now) {
  if (!ev.has_data || ev.data == "[DONE]") return;
  const bool responses = kind_ == ApiKind::response;
  if (responses && !learned_ && up_->status() == 200 && ev.data.find("\"response.created\"") != std::string_view::npos)
    learn_response(ev.data);
  if (responses ? is_output_text_delta(ev.event, ev.data) : carries_tokens(ev.data, !rec_.ttft))
    tokens_.on_token(rec_, guard_, [this] { return gw_.now(); }, *pool_->series.ttft_estimate, itl_, start_, picked_steady_, now);
  if (auto u = find_usage(ev.data)) take_usage(rec_, *u);
}

// A stored response (store != false): remember which endpoint holds it, for its follow-ups.
void RequestLife::learn_response(std::string_view json) {
  learned_ = true;
  if (!model_->store || !guard_) return;
  if (auto id = response_id_of(json))
    gw_.responses().remember(*id, {route_->pool, router_->config().endpoints[guard_.endpoint()].address.str()}, gw_.now());
}

// A write of the answer to the client failed: the client left, or the gateway cut it because it
// took no byte for timeouts.idle_ms (the client's doing all the same: a cancellation, not a timeout
// of the engines, which SluiceUpstreamErrorRateHigh counts; the reason tells the two apart), or the
// total deadline passed (a timeout, with the answer's status).
void RequestLife::client_write_failed() {
  switch (down_.expired()) {
    case Phase::client_write: finish(Outcome::client_cancelled, kClientClosedStatus, Reason::client_write_timeout); break;
    case Phase::total: finish(Outcome::timeout, rec_.status, Reason::total_timeout); break;
    default: finish(Outcome::client_cancelled, kClientClosedStatus, Reason::client_closed);
  }
}

void RequestLife::fail(Outcome o, ApiError e, Reason reason) {
  if (failure_) return;
  failure_.emplace();
  failure_->outcome = o;
  failure_->error = std::move(e);
  failure_->reason = reason;
}

// Classifies a failed upstream operation: the client left, a deadline passed, or the upstream broke.
void RequestLife::fail_upstream(boost::system::error_code ec, bool mid_stream) {
  const Phase expired = down_.expired();
  if (!down_.gone() && expired != Phase::total)
    report_attempt(expired == Phase::first_byte || expired == Phase::stream_gap ? AttemptResult::timeout
                                                                                 : AttemptResult::server_error);
  if (down_.gone()) {
    fail(Outcome::client_cancelled, {}, Reason::client_closed);
  } else if (expired == Phase::first_byte) {
    fail(Outcome::timeout, api_error(504, "The model server did not start responding in time.", "server_error", {}, "upstream_timeout"),
         Reason::first_byte_timeout);
  } else if (expired == Phase::stream_gap) {
    fail(Outcome::timeout,
         api_error(504, "The model server stopped sending in the middle of the response.", "server_error", {}, "upstream_timeout"),
         Reason::idle_timeout);
  } else if (expired == Phase::total) {
    fail(Outcome::timeout,
         api_error(504, "The request took longer than the gateway's total timeout.", "server_error", {}, "upstream_timeout"),
         Reason::total_timeout);
  } else {
    fail(Outcome::upstream_error, api_error(502, fmt::format("The model server failed: {}.", ec.message()), "server_error", {}, "upstream_error"),
         Reason::upstream_io);
  }
  failure_->mid_stream = mid_stream;
}

// Before any byte reached the client: an OpenAI error response. In the middle of a stream: the
// error event vLLM sends (`data: {"error": {...}}`, which the OpenAI SDKs raise as APIError),
// then the connection is closed *without* the chunked terminator and without [DONE], so that a
// client that ignores error events still sees an incomplete response, never a finished stream.
asio::awaitable<void> RequestLife::respond_failure() {
  up_.reset();  // a failed exchange never goes back to the pool: closed
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
  std::string events = f.partial_event;
  if (f.partial_pending) events += "\n\n";
  events += stream_error_event(f.error);
  co_await write_client(fmt::format("{:x}\r\n{}\r\n", events.size(), events));
  broken_ = true;  // the message is left unterminated: the connection closes
  finish(f.outcome, rec_.status, f.reason);
}

asio::awaitable<bool> RequestLife::reject(const ApiError& e, Reason reason, const ResponseHeaders& extra) {
  ResponseHeaders headers = extra;
  headers.emplace_back("x-request-id", rec_.id);
  if (const HeaderList* more = ticket_ ? ticket_->response_headers() : nullptr)
    for (const auto& [k, v] : *more) headers.emplace_back(std::string(k), v);
  const bool ok = co_await write_client(error_response(e, keep_alive_, headers));
  finish(Outcome::rejected, e.status, reason);
  co_return ok && keep_alive_;
}

// The one completion path of a model request: every request passes here exactly once.
void RequestLife::finish(Outcome o, int status, Reason reason) {
  if (finished_) return;
  finished_ = true;
  rec_.outcome = o;
  rec_.status = status;
  rec_.reason = reason;
  rec_.duration = SteadyClock::now() - start_;
  flush_tokens();
  guard_.release();  // before the ticket: its release lets the admission dispatcher fill the slot
  // A cut or failed request is charged what was delivered (usage -1), not the engine's report.
  const bool completed = o == Outcome::ok;
  if (ticket_) ticket_->settle(completed ? rec_.prompt_tokens : -1, completed ? rec_.completion_tokens : -1);
  ticket_.reset();
  up_.reset();
  down_.clear_deadline();
  gw_.complete(rec_, *gen_);
}

}  // namespace

asio::awaitable<bool> proxy_request(const RequestContext& ctx, ApiKind kind, DownstreamRequest& request, bool keep_alive) {
  RequestLife life(ctx, kind, request, keep_alive);
  co_return co_await life.run();
}

}  // namespace sluice
