#include "core/admission/shared_budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

namespace sluice {

namespace {

using namespace limit_dim;

std::array<std::optional<int64_t>, kLimitDimensionCount> limits_of(const RateLimits& l) {
  return {l.requests_per_min, l.input_tokens_per_min, l.output_tokens_per_min, l.tokens_per_day};
}

int64_t burst_of(const GcraSpec& s) { return s.burst > 0 ? s.burst : s.limit; }

}  // namespace

// ---- SharedReservation -----------------------------------------------------------------------

SharedReservation& SharedReservation::operator=(SharedReservation&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = std::exchange(o.budget_, nullptr);
    tenant_ = o.tenant_;
    scope_ = o.scope_;
    cost_ = o.cost_;
    fallback_ = o.fallback_;
    dispatched_ = o.dispatched_;
    delivered_ = o.delivered_;
  }
  return *this;
}

void SharedReservation::settle(const Usage& actual, Time now) {
  if (budget_ == nullptr) return;
  budget_->observe(now);
  budget_->apply_settlement(*this, actual, false);
  budget_ = nullptr;
}

void SharedReservation::cancel(Time now) {
  if (budget_ == nullptr) return;
  budget_->observe(now);
  budget_->apply_settlement(*this, {}, true);
  budget_ = nullptr;
}

void SharedReservation::release() {
  if (budget_ == nullptr) return;
  const Time now = budget_->latest();
  if (dispatched_)
    settle(Usage{cost_.input_tokens, 0, delivered_}, now);
  else
    cancel(now);
}

// ---- SharedBudget ----------------------------------------------------------------------------

SharedBudget::SharedBudget(std::shared_ptr<const TenantRegistry> tenants, SharedBudgetConfig config,
                           AdmissionCounters* counters, JitterPolicy jitter)
    : tenants_(std::move(tenants)), config_(std::move(config)), counters_(counters), jitter_(jitter),
      held_key_(config_.key_prefix + "held:" + config_.replica_id), replicas_key_(config_.key_prefix + "replicas") {
  const size_t n = tenants_->size();
  state_ = std::make_unique<TenantState[]>(n);
  for (size_t i = 0; i < n; ++i) {
    const Tenant& t = tenants_->tenant(static_cast<TenantId>(i));
    auto& scopes = state_[i].scopes;
    scopes.resize(1 + t.model_limits.size());
    for (size_t s = 0; s < scopes.size(); ++s) {
      const RateLimits& l = s == 0 ? t.limits : t.model_limits[s - 1].limits;
      const std::string model = s == 0 ? "*" : t.model_limits[s - 1].model;
      const auto lim = limits_of(l);
      for (size_t d = 0; d < kLimitDimensionCount; ++d) {
        if (!lim[d]) continue;
        const Duration period = d == kDay ? Duration(std::chrono::hours(24)) : Duration(std::chrono::minutes(1));
        Bucket b;
        b.ref.spec = GcraSpec{*lim[d], period, *lim[d]};
        b.ref.key = fmt::format("{}b:{}:{}:{}:{}/{}", config_.key_prefix, t.name, model,
                                to_string(static_cast<LimitDimension>(d)), *lim[d],
                                std::chrono::duration_cast<std::chrono::milliseconds>(period).count());
        scopes[s].buckets[d] = std::move(b);
      }
    }
  }
}

SharedBudget::~SharedBudget() { assert(outstanding() == 0 && "a SharedReservation outlived its SharedBudget"); }

void SharedBudget::observe(Time now) {
  int64_t seen = latest_ns_.load(std::memory_order_relaxed);
  while (now.count() > seen && !latest_ns_.compare_exchange_weak(seen, now.count(), std::memory_order_relaxed)) {
  }
}

int32_t SharedBudget::scope_of(const Tenant& tenant, std::string_view model) const {
  const ModelLimits* ml = tenant.limits_for_model(model);
  return ml ? static_cast<int32_t>(ml - tenant.model_limits.data()) : -1;
}

// f(Bucket&, scope slot 0|1, dimension) for the tenant-wide buckets and the model scope's.
template <typename F>
void SharedBudget::for_buckets(TenantState& st, int32_t scope, F&& f) {
  for (size_t d = 0; d < kLimitDimensionCount; ++d)
    if (st.scopes[0].buckets[d]) f(*st.scopes[0].buckets[d], 0, d);
  if (scope >= 0)
    for (size_t d = 0; d < kLimitDimensionCount; ++d)
      if (st.scopes[1 + scope].buckets[d]) f(*st.scopes[1 + scope].buckets[d], 1, d);
}

