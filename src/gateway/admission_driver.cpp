#include "gateway/admission_driver.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <map>
#include <mutex>
#include <unordered_map>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/admission/admission.h"
#include "core/admission/admission_config.h"

namespace sluice {

namespace asio = boost::asio;

namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);  // waiter tick: client gone? pool room?
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
  std::string pool;
  TenantId tenant = 0;
  double weight = 1.0;
  int priority = 0;
  Duration waited{0};
  std::optional<Denial> denial;
  bool placed = false;  // popped and the proxy holds its DispatchGuard (or it ended)
};

class AdmitTicket final : public AdmissionTicket {
 public:
  AdmitTicket(Driver& d, AdmittedRequest req, std::shared_ptr<Waiter> w, HeaderList headers, std::string tenant,
         int64_t input_estimate, size_t tenant_label)
      : d_(d), req_(std::move(req)), w_(std::move(w)), headers_(std::move(headers)), tenant_(std::move(tenant)),
        input_estimate_(input_estimate), tenant_label_(tenant_label) {}
  ~AdmitTicket() override;

  void on_dispatched() override;
  void on_output(int64_t n) override {
    req_.on_output(n);
    delivered_ += n > 0 ? n : 0;
  }
  void settle(int64_t prompt_tokens, int64_t completion_tokens) override;
  std::string_view tenant() const override { return tenant_; }
  const HeaderList* response_headers() const override { return &headers_; }
  std::optional<int64_t> inject_max_tokens() const override {
    if (!req_.output_bound().inject_max_tokens) return std::nullopt;
    return req_.output_bound().tokens;
  }

  AdmittedRequest& request() { return req_; }
  const std::shared_ptr<Waiter>& waiter() const { return w_; }

 private:
  Driver& d_;
  AdmittedRequest req_;
  std::shared_ptr<Waiter> w_;
  HeaderList headers_;
  std::string tenant_;
  int64_t input_estimate_;
  size_t tenant_label_;
  int64_t delivered_ = 0;
  bool settled_ = false;
  bool started_ = false;  // left the queue for an endpoint
  friend class Driver;
};

class Driver final : public AdmissionRuntime, public std::enable_shared_from_this<Driver> {
 public:
  Driver(Gateway& gw, std::shared_ptr<const TenantRegistry> tenants, const AdmissionConfig& cfg, std::string fingerprint)
      : gw_(gw), fingerprint_(std::move(fingerprint)), admission_(std::move(tenants), cfg), queue_time_(gw.registry().histogram(
            "sluice_queue_time_seconds", "Time spent in the gateway's admission queue.", {"pool", "priority"},
            duration_buckets())),
        tenant_tokens_(gw.registry().counter("sluice_tenant_tokens_total",
                                             "Tokens charged per tenant (the first 32 tenants charged by name, later ones other).",
                                             {"tenant", "direction"})),
        admitted_(gw.registry().counter("sluice_admitted_total",
                                        "Requests admitted: dispatched from the admission queue to an endpoint.",
                                        {"pool", "priority"})) {
    token_series_.resize(admission_.tenants().tenants().size());
  }

