#include "gateway/extproc/epp_exchange.h"

#include <algorithm>
#include <charconv>

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/http/fields.hpp>
#include <fmt/format.h>

#include "core/admission/tenants.h"
#include "core/epp/epp_protocol.h"
#include "core/openai/models_list.h"
#include "core/openai/response_fields.h"
#include "core/openai/sse.h"
#include "core/picker/shed_refusal.h"
#include "gateway/gateway.h"
#include "gateway/http/http_util.h"
#include "gateway/pick_request.h"
#include "gateway/stream_tokens.h"

namespace sluice {

namespace asio = boost::asio;
namespace http = boost::beast::http;

namespace {
constexpr int kClientClosedStatus = 499;
constexpr size_t kMaxEchoedModel = 256;
constexpr size_t kMaxBufferedResponse = 64u << 20;  // a larger non-streaming body is passed on unread

bool iequals(std::string_view a, std::string_view b) { return boost::beast::iequals(a, b); }

bool is_usage_only_chunk(const SseEvent& ev) {
  return ev.has_data && ev.data.find("\"choices\":[]") != std::string_view::npos && find_usage(ev.data).has_value();
}

ApiKind api_kind(epp::PathKind k) {
  switch (k) {
    case epp::PathKind::chat: return ApiKind::chat;
    case epp::PathKind::completion: return ApiKind::completion;
    case epp::PathKind::embedding: return ApiKind::embedding;
  }
  return ApiKind::chat;
}
}  // namespace

struct EppExchange::State {
  State(Gateway& g, const ExtProcConfig& c)
      : gw(g), cfg(c), gen(g.current()), active(g), start(std::chrono::steady_clock::now()) {}

  Gateway& gw;
  const ExtProcConfig cfg;
  const std::shared_ptr<const Generation> gen;
  ActiveRequest active;  // graceful drain waits for the exchange
  const std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point picked{};  // the ranking's time (rec.expected_ttft_ms counts from it)
  std::mutex mu;  // finish() against the decision coroutine and cancel()

  // request
  http::fields fields;
  std::string path, method;
  std::string body;
  std::optional<std::vector<std::string>> subset;
  bool too_large = false;
  RequestRecord rec;
  std::optional<RequestModel> model;
  const ModelRoute* route = nullptr;
  PoolRuntime* pool = nullptr;
  Histogram* itl = nullptr;  // the model's ITL series, resolved once (generation.h)
  PickRequest pick;
  std::vector<Candidate> candidates;  // the allowed ones, best first
  DispatchGuard guard;
  std::unique_ptr<AdmissionTicket> ticket;
  bool strip_usage = false;
  std::optional<ModelRewriter> rewriter;
  // cancellation: emitted on the decision's executor
  std::atomic<bool> gone{false};
  asio::cancellation_signal cancel_signal;
  std::optional<asio::any_io_executor> executor;

  // response
  int status = 0;
  bool sse = false;
  bool rewriting = false;
  SseParser parser;
  std::string whole;        // a non-streaming body, for its usage (and the alias rewrite)
  bool whole_overflow = false;
  StreamTokens tokens;  // the stream's tokens: TTFT, ITL, what the router and the ticket have not heard of
  bool finished = false;

