#include "gateway/admission_driver.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <map>
#include <mutex>
#include <unordered_map>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/admission/admission.h"
#include "core/admission/admission_config.h"
#include "core/admission/dispatcher.h"
#include "core/picker/pool_router.h"
#include "core/prom_writer.h"
#include "gateway/observability/metrics.h"
#include "gateway/redis/redis_budgets.h"

namespace sluice {

namespace asio = boost::asio;

namespace {

constexpr size_t kTenantLabels = 32;  // the first 32 tenants to be charged keep their name, later ones are "other"
constexpr std::string_view kPriorityHeader = "x-sluice-priority";

AdmissionRng& thread_rng() {
  thread_local AdmissionRng rng(std::random_device{}());
  return rng;
}

std::optional<int64_t> parse_priority(std::string_view v) {
  int64_t p = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), p);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  return p;
}

class Driver;

struct Waiter {
  enum class State { waiting, popped, expired };
  State state = State::waiting;        // guarded by Driver::mu_
  asio::steady_timer* timer = nullptr; // touched only on the waiter's executor
  asio::any_io_executor executor;
  uintptr_t cookie = 0;
  std::string pool;
  int priority = 0;
  Duration waited{0};
  std::optional<Denial> denial;
};

class AdmitTicket final : public AdmissionTicket {
 public:
  AdmitTicket(Driver& d, AdmittedRequest req, std::shared_ptr<Waiter> w, HeaderList headers, std::string tenant,
              int64_t input_estimate, size_t tenant_label, SharedReservation shared)
      : d_(d), req_(std::move(req)), w_(std::move(w)), headers_(std::move(headers)), tenant_(std::move(tenant)),
        input_estimate_(input_estimate), tenant_label_(tenant_label), shared_(std::move(shared)) {}
  ~AdmitTicket() override;

  void on_dispatched() override;
  void on_output(int64_t n) override {
    req_.on_output(n);
    shared_.add_delivered(n);
    delivered_ += n > 0 ? n : 0;
  }
  void settle(int64_t prompt_tokens, int64_t completion_tokens) override;
  std::string_view tenant() const override { return tenant_; }
  const HeaderList* response_headers() const override { return headers_.empty() ? nullptr : &headers_; }
  std::optional<int64_t> inject_max_tokens() const override;

 private:
  Driver& d_;
  AdmittedRequest req_;
  std::shared_ptr<Waiter> w_;
  HeaderList headers_;
  std::string tenant_;
  int64_t input_estimate_;
  size_t tenant_label_;
  SharedReservation shared_;  // the shared (Redis) budgets' reservation, when `redis:` is configured
  int64_t delivered_ = 0;
  bool settled_ = false;
  bool started_ = false;  // left the queue for an endpoint
};

class Driver final : public AdmissionRuntime {
 public:
  Driver(const AdmissionHost& host, std::shared_ptr<const TenantRegistry> tenants, const AdmissionConfig& cfg,
         std::string fingerprint, bool enforcing, const RedisSpec* redis = nullptr)
      : host_(host), fingerprint_(std::move(fingerprint)), enforcing_(enforcing), admission_(tenants, cfg),
        redis_(redis ? std::make_shared<RedisBudgets>(*redis, tenants, &admission_.counters(), cfg.jitter, host.registry,
                                                      host.now)
                     : nullptr),
        dispatcher_(cfg.fair_share),
        queue_time_(host.registry.histogram("sluice_queue_time_seconds", "Time spent in the gateway's admission queue.",
                                            {"pool", "priority"}, duration_buckets())),
        tenant_tokens_(host.registry.counter("sluice_tenant_tokens_total",
                                             "Tokens charged per tenant (the first 32 tenants charged by name, later ones other).",
                                             {"tenant", "direction"})),
        admitted_(host.registry.counter("sluice_admitted_total",
                                        "Requests admitted: dispatched from the admission queue to an endpoint.",
                                        {"pool", "priority"})) {
    token_series_.resize(admission_.tenants().tenants().size());
  }