  asio::awaitable<AdmitResult> admit(const AdmitRequest& in) override;
  void render(std::string& out) override;
  const std::string& fingerprint() const override { return fingerprint_; }
  void placed(Waiter& w);   // the woken request holds its endpoint now (or gave up)
  void finished(Waiter& w);  // the admitted request ended (whatever way)
  void charge(size_t label, int64_t in, int64_t out) {
    if (label >= token_series_.size()) return;
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
  void forget(const std::shared_ptr<Waiter>& w, uintptr_t cookie);
  Time now() const { return gw_.now(); }

 private:
  struct PoolState {
    std::map<int, int64_t> queued;  // priority -> waiting requests
    int64_t popped = 0;             // popped, not yet placed
    FairShare share;                // tenants' shares of the pool's slots
  };
  struct TenantSeries {
    Counter* input = nullptr;
    Counter* output = nullptr;
  };
  void dispatch();
  // The waiters' tick: at most one dispatch() per kPoll however many wait (room can appear
  // without a completion, e.g. an endpoint turning healthy).
  void poll_dispatch() {
    const int64_t now = gw_.now().count();
    int64_t last = last_poll_.load(std::memory_order_relaxed);
    if (now - last >= std::chrono::nanoseconds(kPoll).count() &&
        last_poll_.compare_exchange_strong(last, now, std::memory_order_relaxed))
      dispatch();
  }
  void expire();
  void wake(std::vector<std::shared_ptr<Waiter>>& woken);
  bool eligible_locked(TenantId tenant, uintptr_t cookie, const Generation& gen);
  PoolState& pool_locked(const std::string& name) {
    auto it = pools_.find(name);
    if (it == pools_.end()) it = pools_.emplace(name, PoolState{{}, 0, FairShare(admission_.config().fair_share)}).first;
    return it->second;
  }

  Gateway& gw_;
  const std::string fingerprint_;
  Admission admission_;
  HistogramFamily& queue_time_;
  CounterFamily& tenant_tokens_;
  CounterFamily& admitted_;
  std::mutex labels_mu_;
  std::vector<TenantSeries> token_series_;  // by TenantId, set at the tenant's first charge
  size_t labelled_ = 0;

  std::mutex mu_;  // see the file comment
  std::unordered_map<uintptr_t, std::shared_ptr<Waiter>> waiters_;  // queued, by cookie
  std::map<std::string, PoolState, std::less<>> pools_;
  uintptr_t next_cookie_ = 1;
  std::atomic<int64_t> last_poll_{0};
};

// ---- the ticket ----------------------------------------------------------------------------
void AdmitTicket::on_dispatched() {
  if (started_) return;
  started_ = true;
  req_.on_dispatched();  // from here a cut request is charged its input + delivered output
  d_.placed(*w_);
}

void AdmitTicket::settle(int64_t prompt_tokens, int64_t completion_tokens) {
  if (settled_) return;
  settled_ = true;
  if (!started_) {  // never placed on an endpoint (expired, client left, no endpoint): full refund
    req_.release();
  } else if (prompt_tokens >= 0 && completion_tokens >= 0) {
    req_.settle(Usage{prompt_tokens, 0, completion_tokens}, d_.now());
    d_.charge(tenant_label_, prompt_tokens, completion_tokens);
  } else {  // usage unknown or the stream was cut: estimated input + what was delivered
    req_.release();
    d_.charge(tenant_label_, input_estimate_, delivered_);
  }
}

AdmitTicket::~AdmitTicket() {
  settle(-1, -1);
  if (!started_) d_.placed(*w_);  // a popped request that never got placed frees its turn
  d_.finished(*w_);
}

// ---- the driver ------------------------------------------------------------------------------
// May the queued request `cookie` of `tenant` go now? Its pool has no popped-but-unplaced request,
// is not saturated, and the tenant may take one of its free slots (fair_share.h).
bool Driver::eligible_locked(TenantId tenant, uintptr_t cookie, const Generation& gen) {
  auto it = waiters_.find(cookie);
  if (it == waiters_.end()) return true;  // a stale entry: pop it so it leaves the queue
  PoolState& ps = pool_locked(it->second->pool);
  if (ps.popped > 0) return false;
  PoolRouter* r = gen.router(it->second->pool);
  if (r == nullptr) return true;  // unknown pool: the proxy answers it
  const Time now = gw_.now();
  if (r->saturated(now)) return false;
  const auto occ = r->occupancy();
  // The router frees a slot when the upstream exchange ends, the share when the request's ticket
  // does (a little later): count the larger, else a noisy request could take the slot of a light
  // request that is still finishing, the reserve having already been released by its in-flight count.
  return ps.share.may_dispatch(tenant, occ.capacity, std::max(occ.in_flight, ps.share.total_in_flight()), now);
}

void Driver::wake(std::vector<std::shared_ptr<Waiter>>& woken) {
  for (auto& w : woken)
    asio::post(w->executor, [w] {
      if (w->timer) w->timer->cancel();
    });
}

void Driver::dispatch() {
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    const auto gen = gw_.current();  // a pool replaced by a reload: the current one's room counts
    const auto eligible = [this, &gen](TenantId t, uintptr_t cookie) { return eligible_locked(t, cookie, *gen); };
    for (;;) {
      auto d = admission_.pop_next(gw_.now(), eligible);
      if (!d) break;
      auto it = waiters_.find(d->cookie);
      if (it == waiters_.end()) continue;
      auto w = it->second;
      waiters_.erase(it);
      auto& ps = pool_locked(w->pool);
      --ps.queued[w->priority];
      ++ps.popped;
      ps.share.on_dispatched(w->tenant);
      admitted_.with({w->pool, std::to_string(w->priority)}).inc();
      w->state = Waiter::State::popped;
      w->waited = d->waited;
      woken.push_back(std::move(w));
    }
  }
  wake(woken);
}