  void observe(OverheadPhase p, std::chrono::steady_clock::time_point since) {
    gw.metrics().overhead(p).observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count());
  }
  void flush_tokens() { tokens.flush(guard, ticket.get()); }
  void on_event(const SseEvent& ev, std::chrono::steady_clock::time_point now) {
    if (!ev.has_data || ev.data == "[DONE]") return;
    if (carries_tokens(ev.data, !rec.ttft))
      tokens.on_token(rec, guard, [this] { return gw.now(); }, *pool->series.ttft_estimate, itl, start, picked, now);
    if (auto u = find_usage(ev.data)) take_usage(rec, *u);
  }
  // The one ending of the request (mu held).
  void finish(Outcome o, int st, Reason reason) {
    if (finished) return;
    finished = true;
    rec.outcome = o;
    rec.status = st;
    rec.reason = reason;
    rec.duration = std::chrono::steady_clock::now() - start;
    flush_tokens();
    guard.release();  // before the ticket: its release lets the dispatcher fill the slot
    const bool completed = o == Outcome::ok;
    if (ticket) ticket->settle(completed ? rec.prompt_tokens : -1, completed ? rec.completion_tokens : -1);
    ticket.reset();
    gw.complete(rec, *gen);
  }
  EppAnswer reject(const ApiError& e, Reason reason, EppHeaders extra, std::string_view dropped = {}) {
    EppAnswer a;
    a.immediate = true;
    a.status = e.status;
    a.body = error_json(e);
    a.reply_headers = std::move(extra);
    a.reply_headers.emplace_back("content-type", "application/json");
    a.reply_headers.emplace_back("x-request-id", rec.id);
    if (!dropped.empty()) a.reply_headers.emplace_back(std::string(epp::kDroppedReasonHeader), std::string(dropped));
    a.details = std::string(to_string(reason));
    std::lock_guard lock(mu);
    finish(Outcome::rejected, e.status, reason);
    return a;
  }
  // The decision in three steps: everything before admission (nullopt: go on to admit), the
  // admission itself (at once when it can, else awaited in the gateway queue), and the rest.
  std::optional<EppAnswer> prepare();
  EppAnswer after_admit(AdmitResult admitted);
  std::optional<AdmitRequest> admit_request;
  ApiKind api = ApiKind::chat;
  std::chrono::steady_clock::time_point admit_started{};
};

EppExchange::EppExchange(Gateway& gw, const ExtProcConfig& cfg) : s_(std::make_unique<State>(gw, cfg)) {}

EppExchange::~EppExchange() {
  std::lock_guard lock(s_->mu);
  s_->finish(Outcome::client_cancelled, kClientClosedStatus, Reason::client_closed);
}

void EppExchange::set_request_headers(const EppHeaders& headers) {
  for (const auto& [k, v] : headers) {
    if (k == ":path") s_->path = v.substr(0, 4096);
    else if (k == ":method") s_->method = v;
    else if (!k.empty() && k[0] != ':') {  // HTTP/2 pseudo-headers are not fields
      try {
        s_->fields.insert(k, v);
      } catch (const std::exception&) {  // a name or value over Beast's limits: not a header we read
      }
    }
  }
  auto rid = s_->fields["x-request-id"];
  s_->rec.id = rid.empty() || rid.size() > 128 ? new_request_id() : std::string(rid);
  s_->rec.path = s_->path.substr(0, 256);
  s_->rec.listener = "ext_proc";
  s_->rec.client_retry = client_retry_of(s_->fields["x-stainless-retry-count"]);
}

void EppExchange::set_subset(std::vector<std::string> subset) { s_->subset = epp::split_endpoints(subset); }

bool EppExchange::append_request_body(std::string_view bytes) {
  if (s_->body.size() + bytes.size() > s_->gen->config->limits.max_body_bytes) {
    s_->too_large = true;
    return false;
  }
  s_->body.append(bytes);
  return true;
}

const std::string& EppExchange::request_body() const { return s_->body; }

EppAnswer EppExchange::answer_too_large() {
  decided_ = true;
  return s_->reject(api_error(413, "The request body is too large.", "invalid_request_error", {}, "body_too_large"),
                    Reason::body_too_large, {});
}

void EppExchange::protocol_error() {
  std::lock_guard lock(s_->mu);
  if (decided_) s_->finish(Outcome::client_cancelled, kClientClosedStatus, Reason::bad_http);
  else s_->finish(Outcome::rejected, 400, Reason::bad_http);
}

std::optional<EppAnswer> EppExchange::decide(asio::any_io_executor ex, std::function<void(EppAnswer)> done) {
  auto& s = *s_;
  if (auto refused = s.prepare()) {
    decided_ = true;
    return refused;
  }
  auto& admission = *s.gen->admission;
  if (auto now = admission.try_admit(*s.admit_request)) {  // room and nobody queued: no hop, no timer
    auto a = s.after_admit(std::move(*now));
    decided_ = true;
    return a;
  }
  {
    std::lock_guard lock(s.mu);
    s.executor = ex;
  }
  auto self = shared_from_this();
  asio::co_spawn(ex, [self, done = std::move(done)]() -> asio::awaitable<void> {
    auto& st = *self->s_;
    AdmitResult admitted = co_await st.gen->admission->admit(*st.admit_request);
    EppAnswer a = st.after_admit(std::move(admitted));
    self->decided_ = true;
    done(std::move(a));
  }, asio::detached);
  return std::nullopt;
}