  bool enforcing() const override { return enforcing_; }
  AuthOutcome authenticate(const boost::beast::http::fields& headers) const override;
  const Tenant* find_tenant(std::string_view name) const override {
    return enforcing_ ? admission_.tenants().find(name) : nullptr;
  }
  asio::awaitable<AdmitResult> admit(const AdmitRequest& in) override;
  void poke() override {
    if (queued_.load(std::memory_order_relaxed) > 0) dispatch();
  }
  void render(std::string& out) override;
  const std::string& fingerprint() const override { return fingerprint_; }

  std::optional<AdmitResult> try_admit(const AdmitRequest& in) override;
  void placed(uintptr_t cookie);    // the woken request holds its endpoint now (or gave up)
  void finished(uintptr_t cookie);  // the admitted request ended (whatever way)
  void charge(size_t label, int64_t in, int64_t out);
  Time now() const { return host_.now(); }

 private:
  struct TenantSeries {
    Counter* input = nullptr;
    Counter* output = nullptr;
  };
  // Per (pool, priority) series, resolved once (no label strings built per request).
  struct Series {
    Counter* admitted;
    Histogram* queue_time;
  };
  void dispatch();
  // Pops under mu_; returns the woken waiters (other than `self`, which is told by its state).
  void dispatch_locked(std::vector<std::shared_ptr<Waiter>>& woken);
  void expire();
  static void wake(std::vector<std::shared_ptr<Waiter>>& woken);
  void forget(const std::shared_ptr<Waiter>& w);
  Series& series(const std::string& pool, int priority);
  void sync_queued() { queued_.store(dispatcher_.queued(), std::memory_order_relaxed); }

  AdmissionHost host_;
  const std::string fingerprint_;
  const bool enforcing_;
  Admission admission_;
  std::shared_ptr<RedisBudgets> redis_;  // shared budgets (`redis:`); null = Admission's local buckets
  Dispatcher dispatcher_;  // guarded by mu_
  HistogramFamily& queue_time_;
  CounterFamily& tenant_tokens_;
  CounterFamily& admitted_;
  std::mutex labels_mu_;
  std::vector<TenantSeries> token_series_;  // by TenantId, set at the tenant's first charge
  size_t labelled_ = 0;
  std::map<std::pair<std::string, int>, Series> series_;  // guarded by labels_mu_

  std::mutex mu_;  // see the file comment
  std::unordered_map<uintptr_t, std::shared_ptr<Waiter>> waiters_;  // queued or popped-not-yet-woken, by cookie
  uintptr_t next_cookie_ = 1;
  std::atomic<int64_t> queued_{0};  // dispatcher_.queued(), readable without mu_
};

// ---- the ticket ----------------------------------------------------------------------------
void AdmitTicket::on_dispatched() {
  if (started_) return;
  started_ = true;
  req_.on_dispatched();  // from here a cut request is charged its input + delivered output
  shared_.mark_dispatched();
  d_.placed(w_->cookie);
}

std::optional<int64_t> AdmitTicket::inject_max_tokens() const {
  if (!d_.enforcing() || !req_.output_bound().inject_max_tokens) return std::nullopt;
  return req_.output_bound().tokens;
}

void AdmitTicket::settle(int64_t prompt_tokens, int64_t completion_tokens) {
  if (settled_) return;
  settled_ = true;
  if (!started_) {  // never placed on an endpoint (expired, client left, no endpoint): full refund
    req_.release();
    shared_.cancel(d_.now());
  } else if (prompt_tokens >= 0 && completion_tokens >= 0) {
    req_.settle(Usage{prompt_tokens, 0, completion_tokens}, d_.now());
    shared_.settle(Usage{prompt_tokens, 0, completion_tokens}, d_.now());
    d_.charge(tenant_label_, prompt_tokens, completion_tokens);
  } else {  // usage unknown or the stream was cut: estimated input + what was delivered
    req_.release();
    shared_.release();
    d_.charge(tenant_label_, input_estimate_, delivered_);
  }
}

AdmitTicket::~AdmitTicket() {
  settle(-1, -1);
  d_.finished(w_->cookie);
}

// The implicit gate's fast path: a slot promised at once, nothing to charge or refund.
class GateTicket final : public AdmissionTicket {
 public:
  GateTicket(Driver& d, uintptr_t cookie) : d_(d), cookie_(cookie) {}
  ~GateTicket() override;
  void on_dispatched() override;