void Driver::expire() {
  std::vector<std::shared_ptr<Waiter>> woken;
  {
    std::lock_guard lock(mu_);
    for (auto& x : admission_.expire(gw_.now(), thread_rng())) {
      auto it = waiters_.find(x.cookie);
      if (it == waiters_.end()) continue;
      auto w = it->second;
      waiters_.erase(it);
      auto& ps = pool_locked(w->pool);
      --ps.queued[w->priority];
      ps.share.on_left_queue(w->tenant, gw_.now());
      w->state = Waiter::State::expired;
      w->waited = x.waited;
      w->denial = std::move(x.denial);
      woken.push_back(std::move(w));
    }
  }
  wake(woken);
}

void Driver::placed(Waiter& w) {
  {
    std::lock_guard lock(mu_);
    if (w.state != Waiter::State::popped || w.placed) return;
    w.placed = true;
    --pool_locked(w.pool).popped;
  }
  dispatch();
}

void Driver::finished(Waiter& w) {
  {
    std::lock_guard lock(mu_);
    if (w.state == Waiter::State::popped) pool_locked(w.pool).share.on_finished(w.tenant, gw_.now());
  }
  dispatch();
}

void Driver::forget(const std::shared_ptr<Waiter>& w, uintptr_t cookie) {
  std::lock_guard lock(mu_);
  auto it = waiters_.find(cookie);
  if (it == waiters_.end() || it->second != w) return;
  waiters_.erase(it);
  auto& ps = pool_locked(w->pool);
  --ps.queued[w->priority];
  ps.share.on_left_queue(w->tenant, gw_.now());
}