// ============ the decision: parse -> authenticate -> resolve -> admit -> pick ============
std::optional<EppAnswer> EppExchange::State::prepare() {
  auto& admission = *gen->admission;
  const auto kind_of_path = epp::path_kind(path);
  if (!kind_of_path)
    return reject(api_error(404, fmt::format("Unknown path `{}`: the picker routes /v1/chat/completions, "
                                                "/v1/completions and /v1/embeddings.", truncate_echo(path, 128)),
                               "invalid_request_error", {}, "not_found"), Reason::not_found, {});
  const ApiKind kind = api = api_kind(*kind_of_path);

  // ---- parse: the same request model ----
  auto phase = std::chrono::steady_clock::now();
  ParseLimits parse_limits;
  parse_limits.keep_message_text = false;  // only the rendered prompt is read here
  auto parsed = parse_request(kind, body, parse_limits);
  observe(OverheadPhase::parse, phase);
  if (!parsed.ok()) return reject(parsed.error, Reason::bad_request, {});
  model = std::move(parsed.request);
  rec.model = truncate_echo(model->model, kMaxEchoedModel);
  rec.stream = model->stream;
  std::string fairness(fields[epp::kFairnessHeader]);
  if (fairness.empty()) fairness = std::string(fields[epp::kFairnessHeaderOld]);
  rec.tenant = !fairness.empty() ? fairness : !model->user.empty() ? model->user : "-";

  // ---- authenticate (from the headers), or the fairness id names the tenant (trusted proxy) ----
  phase = std::chrono::steady_clock::now();
  AuthOutcome auth;
  const Tenant* named = cfg.fairness_id_selects_tenant && !fairness.empty() ? admission.find_tenant(fairness) : nullptr;
  if (named) auth.tenant = named;
  else auth = admission.authenticate(fields);
  if (auth.denial) {
    EppHeaders h;
    for (auto& [k, v] : auth.denial->headers()) h.emplace_back(std::string(k), std::move(v));
    return reject(auth.denial->error, Reason::unauthorized, std::move(h));
  }
  if (admission.enforcing() && auth.tenant) {  // known from here on: every later line and reject names it
    rec.tenant = auth.tenant->name;
    rec.tenant_configured = true;
    rec.priority = auth.tenant->priority;
  }

  // ---- resolve: alias, adapter, pool ----
  route = visible_model(*gen->config, auth.tenant, model->model);  // the tenant's allow-list too
  if (!route)
    return reject(api_error(404, fmt::format("The model `{}` does not exist.", truncate_echo(model->model, kMaxEchoedModel)),
                               "invalid_request_error", "model", "model_not_found"),
                  gen->config->find_model(model->model) ? Reason::model_not_allowed : Reason::unknown_model, {});
  rec.pool = route->pool;
  pool = gen->pool(route->pool);
  if (const ModelSeries* series = gen->series_for(route->name)) itl = series->itl;
  PoolRouter& router = pool->router;
  if ((router.config().kind == PoolKind::embedding) != (kind == ApiKind::embedding))
    return reject(api_error(400, fmt::format("The model `{}` does not support {}.", model->model,
                                                kind == ApiKind::embedding ? "embeddings" : "completions"),
                               "invalid_request_error", "model", "model_not_supported"), Reason::wrong_api, {});

  // ---- admit: the objective's priority, budgets, the gateway queue ----
  std::string objective(fields[epp::kObjectiveHeader]);
  if (objective.empty()) objective = std::string(fields[epp::kObjectiveHeaderOld]);
  admit_request.emplace(AdmitRequest{*model, *route, auth.tenant, fields, cancel_signal.slot(),
                                     [this] { return gone.load(std::memory_order_acquire); },
                                     epp::objective_priority(objective, cfg)});
  admit_started = phase;
  return std::nullopt;
}