// The shared remaining as last seen, refilled at the bucket's rate since, plus this replica's credit.
int64_t SharedBudget::remaining_now(const Bucket& b, Time now) const {
  const int64_t burst = burst_of(b.ref.spec);
  if (b.shared_remaining < 0) return burst;
  const double elapsed = std::max(0.0, to_seconds(now - b.seen_at));
  const double refill = elapsed * static_cast<double>(b.ref.spec.limit) / to_seconds(b.ref.spec.period);
  const double r = static_cast<double>(b.shared_remaining) + refill + static_cast<double>(b.credit);
  return std::min<int64_t>(burst, static_cast<int64_t>(r));
}

RateLimitStatus SharedBudget::status_locked(TenantState& st, int32_t scope, Time now) {
  RateLimitStatus s;
  for_buckets(st, scope, [&](Bucket& b, int, size_t d) {
    if (d == kDay) return;
    RateLimitStatus::Dim& into = d == kReq ? s.requests : s.tokens;
    const int64_t rem = remaining_now(b, now);
    if (into.present && into.remaining <= rem) return;
    const Duration reset = b.shared_remaining < 0 ? Duration::zero()
                                                  : std::max(Duration::zero(), b.shared_reset - (now - b.seen_at));
    into = {true, b.ref.spec.limit, rem, reset};
  });
  return s;
}

RateLimitStatus SharedBudget::status(const Tenant& tenant, std::string_view model, Time now) {
  TenantState& st = state_[tenant.id];
  std::lock_guard lock(st.mu);
  return status_locked(st, scope_of(tenant, model), now);
}

std::optional<Denial> SharedBudget::too_large(TenantState& st, const Tenant& tenant, std::string_view model,
                                              int32_t scope, const Need& need) {
  std::optional<Denial> out;
  for_buckets(st, scope, [&](Bucket& b, int slot, size_t d) {
    if (out || need[d] <= burst_of(b.ref.spec)) return;
    Denial den;
    den.reason = RejectReason::too_large;
    den.should_retry = false;
    den.error.status = 429;
    den.error.type = d == kReq ? "requests" : "tokens";
    den.error.code = "rate_limit_exceeded";
    const std::string who = slot == 1 ? fmt::format("{} for model {}", tenant.name, model) : tenant.name;
    den.error.message = fmt::format(
        "Request too large for {} on {}: Limit {}, Requested {}. The input or output tokens must be reduced in "
        "order to run successfully.",
        who, limit_label(d), burst_of(b.ref.spec), need[d]);
    out = std::move(den);
  });
  return out;
}

SharedReservation SharedBudget::make_reservation(const Tenant& tenant, int32_t scope, const TokenCost& cost,
                                                 bool fallback) {
  SharedReservation r;
  r.budget_ = this;
  r.tenant_ = tenant.id;
  r.scope_ = scope;
  r.cost_ = cost;
  r.fallback_ = fallback;
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  return r;
}

SharedReserveResult SharedBudget::reserve_local(const Tenant& tenant, std::string_view model, const TokenCost& cost_in,
                                                Time now) {
  observe(now);
  const TokenCost cost{std::max<int64_t>(0, cost_in.input_tokens), std::max<int64_t>(0, cost_in.output_bound)};
  const Need need = limit_amounts(cost);
  const int32_t scope = scope_of(tenant, model);
  TenantState& st = state_[tenant.id];
  SharedReserveResult out;
  std::lock_guard lock(st.mu);
  if (auto d = too_large(st, tenant, model, scope, need)) {
    out.status = status_locked(st, scope, now);
    if (counters_) counters_->reject(d->reason);
    out.denial = std::move(d);
    return out;
  }
  bool covered = true;
  for_buckets(st, scope, [&](Bucket& b, int, size_t d) { covered = covered && b.credit >= need[d]; });
  if (covered) {
    for_buckets(st, scope, [&](Bucket& b, int, size_t d) {
      b.credit -= need[d];
      b.inflight += need[d];
      b.last_used = now;
      b.touched = true;
    });
    out.status = status_locked(st, scope, now);
    out.reservation = make_reservation(tenant, scope, cost, false);
    return out;
  }
  LeaseAsk ask;
  ask.tenant = tenant.id;
  ask.scope = scope;
  ask.cost = cost;
  const int replicas = this->replicas();
  for_buckets(st, scope, [&](Bucket& b, int slot, size_t d) {
    const int64_t pin = std::min(b.credit, need[d]);
    b.credit -= pin;
    const int64_t burst = burst_of(b.ref.spec);
    const int64_t seen = b.shared_remaining < 0 ? burst : remaining_now(b, now) - b.credit;
    ask.buckets.push_back(&b.ref);
    ask.args.push_back({need[d] - pin, lease_slice(burst, std::max<int64_t>(0, seen - (need[d] - pin)), replicas,
                                                   config_.lease)});
    ask.slots.push_back(static_cast<uint8_t>(slot * kLimitDimensionCount + d));
    ask.pinned.push_back(pin);
  });
  out.ask = std::move(ask);
  return out;
}