asio::awaitable<AdmitResult> Driver::admit(const AdmitRequest& in) {
  AdmitResult result;
  const auto auth_header = in.headers[boost::beast::http::field::authorization];
  AuthResult auth = admission_.authenticate(std::string_view(auth_header.data(), auth_header.size()));
  if (!auth.ok()) {
    result.denial = std::move(auth.denial);
    co_return result;
  }
  const Tenant& tenant = *auth.tenant;
  std::optional<int64_t> priority;
  if (auto h = in.headers[kPriorityHeader]; !h.empty()) priority = parse_priority(std::string_view(h.data(), h.size()));

  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer timer(executor);
  auto w = std::make_shared<Waiter>();
  w->executor = executor;
  w->timer = &timer;
  w->pool = in.route.pool;
  w->tenant = tenant.id;
  w->weight = tenant.weight;
  w->priority = effective_priority(tenant.priority, priority);

  const bool embedding = in.request.kind == ApiKind::embedding;
  const int64_t input = estimate_tokens(in.request.rendered);
  PoolRouter* router = gw_.current()->router(in.route.pool);
  const bool saturated = router != nullptr && router->saturated(gw_.now());
  AdmissionRequest areq{in.route.name, input, embedding ? std::optional<int64_t>(0) : in.request.max_output_tokens,
                        priority, in.request.rendered.size(), 0};
  // Register before admitting: a dispatcher on another thread may pop the cookie at once.
  uintptr_t cookie = 0;
  {
    std::lock_guard lock(mu_);
    cookie = next_cookie_++;
    waiters_[cookie] = w;
    auto& ps = pool_locked(w->pool);
    ++ps.queued[w->priority];
    ps.share.on_queued(w->tenant, w->weight, gw_.now(), w->priority);
  }
  areq.cookie = cookie;
  AdmissionResult r = admission_.admit(tenant, areq, saturated, gw_.now(), thread_rng());
  if (!r.ok()) {
    forget(w, cookie);
    w->timer = nullptr;
    result.denial = std::move(r.denial);
    result.headers = std::move(r.rate_limit_headers);
    co_return result;
  }
  const size_t label = tenant.id;
  auto ticket = std::make_unique<AdmitTicket>(*this, std::move(r.request), w, std::move(r.rate_limit_headers),
                                         tenant.name, input, label);
  dispatch();

  // ---- wait in the queue ----
  const Time deadline = r.deadline;
  for (;;) {
    Waiter::State st;
    {
      std::lock_guard lock(mu_);
      st = w->state;
    }
    if (st != Waiter::State::waiting) break;
    if (in.client_gone && in.client_gone()) {
      forget(w, cookie);
      std::lock_guard lock(mu_);
      if (w->state == Waiter::State::waiting) {
        w->timer = nullptr;
        result.client_left = true;
        co_return result;  // the ticket leaves the queue and refunds
      }
      continue;
    }
    const Duration left = deadline - gw_.now();
    timer.expires_after(std::clamp<Duration>(left + std::chrono::milliseconds(1), std::chrono::milliseconds(1), kPoll));
    co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (gw_.now() >= deadline) expire();
    else poll_dispatch();
  }
  w->timer = nullptr;
  if (w->state == Waiter::State::expired) {
    queue_time_.with({w->pool, std::to_string(w->priority)}).observe(to_seconds(w->waited));
    result.denial = std::move(w->denial);
    result.headers = *ticket->response_headers();
    co_return result;  // the ticket refunds in full
  }
  queue_time_.with({w->pool, std::to_string(w->priority)}).observe(to_seconds(w->waited));
  result.ticket = std::move(ticket);
  co_return result;
}

void Driver::render(std::string& out) {
  std::vector<std::tuple<std::string, int, int64_t>> depths;
  {
    std::lock_guard lock(mu_);
    for (const auto& [pool, ps] : pools_)
      for (const auto& [prio, n] : ps.queued) depths.emplace_back(pool, prio, n);
  }
  out += "# HELP sluice_queue_depth Requests waiting in the gateway's admission queue.\n"
         "# TYPE sluice_queue_depth gauge\n";
  for (const auto& [pool, prio, n] : depths)
    fmt::format_to(std::back_inserter(out), "sluice_queue_depth{{pool=\"{}\",priority=\"{}\"}} {}\n", pool, prio, n);
  out += "# HELP sluice_reservations_outstanding Token reservations held by admitted requests.\n"
         "# TYPE sluice_reservations_outstanding gauge\n";
  fmt::format_to(std::back_inserter(out), "sluice_reservations_outstanding {}\n",
                 admission_.counters().outstanding_reservations.load(std::memory_order_relaxed));
}

}  // namespace

std::shared_ptr<AdmissionRuntime> make_admission(Gateway& gw, const Config& config, const Generation* previous,
                                                 std::string& error) {
  const auto& spec = config.admission;
  if (!spec || !spec->enabled) return nullptr;
  if (previous && previous->admission && !spec->fingerprint.empty() &&
      previous->admission->fingerprint() == spec->fingerprint)
    return previous->admission;  // unchanged: keep budgets, queue and fairness counters
  auto built = TenantRegistry::build(spec->tenants);
  if (!built.registry) {
    error = built.error;
    return nullptr;
  }
  spdlog::info("admission: {} tenants, queue max {} requests", built.registry->size(), spec->config.queue.max_requests);
  return std::make_shared<Driver>(gw, built.registry, spec->config, spec->fingerprint);
}

}  // namespace sluice