 private:
  Driver& d_;
  uintptr_t cookie_;
  bool started_ = false;
};

// ---- the driver ------------------------------------------------------------------------------
AuthOutcome Driver::authenticate(const boost::beast::http::fields& headers) const {
  AuthOutcome out;
  if (!enforcing_) {  // the implicit gate: everybody is its one tenant
    out.tenant = &admission_.tenants().tenants().front();
    return out;
  }
  const auto h = headers[boost::beast::http::field::authorization];
  AuthResult auth = admission_.authenticate(std::string_view(h.data(), h.size()));
  out.tenant = auth.tenant;
  out.denial = std::move(auth.denial);
  return out;
}

void Driver::charge(size_t label, int64_t in, int64_t out) {
  if (!enforcing_ || label >= token_series_.size()) return;
  TenantSeries ts;
  {
    std::lock_guard lock(labels_mu_);
    TenantSeries& slot = token_series_[label];
    if (slot.input == nullptr) {  // first charge: a name while labels last (bounded cardinality)
      const std::string_view name = labelled_ < kTenantLabels ? std::string_view(admission_.tenants().tenants()[label].name)
                                                              : std::string_view("other");
      labelled_ += name == "other" ? 0 : 1;
      slot = {&tenant_tokens_.with({name, "input"}), &tenant_tokens_.with({name, "output"})};
    }
    ts = slot;
  }
  if (in > 0) ts.input->inc(static_cast<double>(in));
  if (out > 0) ts.output->inc(static_cast<double>(out));
}

Driver::Series& Driver::series(const std::string& pool, int priority) {
  std::lock_guard lock(labels_mu_);
  auto key = std::make_pair(pool, priority);
  auto it = series_.find(key);
  if (it == series_.end()) {
    const std::string p = std::to_string(priority);
    it = series_.emplace(key, Series{&admitted_.with({pool, p}), &queue_time_.with({pool, p})}).first;
  }
  return it->second;
}

void Driver::wake(std::vector<std::shared_ptr<Waiter>>& woken) {
  for (auto& w : woken)
    asio::post(w->executor, [w] {
      if (w->timer) w->timer->cancel();
    });
}

void Driver::dispatch_locked(std::vector<std::shared_ptr<Waiter>>& woken) {
  const auto gen = host_.current();
  const Dispatcher::RouterOf router_of = [&gen](std::string_view pool) -> const PoolRouter* { return gen->router(pool); };
  dispatcher_.dispatch(admission_, host_.now(), router_of, [&](const Dispatcher::Popped& p) {
    auto it = waiters_.find(p.cookie);
    if (it == waiters_.end()) return;
    auto w = it->second;
    waiters_.erase(it);
    w->state = Waiter::State::popped;
    w->waited = p.waited;
    woken.push_back(std::move(w));
  });
  sync_queued();
}

void Driver::dispatch() {
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    dispatch_locked(woken);
  }
  wake(woken);
}

void Driver::expire() {
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    const Time now = host_.now();
    for (auto& x : admission_.expire(now, thread_rng())) {
      auto it = waiters_.find(x.cookie);
      if (it == waiters_.end()) continue;
      auto w = it->second;
      waiters_.erase(it);
      dispatcher_.on_left_queue(w->cookie, now);
      w->state = Waiter::State::expired;
      w->waited = x.waited;
      w->denial = std::move(x.denial);
      woken.push_back(std::move(w));
    }
    sync_queued();
  }
  wake(woken);
}

void Driver::placed(uintptr_t cookie) {
  {
    std::lock_guard lock(mu_);
    dispatcher_.on_placed(cookie);
  }
  poke();
}

void Driver::finished(uintptr_t cookie) {
  {
    std::lock_guard lock(mu_);
    dispatcher_.on_finished(cookie, host_.now());
    sync_queued();
  }
  poke();
}

void GateTicket::on_dispatched() {
  if (started_) return;
  started_ = true;
  d_.placed(cookie_);
}

GateTicket::~GateTicket() { d_.finished(cookie_); }