EppAnswer EppExchange::State::after_admit(AdmitResult admitted) {
  const bool enforcing = gen->admission->enforcing();
  const ApiKind kind = api;
  PoolRouter& router = pool->router;
  auto phase = admit_started;
  observe(OverheadPhase::admit, phase);
  rec.queue_time = admitted.queued;
  if (enforcing || admit_request->priority) rec.priority = admitted.priority;
  if (admitted.client_left || (!admitted.denial && gone.load())) {
    ticket = std::move(admitted.ticket);
    std::lock_guard lock(mu);
    finish(Outcome::client_cancelled, kClientClosedStatus, Reason::cancelled_queued);
    EppAnswer a;
    a.stream_gone = true;
    return a;
  }
  if (admitted.denial) {
    EppHeaders extra;
    for (auto& [k, v] : admitted.denial->headers()) extra.emplace_back(std::string(k), std::move(v));
    for (auto& [k, v] : admitted.headers) extra.emplace_back(std::string(k), std::move(v));
    return reject(admitted.denial->error, reason_of(admitted.denial->reason), std::move(extra),
                     epp::dropped_reason(admitted.denial->reason));
  }
  ticket = std::move(admitted.ticket);
  if (!ticket->tenant().empty()) rec.tenant = std::string(ticket->tenant());

  // ---- pick: rank every healthy endpoint, keep the subset hint's, dispatch to the first ----
  picked = phase = std::chrono::steady_clock::now();
  pick = make_pick_request(kind, *route, *model);
  pool->health.refresh(gw.now());
  auto ranked = router.rank(pick, gw.now());
  std::vector<std::string> addresses;
  addresses.reserve(ranked.size());
  for (const auto& c : ranked) addresses.push_back(router.config().endpoints[c.endpoint].address.str());
  std::vector<std::string_view> views(addresses.begin(), addresses.end());
  auto allowed = epp::restrict_to_subset(views, subset ? &*subset : nullptr);
  pool->series.pick->observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - phase).count());
  observe(OverheadPhase::pick, phase);
  // No endpoint to send it to: 503 with the gateway's jittered Retry-After (as proxy.cpp's).
  const auto no_endpoint = [&](std::string message) {
    return reject(api_error(503, std::move(message), "server_error", {}, "no_endpoint"), Reason::no_endpoint,
                  jittered_retry_after(), epp::kDroppedNoEndpoints);
  };
  if (allowed.empty())
    return no_endpoint(fmt::format("No {}endpoint serves `{}` right now.", subset ? "eligible subset " : "healthy ",
                                   truncate_echo(model->model, kMaxEchoedModel)));
  // Every endpoint (the subset's too) is too loaded to serve it within the SLO (policy.h, shed_advised).
  thread_local AdmissionRng shed_rng{std::random_device{}()};
  if (auto d = shed_refusal(router, ranked, admitted.priority, gw.now(), shed_rng)) {
    EppHeaders extra;
    for (auto& [k, v] : d->headers()) extra.emplace_back(std::string(k), std::move(v));
    return reject(d->error, Reason::over_slo, std::move(extra), epp::dropped_reason(d->reason));
  }
  for (size_t i : allowed) candidates.push_back(ranked[i]);
  // Admission counted the whole pool's room; a subset hint that leaves some endpoints out may leave
  // none below the hard cap, and then the request is refused, not placed over the cap.
  const bool restricted = allowed.size() < ranked.size();
  EppAnswer a;
  {
    std::lock_guard lock(mu);
    if (gone.load()) {  // the stream ended while ranking
      finish(Outcome::client_cancelled, kClientClosedStatus, Reason::client_closed);
      a.stream_gone = true;
      return a;
    }
    // The first candidate below the hard cap (PoolRouter::place) is the primary destination, the
    // rest follow in rank order.
    size_t first = 0;
    guard = router.place(pick, candidates, first, gw.now(), restricted ? PoolRouter::AtCap::refuse : PoolRouter::AtCap::place);
    if (guard) {
      const auto k = static_cast<std::ptrdiff_t>(first);
      std::rotate(candidates.begin(), candidates.begin() + k, candidates.begin() + k + 1);
      std::rotate(allowed.begin(), allowed.begin() + k, allowed.begin() + k + 1);
      rec.attempts = 1;
      rec.endpoint = router.config().endpoints[candidates.front().endpoint].name;
      rec.predicted_cached_tokens = candidates.front().predicted_cached_tokens;
      rec.expected_ttft_ms = candidates.front().expected_ttft_ms > 0 ? candidates.front().expected_ttft_ms : -1.0;
      ticket->on_dispatched();
    }
  }
  if (!guard)
    return no_endpoint(fmt::format("Every endpoint of the eligible subset for `{}` is at its in-flight cap "
                                   "(pools[].max_in_flight_per_endpoint); retry later.",
                                   truncate_echo(model->model, kMaxEchoedModel)));
  pool->health.on_request(gw.now());  // counted once it is sent on, as in proxy.cpp (the retry budget)
  a.destination = epp::destination_list(views, allowed, static_cast<size_t>(cfg.destinations));

  // ---- the body for the engine: alias target, the reserved output bound, usage for settling ----
  const bool generating = kind != ApiKind::embedding;
  const std::optional<int64_t> inject_max = generating ? ticket->inject_max_tokens() : std::nullopt;
  strip_usage = enforcing && generating && model->stream && !model->include_usage;
  if (route->is_alias() || inject_max || strip_usage) {
    BodyRewrite rw{.model = std::nullopt, .inject_max_tokens = inject_max, .inject_include_usage = strip_usage};
    if (route->is_alias()) rw.model = route->target;
    a.body_replacement = rewrite_body(body, *model, rw);
    if (route->is_alias()) rewriter.emplace(route->target, route->name);
  }
  a.set_headers.emplace_back(std::string(epp::kDestinationHeader), a.destination);
  if (a.body_replacement) a.set_headers.emplace_back("content-length", std::to_string(a.body_replacement->size()));
  a.set_headers.emplace_back("x-request-id", rec.id);
  // With tenants the client's key is the gateway's (never forwarded), as on the standalone path.
  if (enforcing) {
    a.remove_headers.emplace_back("authorization");
    a.remove_headers.emplace_back("x-sluice-priority");
  }
  return a;
}

