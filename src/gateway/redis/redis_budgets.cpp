#include "gateway/redis/redis_budgets.h"

#include <unistd.h>

#include <random>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/prom_writer.h"
#include "gateway/observability/metrics.h"

namespace sluice {

namespace asio = boost::asio;

namespace {

std::string make_replica_id() {
  char host[128] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::random_device rd;
  return fmt::format("{}-{}-{:08x}", host, getpid(), rd());
}

SharedBudgetConfig budget_config(const RedisSpec& spec) {
  SharedBudgetConfig c;
  c.lease = spec.lease;
  c.key_prefix = spec.key_prefix;
  c.replica_id = make_replica_id();
  c.held_ttl = std::max<Duration>(spec.replica_window * 3, std::chrono::seconds(30));
  return c;
}

RedisTarget target_of(const RedisSpec& spec) {
  RedisTarget t;
  t.host = spec.host;
  t.port = spec.port;
  t.unix_path = spec.unix_path;
  t.timeout = spec.timeout;
  return t;
}

int64_t ms(Duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

}  // namespace

RedisBudgets::RedisBudgets(const RedisSpec& spec, std::shared_ptr<const TenantRegistry> tenants,
                           AdmissionCounters* counters, JitterPolicy jitter, MetricsRegistry& registry,
                           std::function<Time()> now)
    : spec_(spec), now_(std::move(now)), budget_(std::move(tenants), budget_config(spec), counters, jitter),
      client_(target_of(spec)) {
  auto& fam = registry.counter("sluice_shared_budget_reservations_total",
                               "Reservations on shared (Redis) token budgets by how they were decided: lease (local "
                               "credit, no Redis call), redis (one script call), fallback (Redis unreachable, local "
                               "1/N bucket), closed (Redis unreachable, refused), refused (rate limited or too large).",
                               {"path"});
  const char* names[kPathCount] = {"lease", "redis", "fallback", "closed", "refused"};
  for (int i = 0; i < kPathCount; ++i) paths_[i] = &fam.with({names[i]});
  garbled_ = &registry.counter("sluice_redis_garbled_replies_total",
                               "Redis replies to the budget script that did not have the expected shape.", {})
                  .with({});
  down_events_ = &registry.counter("sluice_redis_down_total", "Times the shared budget store became unreachable.", {})
                      .with({});
  spdlog::info("shared budgets in Redis at {} (on_error: {}, replica {})", spec_.url,
               spec_.fail_open ? "open" : "closed", budget_.config().replica_id);
}

RedisBudgets::~RedisBudgets() = default;

void RedisBudgets::mark(bool up, std::string_view why) {
  const bool was = up_.exchange(up, std::memory_order_relaxed);
  if (was == up) return;
  budget_.set_degraded(!up);
  if (!up) {
    down_events_->inc();
    spdlog::warn("redis: shared budget store at {} unreachable ({}); on_error {}: {}", spec_.url, why,
                 spec_.fail_open ? "open" : "closed",
                 spec_.fail_open ? fmt::format("each replica enforces 1/{} of every budget", budget_.replicas())
                                 : std::string("requests the local leases cannot cover get 429"));
  } else {
    spdlog::info("redis: shared budget store at {} is back", spec_.url);
  }
}

void RedisBudgets::count_failure(const RedisReply& r, bool garbled) {
  if (garbled) garbled_->inc();
}

SharedReserveResult RedisBudgets::on_unreachable(const Tenant& tenant, std::string_view model, const TokenCost& cost,
                                                 AdmissionRng& rng) {
  if (spec_.fail_open) {
    auto r = budget_.reserve_fallback(tenant, model, cost, now_(), rng);
    paths_[r.ok() ? kFallback : kRefused]->inc();
    return r;
  }
  paths_[kClosed]->inc();
  return budget_.unavailable(tenant, model, now_(), rng);
}

asio::awaitable<SharedReserveResult> RedisBudgets::reserve(const Tenant& tenant, std::string_view model, TokenCost cost,
                                                           AdmissionRng& rng) {
  SharedReserveResult local = budget_.reserve_local(tenant, model, cost, now_());
  if (!local.ask) {
    paths_[local.ok() ? kLease : kRefused]->inc();
    co_return local;
  }
  const LeaseAsk ask = std::move(*local.ask);
  const auto ex = co_await asio::this_coro::executor;
  start_sync_loop(ex);
  if (!up_.load(std::memory_order_relaxed)) {
    budget_.abandon(ask);
    co_return on_unreachable(tenant, model, cost, rng);
  }
  const RedisReply reply = co_await client_.call(
      reserve_argv(budget_.held_key(), ask.buckets, ask.args, ms(budget_.config().held_ttl)));
  std::optional<ScriptReply> parsed;
  if (reply.ok() && reply.integers) parsed = parse_script_reply(reply.values, ask.buckets.size());
  if (!parsed) {
    count_failure(reply, reply.ok());
    budget_.abandon(ask);
    mark(false, reply.ok() ? std::string_view("unexpected reply") : to_string(reply.status));
    co_return on_unreachable(tenant, model, cost, rng);
  }
  SharedReserveResult r = budget_.complete(ask, *parsed, now_(), rng);
  paths_[r.ok() ? kRedis : kRefused]->inc();
  co_return r;
}

void RedisBudgets::start_sync_loop(const asio::any_io_executor& ex) {
  if (sync_started_.exchange(true, std::memory_order_relaxed)) return;
  asio::co_spawn(ex, sync_loop(weak_from_this()), asio::detached);
}

asio::awaitable<void> RedisBudgets::sync_loop(std::weak_ptr<RedisBudgets> weak) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    Duration interval;
    {
      auto self = weak.lock();
      if (!self) co_return;
      interval = self->spec_.lease.sync_interval;
    }
    timer.expires_after(interval);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    auto self = weak.lock();
    if (!self) co_return;
    co_await self->sync_once();
  }
}