std::optional<AdmitResult> Driver::try_admit(const AdmitRequest& in) {
  if (enforcing_ || queued_.load(std::memory_order_relaxed) > 0) return std::nullopt;
  const auto gen = host_.current();
  const PoolRouter* router = gen->router(in.route.pool);
  if (router == nullptr) return std::nullopt;
  const Tenant& tenant = *in.tenant;
  uintptr_t cookie = 0;
  {
    std::lock_guard lock(mu_);
    cookie = next_cookie_++;
    if (!dispatcher_.admit_now(cookie, in.route.pool, tenant.id, tenant.weight, tenant.priority, host_.now(), *router))
      return std::nullopt;
  }
  AdmitResult r;
  r.ticket = std::make_unique<GateTicket>(*this, cookie);
  return r;
}

void Driver::forget(const std::shared_ptr<Waiter>& w) {
  std::lock_guard lock(mu_);
  auto it = waiters_.find(w->cookie);
  if (it == waiters_.end() || it->second != w) return;
  waiters_.erase(it);
  dispatcher_.on_left_queue(w->cookie, host_.now());
  sync_queued();
}

asio::awaitable<AdmitResult> Driver::admit(const AdmitRequest& in) {
  AdmitResult result;
  const Tenant& tenant = *in.tenant;
  std::optional<int64_t> priority;
  if (auto h = in.headers[kPriorityHeader]; enforcing_ && !h.empty())
    priority = parse_priority(std::string_view(h.data(), h.size()));
  if (in.priority) priority = *in.priority;

  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer timer(executor);
  auto w = std::make_shared<Waiter>();
  w->executor = executor;
  w->pool = in.route.pool;
  w->priority = effective_priority(tenant.priority, priority);
  result.priority = w->priority;

  const bool embedding = !generates(in.request.kind);
  const int64_t input = estimate_tokens(in.request.rendered);
  const auto gen = host_.current();
  const PoolRouter* router = gen->router(in.route.pool);
  const Time now = host_.now();
  const bool saturated = router != nullptr && router->saturated(now);
  AdmissionRequest areq{in.route.name, input, embedding ? std::optional<int64_t>(0) : in.request.max_output_tokens,
                        priority, in.request.rendered.size(), 0, in.request.completions};
  // Shared budgets: reserved before the slot and the queue (from the lease, or one Redis call);
  // a later refusal refunds it into the lease.
  SharedReservation shared;
  HeaderList shared_headers;
  if (redis_) {
    const OutputBound bound = output_bound_for(areq.max_output_tokens, admission_.config().default_max_output_tokens);
    SharedReserveResult sr = co_await redis_->reserve(tenant, in.route.name, TokenCost{input, bound.tokens * std::max<int64_t>(1, areq.completions)}, thread_rng());
    shared_headers = sr.status.headers();
    if (!sr.ok()) {
      result.denial = std::move(sr.denial);
      result.headers = std::move(shared_headers);
      co_return result;
    }
    shared = std::move(sr.reservation);
  }
  // Register before admitting: a dispatcher on another thread may pop the cookie at once.
  std::vector<std::shared_ptr<Waiter>> woken;
  AdmissionResult r;
  {
    std::lock_guard lock(mu_);
    w->cookie = next_cookie_++;
    waiters_[w->cookie] = w;
    dispatcher_.on_queued(w->cookie, w->pool, tenant.id, tenant.weight, w->priority, now);
    areq.cookie = w->cookie;
    r = admission_.admit(tenant, areq, saturated, now, thread_rng());
    if (r.ok()) {
      dispatch_locked(woken);  // usually pops this very request: it never waits
    } else {
      waiters_.erase(w->cookie);
      dispatcher_.on_left_queue(w->cookie, now);
      sync_queued();
    }
  }
  std::erase(woken, w);  // told by its state, no wake-up needed
  wake(woken);
  if (redis_) r.rate_limit_headers = std::move(shared_headers);
  if (!r.ok()) {
    result.denial = std::move(r.denial);
    if (enforcing_) result.headers = std::move(r.rate_limit_headers);
    co_return result;
  }
  auto ticket = std::make_unique<AdmitTicket>(*this, std::move(r.request), w,
                                              enforcing_ ? std::move(r.rate_limit_headers) : HeaderList{},
                                              enforcing_ ? tenant.name : std::string(), input, tenant.id,
                                              std::move(shared));

  // ---- wait in the queue: woken by the dispatcher, the TTL, or the client leaving ----
  const Time deadline = r.deadline;
  const auto state = [&] {
    std::lock_guard lock(mu_);
    return w->state;
  };
  w->timer = &timer;
  // The client leaving (the connection's cancellation signal) cancels the wait; the handler runs
  // on this thread (the connection's), as the timer requires.
  auto cancel = in.cancel;
  if (cancel.is_connected()) cancel.assign([&timer](asio::cancellation_type) { timer.cancel(); });
  while (state() == Waiter::State::waiting) {
    if (in.client_gone && in.client_gone()) {
      forget(w);
      if (state() == Waiter::State::waiting) {
        w->timer = nullptr;
        if (cancel.is_connected()) cancel.clear();  // the handler refers to this frame's timer
        result.client_left = true;
        co_return result;  // the ticket leaves the queue and refunds
      }
      break;  // popped meanwhile: the request's path sees the client gone and ends it
    }
    const Duration left = deadline - host_.now();
    timer.expires_after(std::max<Duration>(left + std::chrono::milliseconds(1), std::chrono::milliseconds(1)));
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!ec && host_.now() >= deadline) expire();
  }
  w->timer = nullptr;
  if (cancel.is_connected()) cancel.clear();
  Series& s = series(w->pool, w->priority);
  s.queue_time->observe(to_seconds(w->waited));
  result.queued = w->waited;
  if (w->state == Waiter::State::expired) {
    result.denial = std::move(w->denial);
    if (const HeaderList* h = ticket->response_headers()) result.headers = *h;
    co_return result;  // the ticket refunds in full
  }
  s.admitted->inc();
  result.ticket = std::move(ticket);
  co_return result;
}