void SharedBudget::abandon(const LeaseAsk& ask) {
  TenantState& st = state_[ask.tenant];
  std::lock_guard lock(st.mu);
  size_t i = 0;
  for_buckets(st, ask.scope, [&](Bucket& b, int, size_t) { b.credit += ask.pinned[i++]; });
}

SharedReserveResult SharedBudget::complete(const LeaseAsk& ask, const ScriptReply& reply, Time now, AdmissionRng& rng) {
  observe(now);
  const Tenant& tenant = tenants_->tenant(ask.tenant);
  TenantState& st = state_[ask.tenant];
  const Need need = limit_amounts(ask.cost);
  SharedReserveResult out;
  std::unique_lock lock(st.mu);
  size_t i = 0;
  const Bucket* worst = nullptr;
  size_t worst_dim = 0;
  int worst_slot = 0;
  for_buckets(st, ask.scope, [&](Bucket& b, int slot, size_t d) {
    const ScriptBucketReply& r = reply.buckets[i];
    b.shared_remaining = r.remaining;
    b.shared_reset = std::chrono::milliseconds(r.reset_ms);
    b.seen_at = now;
    b.touched = true;
    if (reply.granted) {
      b.credit += ask.pinned[i] + r.granted - need[d];
      if (b.credit < 0) {  // the script grants at least the need; keep the invariant anyway
        b.charge += -b.credit;
        b.credit = 0;
      }
      b.inflight += need[d];
      b.held_reported = b.held_reported < 0 ? -1 : b.held_reported + r.granted;
      b.last_used = now;
    } else {
      b.credit += ask.pinned[i];
      if (static_cast<int>(i) + 1 == reply.worst) {
        worst = &b;
        worst_dim = d;
        worst_slot = slot;
      }
    }
    ++i;
  });
  out.status = status_locked(st, ask.scope, now);
  if (reply.granted) {
    out.reservation = make_reservation(tenant, ask.scope, ask.cost, false);
    return out;
  }
  Denial den;
  den.reason = RejectReason::rate_limit;
  den.error.status = 429;
  den.error.type = worst_dim == kReq ? "requests" : "tokens";
  den.error.code = "rate_limit_exceeded";
  den.retry_after = jittered(std::chrono::milliseconds(std::max<int64_t>(1, reply.retry_ms)), rng, jitter_);
  const std::string who =
      worst_slot == 1 ? fmt::format("{} for model {}", tenant.name, tenant.model_limits[ask.scope].model) : tenant.name;
  const int64_t limit = worst ? worst->ref.spec.limit : 0;
  const int64_t used = worst ? burst_of(worst->ref.spec) - worst->shared_remaining : 0;
  den.error.message =
      fmt::format("Rate limit reached for {} on {}: Limit {}, Used {}, Requested {}. Please try again in {}.", who,
                  limit_label(worst_dim), limit, used, need[worst_dim], format_go_duration(den.retry_after));
  lock.unlock();
  if (counters_) counters_->reject(den.reason);
  out.denial = std::move(den);
  return out;
}