// ============ the response ============
void EppExchange::on_served(std::string_view endpoint) {
  auto& s = *s_;
  if (!s.guard || !s.pool || endpoint.empty()) return;
  // The proxy may report a list (Envoy formats the attempted hosts): the last one served.
  if (auto comma = endpoint.rfind(','); comma != std::string_view::npos) endpoint.remove_prefix(comma + 1);
  while (!endpoint.empty() && endpoint.front() == ' ') endpoint.remove_prefix(1);
  const auto& eps = s.pool->router.config().endpoints;
  if (eps[s.guard.endpoint()].address.str() == endpoint) return;
  for (size_t i = 0; i < s.candidates.size(); ++i) {
    const auto& c = s.candidates[i];
    if (eps[c.endpoint].address.str() != endpoint) continue;
    std::lock_guard lock(s.mu);
    if (s.finished) return;
    s.guard.release();
    s.guard = s.pool->router.dispatch(s.pick, c, s.gw.now());
    s.rec.endpoint = eps[c.endpoint].name;
    s.rec.predicted_cached_tokens = c.predicted_cached_tokens;
    s.rec.expected_ttft_ms = -1;  // ranked before the proxy's failed attempts: no estimate for this one
    s.rec.attempts = static_cast<int>(i) + 1;
    return;
  }
}

EppResponseHeaders EppExchange::on_response_headers(const EppHeaders& headers, bool end_of_stream) {
  auto& s = *s_;
  EppResponseHeaders out;
  for (const auto& [k, v] : headers) {
    if (k == ":status") {
      int st = 0;
      std::from_chars(v.data(), v.data() + v.size(), st);
      s.status = st;
    } else if (iequals(k, "content-type")) {
      s.sse = v.size() >= 17 && iequals(std::string_view(v).substr(0, 17), "text/event-stream");
    }
  }
  if (s.status == 0) s.status = 200;
  s.rewriting = s.rewriter.has_value() || (s.sse && s.strip_usage);
  if (s.rewriting) out.remove_headers.emplace_back("content-length");  // the rewrite may change the length
  out.set_headers.emplace_back("x-request-id", s.rec.id);
  if (const HeaderList* extra = s.ticket ? s.ticket->response_headers() : nullptr)
    for (const auto& [k, v] : *extra) out.set_headers.emplace_back(std::string(k), v);
  if (end_of_stream) {
    std::lock_guard lock(s.mu);
    s.finish(s.status < 400 ? Outcome::ok : Outcome::upstream_error, s.status, s.status < 400 ? Reason::none : Reason::upstream_status);
  }
  return out;
}