void Driver::render(std::string& out) {
  std::vector<std::tuple<std::string, int, int64_t>> depths;
  {
    std::lock_guard lock(mu_);
    dispatcher_.for_each_depth([&](std::string_view pool, int prio, int64_t n) { depths.emplace_back(std::string(pool), prio, n); });
  }
  PromWriter w(out);
  w.family("sluice_queue_depth", "gauge", "Requests waiting in the gateway's admission queue.");
  for (const auto& [pool, prio, n] : depths)
    w.sample("sluice_queue_depth", {{"pool", pool}, {"priority", std::to_string(prio)}}, static_cast<double>(n));
  w.family("sluice_reservations_outstanding", "gauge", "Token reservations held by admitted requests.");
  w.sample("sluice_reservations_outstanding", "",
           enforcing_ ? static_cast<double>(admission_.counters().outstanding_reservations.load(std::memory_order_relaxed)) : 0.0);
  if (redis_) redis_->render(out);
}

// The implicit gate's registry: one tenant, no keys, no limits; requests without a key map to it.
std::shared_ptr<const TenantRegistry> implicit_tenants() {
  TenantsSpec spec;
  TenantSpec t;
  t.name = "-";
  spec.tenants.push_back(t);
  spec.anonymous_tenant = "-";
  return TenantRegistry::build(spec).registry;
}

}  // namespace

std::shared_ptr<AdmissionRuntime> make_admission(const AdmissionHost& host, const Config& config,
                                                 const Generation* previous, std::string& error) {
  const auto& spec = config.admission;
  if (!spec || !spec->enabled) {
    static const std::string kImplicit = "implicit";
    if (previous && previous->admission && previous->admission->fingerprint() == kImplicit) return previous->admission;
    AdmissionConfig ac;
    ac.fair_share.enabled = false;  // one tenant
    return std::make_shared<Driver>(host, implicit_tenants(), ac, kImplicit, false);
  }
  if (previous && previous->admission && !spec->fingerprint.empty() &&
      previous->admission->fingerprint() == spec->fingerprint)
    return previous->admission;  // unchanged: keep budgets, queue and fairness counters
  auto built = TenantRegistry::build(spec->tenants);
  if (!built.registry) {
    error = built.error;
    return nullptr;
  }
  spdlog::info("admission: {} tenants, queue max {} requests", built.registry->size(), spec->config.queue.max_requests);
  AdmissionConfig ac = spec->config;
  ac.shared_budgets = config.redis != nullptr;
  return std::make_shared<Driver>(host, built.registry, ac, spec->fingerprint, true, config.redis.get());
}

}  // namespace sluice