SharedReserveResult SharedBudget::reserve_fallback(const Tenant& tenant, std::string_view model, const TokenCost& cost_in,
                                                   Time now, AdmissionRng& rng) {
  observe(now);
  const TokenCost cost{std::max<int64_t>(0, cost_in.input_tokens), std::max<int64_t>(0, cost_in.output_bound)};
  const Need need = limit_amounts(cost);
  const int32_t scope = scope_of(tenant, model);
  const int n = replicas();
  TenantState& st = state_[tenant.id];
  SharedReserveResult out;
  std::unique_lock lock(st.mu);
  Duration worst{0};
  const Bucket* worst_b = nullptr;
  size_t worst_dim = 0;
  for_buckets(st, scope, [&](Bucket& b, int, size_t d) {
    if (!b.fallback) {  // 1/N of the budget, started at this replica's share of what was left
      const int64_t burst = burst_of(b.ref.spec);
      const GcraSpec spec{std::max<int64_t>(1, b.ref.spec.limit / n), b.ref.spec.period, std::max<int64_t>(1, burst / n)};
      b.fallback.emplace(spec);
      const int64_t share = std::min(b.fallback->burst(), std::max<int64_t>(0, remaining_now(b, now) - b.credit) / n);
      b.fallback->force_consume(b.fallback->burst() - share, now);
    }
    const Duration w = b.fallback->time_until(need[d], now);
    if (w > worst || (w == Gcra::kNever && worst != Gcra::kNever)) {
      worst = w;
      worst_b = &b;
      worst_dim = d;
    }
  });
  if (worst_b == nullptr) {
    for_buckets(st, scope, [&](Bucket& b, int, size_t d) {
      [[maybe_unused]] const bool ok = b.fallback->try_consume(need[d], now);
      assert(ok);
      b.last_used = now;
    });
    out.status = status_locked(st, scope, now);
    out.reservation = make_reservation(tenant, scope, cost, true);
    return out;
  }
  Denial den;
  den.reason = RejectReason::rate_limit;
  den.error.status = 429;
  den.error.type = worst_dim == kReq ? "requests" : "tokens";
  den.error.code = "rate_limit_exceeded";
  den.retry_after = jittered(worst == Gcra::kNever ? config_.unavailable_retry : worst, rng, jitter_);
  den.error.message = fmt::format(
      "Rate limit reached for {} on {} (shared budget store unreachable: this gateway enforces its 1/{} share, Limit "
      "{}). Please try again in {}.",
      tenant.name, limit_label(worst_dim), n, worst_b->fallback->limit(), format_go_duration(den.retry_after));
  out.status = status_locked(st, scope, now);
  lock.unlock();
  if (counters_) counters_->reject(den.reason);
  out.denial = std::move(den);
  return out;
}

SharedReserveResult SharedBudget::unavailable(const Tenant& tenant, std::string_view model, Time now, AdmissionRng& rng) {
  SharedReserveResult out;
  out.status = status(tenant, model, now);
  Denial den;
  den.reason = RejectReason::rate_limit;
  den.error.status = 429;
  den.error.type = "tokens";
  den.error.code = "rate_limit_unavailable";
  den.retry_after = jittered(config_.unavailable_retry, rng, jitter_);
  den.error.message = fmt::format(
      "Rate limit state for {} is unavailable: the shared budget store cannot be reached and this gateway is "
      "configured to refuse (redis.on_error: closed). Please try again in {}.",
      tenant.name, format_go_duration(den.retry_after));
  if (counters_) counters_->reject(den.reason);
  out.denial = std::move(den);
  return out;
}

void SharedBudget::apply_settlement(const SharedReservation& r, const Usage& actual, bool refund_all) {
  const Need reserved = limit_amounts(r.cost_);
  Need used{};
  if (!refund_all) {
    const int64_t in = std::max<int64_t>(0, actual.input_tokens - std::max<int64_t>(0, actual.cached_input_tokens));
    const int64_t out = std::max<int64_t>(0, actual.output_tokens);
    used = {1, in, out, in + out};
  }
  const Time now = latest();
  TenantState& st = state_[r.tenant_];
  {
    std::lock_guard lock(st.mu);
    for_buckets(st, r.scope_, [&](Bucket& b, int, size_t d) {
      b.touched = true;
      if (r.fallback_) {
        const int64_t delta = used[d] - reserved[d];
        if (b.fallback) {
          if (delta > 0) b.fallback->force_consume(delta, now);
          else if (delta < 0) b.fallback->refund(-delta, now);
        }
        b.charge += used[d];  // never taken from Redis: charged there when it is back
        return;
      }
      b.inflight -= reserved[d];
      b.credit += reserved[d] - used[d];
      if (b.credit < 0) {  // used more than reserved and the credit could not cover it
        b.charge += -b.credit;
        b.credit = 0;
      }
    });
  }
  outstanding_.fetch_sub(1, std::memory_order_relaxed);
}