asio::awaitable<void> RedisBudgets::sync_once() {
  auto self = shared_from_this();
  const RedisReply beat = co_await client_.call(
      beat_argv(budget_.replicas_key(), budget_.config().replica_id, ms(spec_.replica_window)));
  if (!beat.ok() || !beat.integers || beat.values.size() != 3 || beat.values[0] != 1) {
    count_failure(beat, beat.ok());
    mark(false, beat.ok() ? std::string_view("unexpected reply") : to_string(beat.status));
    co_return;
  }
  budget_.set_replicas(static_cast<int>(std::clamp<int64_t>(beat.values[1], 1, 1 << 20)));
  mark(true, "");
  auto calls = budget_.due_syncs(now_());
  const auto ex = co_await asio::this_coro::executor;
  const int64_t ttl = ms(budget_.config().held_ttl);
  // Off the request path: a longer deadline than a reservation's, and at most kChunk calls in
  // flight, so a burst of settlements (1,000 tenants) never queues ahead of the requests' calls
  // for long nor times out as a block.
  constexpr size_t kChunk = 32;
  const Duration timeout = spec_.timeout * 5;
  struct Latch {
    explicit Latch(const asio::any_io_executor& e) : timer(e, asio::steady_timer::time_point::max()) {}
    size_t left = 0;
    asio::steady_timer timer;
  };
  for (size_t first = 0; first < calls.size(); first += kChunk) {
    auto latch = std::make_shared<Latch>(ex);
    latch->left = std::min(kChunk, calls.size() - first);
    for (size_t k = first; k < first + latch->left; ++k) {
    // Pipelined: each settle runs as its own coroutine on this connection; none waits for another.
    asio::co_spawn(
        ex,
        [self, call = std::move(calls[k]), ttl, timeout, latch]() -> asio::awaitable<void> {
          struct Done {
            std::shared_ptr<Latch> l;
            ~Done() {
              if (--l->left == 0) l->timer.cancel();
            }
          } done{latch};
          const RedisReply r =
              co_await self->client_.call(settle_argv(self->budget_.held_key(), call.buckets, call.args, ttl), timeout);
          std::optional<ScriptReply> parsed;
          if (r.ok() && r.integers) parsed = parse_script_reply(r.values, call.buckets.size());
          if (!parsed) {
            self->count_failure(r, r.ok());
            self->budget_.on_sync_failed(call);
            self->mark(false, r.ok() ? std::string_view("unexpected reply") : to_string(r.status));
            co_return;
          }
          self->budget_.on_synced(call, *parsed, self->now_());
        },
        asio::detached);
    }
    co_await latch->timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (!up_.load(std::memory_order_relaxed)) {  // the store failed meanwhile: the rest waits for the next tick
      for (size_t k = first + kChunk; k < calls.size(); ++k) budget_.on_sync_failed(calls[k], false);
      break;
    }
  }
}

void RedisBudgets::render(std::string& out) const {
  PromWriter w(out);
  w.family("sluice_redis_up", "gauge", "1 while the shared budget store answers, 0 while on_error applies.");
  w.sample("sluice_redis_up", "", up_.load(std::memory_order_relaxed) ? 1.0 : 0.0);
  w.family("sluice_redis_errors_total", "counter", "Failed calls to the shared budget store, by kind.");
  const auto& st = client_.stats();
  for (auto s : {RedisReply::Status::error_reply, RedisReply::Status::timeout, RedisReply::Status::io,
                 RedisReply::Status::protocol, RedisReply::Status::unavailable})
    w.sample("sluice_redis_errors_total", {{"kind", std::string(to_string(s))}},
             static_cast<double>(st.failures[static_cast<size_t>(s)].load(std::memory_order_relaxed)));
  w.family("sluice_redis_calls_total", "counter", "Calls to the shared budget store.");
  w.sample("sluice_redis_calls_total", "", static_cast<double>(st.calls.load(std::memory_order_relaxed)));
  w.family("sluice_redis_connects_total", "counter", "Connections opened to the shared budget store.");
  w.sample("sluice_redis_connects_total", "", static_cast<double>(st.connects.load(std::memory_order_relaxed)));
  w.family("sluice_shared_budget_held_units", "gauge",
           "Units this replica holds from the shared buckets (lease credit + running reservations).");
  w.sample("sluice_shared_budget_held_units", "", static_cast<double>(budget_.held_units()));
  w.family("sluice_shared_budget_replicas", "gauge", "Gateway replicas seen recently (N of the fail-open 1/N).");
  w.sample("sluice_shared_budget_replicas", "", static_cast<double>(budget_.replicas()));
}

}  // namespace sluice