void EppExchange::on_response_body(std::string_view chunk, bool end_of_stream, std::string& out) {
  auto& s = *s_;
  const auto now = std::chrono::steady_clock::now();
  if (s.sse) {
    const bool was_rewriting = s.rewriting;
    s.parser.append(chunk);
    SseEvent ev;
    while (s.parser.next(ev)) {
      s.on_event(ev, now);
      if (!s.rewriting || (s.strip_usage && is_usage_only_chunk(ev))) continue;
      if (s.rewriter) s.rewriter->append(ev.raw, out);
      else out.append(ev.raw);
    }
    if (s.rewriting && s.parser.failed()) {  // an event too large to hold: the rest untouched
      out.append(s.parser.pending());
      s.rewriting = false;
    }
    if (!was_rewriting) out.append(chunk);
    else if (s.rewriting && end_of_stream) out.append(s.parser.pending());
    s.flush_tokens();
    if (end_of_stream && s.status < 400) s.guard.on_stream_end(s.gw.now());  // its last token: the decode's sample
  } else {
    // The whole body, for its usage (and the alias rewrite): read in place when it came as one
    // chunk (a small completion: no copy), else gathered up to kMaxBufferedResponse.
    std::string_view whole;
    if (!s.whole_overflow) {
      if (end_of_stream && s.whole.empty()) {
        whole = chunk;
      } else if (s.whole.size() + chunk.size() > kMaxBufferedResponse) {
        s.whole_overflow = true;
        if (s.rewriting) out.append(s.whole);  // too large to rewrite: what was held goes on as it is
        s.rewriting = false;
        s.whole.clear();
      } else {
        s.whole.append(chunk);
        whole = s.whole;
      }
    }
    if (!s.rewriting) out.append(chunk);
    if (end_of_stream && !s.whole_overflow) {
      if (s.rewriting && !s.rewriter->append(whole, out)) out.append(whole);
      if (auto u = find_usage(whole)) take_usage(s.rec, *u);
      if (!s.rec.ttft) s.rec.ttft = now - s.start;
      s.guard.on_whole_answer(s.gw.now(), s.rec.completion_tokens);
      if (s.rec.completion_tokens > 0 && s.ticket) s.ticket->on_output(s.rec.completion_tokens);
    }
  }
  if (end_of_stream) {
    std::lock_guard lock(s.mu);
    s.finish(s.status < 400 ? Outcome::ok : Outcome::upstream_error, s.status, s.status < 400 ? Reason::none : Reason::upstream_status);
  }
}

void EppExchange::on_response_trailers() {
  auto& s = *s_;
  std::lock_guard lock(s.mu);
  s.finish(s.status > 0 && s.status < 400 ? Outcome::ok : Outcome::upstream_error, s.status ? s.status : 502,
           s.status > 0 && s.status < 400 ? Reason::none : Reason::upstream_status);
}

void EppExchange::cancel() {
  auto& s = *s_;
  if (s.gone.exchange(true)) return;
  std::lock_guard lock(s.mu);
  if (s.executor && !decided_) {
    // The decision's coroutine may be parked in the gateway queue: its cancellation slot is
    // touched only on its own executor.
    asio::post(*s.executor, [self = shared_from_this()] { self->s_->cancel_signal.emit(asio::cancellation_type::terminal); });
  }
}

void EppExchange::stream_ended() {
  auto& s = *s_;
  std::lock_guard lock(s.mu);
  if (s.finished) return;
  s.rec.cancelled_while_streaming = s.status != 0;
  s.finish(Outcome::client_cancelled, kClientClosedStatus, Reason::client_closed);
}

bool EppExchange::finished() const {
  std::lock_guard lock(s_->mu);
  return s_->finished;
}

}  // namespace sluice