std::vector<SyncCall> SharedBudget::due_syncs(Time now) {
  observe(now);
  std::vector<SyncCall> out;
  const int replicas = this->replicas();
  for (size_t t = 0; t < tenants_->size(); ++t) {
    TenantState& st = state_[t];
    std::lock_guard lock(st.mu);
    for (size_t s = 0; s < st.scopes.size(); ++s) {
      SyncCall call;
      for (size_t d = 0; d < kLimitDimensionCount; ++d) {
        auto& ob = st.scopes[s].buckets[d];
        if (!ob) continue;
        Bucket& b = *ob;
        const int64_t burst = burst_of(b.ref.spec);
        const int64_t shared = b.shared_remaining < 0 ? burst : b.shared_remaining;
        const int64_t keep = lease_keep(burst, shared, replicas, now - b.last_used, config_.lease);
        // Hysteresis: credit up to 2 x keep stays (refunds of running requests would otherwise
        // cause a give-back every tick); without a slice (idle, or near the limit) all of it goes.
        const int64_t give = b.credit > 2 * keep ? b.credit - keep : 0;
        const int64_t held = b.credit - give + b.inflight;
        const bool stale = now - b.seen_at >= config_.lease.refresh;
        if (give == 0 && b.charge == 0 && !((b.touched || held != b.held_reported) && stale)) continue;
        b.credit -= give;
        call.buckets.push_back(&b.ref);
        call.args.push_back({b.charge - give, held});
        call.dims.push_back(static_cast<uint8_t>(d));
        call.charged.push_back(b.charge);
        b.charge = 0;
        b.touched = false;
        b.held_reported = held;
        b.seen_at = now;  // the reply refreshes it; a failed call is retried after `refresh`
      }
      if (call.buckets.empty()) continue;
      call.tenant = static_cast<TenantId>(t);
      call.scope = static_cast<int32_t>(s) - 1;
      out.push_back(std::move(call));
    }
  }
  return out;
}

void SharedBudget::on_synced(const SyncCall& call, const ScriptReply& reply, Time now) {
  TenantState& st = state_[call.tenant];
  std::lock_guard lock(st.mu);
  Scope& sc = st.scopes[call.scope + 1];
  for (size_t i = 0; i < call.dims.size() && i < reply.buckets.size(); ++i) {
    auto& b = sc.buckets[call.dims[i]];
    if (!b) continue;
    b->shared_remaining = reply.buckets[i].remaining;
    b->shared_reset = std::chrono::milliseconds(reply.buckets[i].reset_ms);
    b->seen_at = now;
  }
}

void SharedBudget::on_sync_failed(const SyncCall& call, bool sent) {
  // Credit given back by a call that may have reached Redis is lost (under-use, the safe side);
  // charges are kept for the next sync (a double charge is the safe side too).
  TenantState& st = state_[call.tenant];
  std::lock_guard lock(st.mu);
  Scope& sc = st.scopes[call.scope + 1];
  for (size_t i = 0; i < call.dims.size(); ++i) {
    auto& b = sc.buckets[call.dims[i]];
    if (!b) continue;
    b->charge += call.charged[i];
    if (!sent) b->credit += call.charged[i] - call.args[i].a;  // the credit it would have given back
    b->held_reported = -1;
    b->touched = true;
  }
}

void SharedBudget::set_degraded(bool degraded) {
  const bool was = degraded_.exchange(degraded, std::memory_order_relaxed);
  if (was == degraded || degraded) return;
  // Back: drop the fallback buckets (their spending waits in `charge` for the next sync).
  for (size_t t = 0; t < tenants_->size(); ++t) {
    TenantState& st = state_[t];
    std::lock_guard lock(st.mu);
    for (auto& sc : st.scopes)
      for (auto& b : sc.buckets)
        if (b) {
          b->fallback.reset();
          b->held_reported = -1;
          b->touched = true;
        }
  }
}

int64_t SharedBudget::held_units() const {
  int64_t sum = 0;
  for (size_t t = 0; t < tenants_->size(); ++t) {
    TenantState& st = state_[t];
    std::lock_guard lock(st.mu);
    for (const auto& sc : st.scopes)
      for (const auto& b : sc.buckets)
        if (b) sum += b->credit + b->inflight;
  }
  return sum;
}

}  // namespace sluice
