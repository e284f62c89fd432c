#include "core/admission/budget.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>

namespace sluice {

namespace {

using namespace limit_dim;

std::array<std::optional<Gcra>, kLimitDimensionCount> buckets_for(const RateLimits& l) {
  std::array<std::optional<Gcra>, kLimitDimensionCount> b;
  using std::chrono::hours;
  using std::chrono::minutes;
  if (l.requests_per_min) b[kReq].emplace(GcraSpec{*l.requests_per_min, minutes(1), 0});
  if (l.input_tokens_per_min) b[kIn].emplace(GcraSpec{*l.input_tokens_per_min, minutes(1), 0});
  if (l.output_tokens_per_min) b[kOut].emplace(GcraSpec{*l.output_tokens_per_min, minutes(1), 0});
  if (l.tokens_per_day) b[kDay].emplace(GcraSpec{*l.tokens_per_day, hours(24), 0});
  return b;
}

// Keeps the dimension with the fewest remaining units.
void tighter(RateLimitStatus::Dim& into, const Gcra& g, Time now) {
  const int64_t rem = g.remaining(now);
  if (into.present && into.remaining <= rem) return;
  into = {true, g.limit(), rem, g.time_until_full(now)};
}

}  // namespace

std::string_view limit_label(size_t d) {
  switch (d) {
    case limit_dim::kReq: return "requests per min (RPM)";
    case limit_dim::kIn: return "input tokens per min (ITPM)";
    case limit_dim::kOut: return "output tokens per min (OTPM)";
    default: return "tokens per day (TPD)";
  }
}

std::array<int64_t, kLimitDimensionCount> limit_amounts(const TokenCost& c) {
  return {1, c.input_tokens, c.output_bound, c.input_tokens + c.output_bound};
}

std::string_view to_string(LimitDimension d) {
  switch (d) {
    case LimitDimension::requests: return "requests";
    case LimitDimension::input_tokens: return "input_tokens";
    case LimitDimension::output_tokens: return "output_tokens";
    case LimitDimension::daily_tokens: return "daily_tokens";
  }
  return "unknown";
}

OutputBound output_bound_for(std::optional<int64_t> requested, int64_t default_max_output) {
  if (requested && *requested > 0) return {*requested, false};
  return {std::max<int64_t>(1, default_max_output), true};
}

HeaderList RateLimitStatus::headers() const {
  HeaderList out;
  out.reserve(6);
  auto emit = [&](const Dim& d, const char* limit, const char* remaining, const char* reset) {
    if (!d.present) return;
    out.emplace_back(limit, std::to_string(d.limit));
    out.emplace_back(remaining, std::to_string(d.remaining));
    out.emplace_back(reset, format_go_duration(d.reset));
  };
  emit(requests, "x-ratelimit-limit-requests", "x-ratelimit-remaining-requests",
       "x-ratelimit-reset-requests");
  emit(tokens, "x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens");
  return out;
}

// ---- Reservation ---------------------------------------------------------------------------

Reservation& Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = std::exchange(o.budget_, nullptr);
    tenant_ = o.tenant_;
    model_scope_ = o.model_scope_;
    cost_ = o.cost_;
    dispatched_ = o.dispatched_;
    delivered_ = o.delivered_;
  }
  return *this;
}

void Reservation::settle(const Usage& actual, Time now) {
  if (budget_ == nullptr) return;
  budget_->apply_settlement(*this, actual, false, now);
  budget_ = nullptr;
}

void Reservation::cancel(Time now) {
  if (budget_ == nullptr) return;
  budget_->apply_settlement(*this, {}, true, now);
  budget_ = nullptr;
}

void Reservation::release() {
  if (budget_ == nullptr) return;
  const Time now = budget_->latest();
  if (dispatched_)
    settle(Usage{cost_.input_tokens, 0, delivered_}, now);
  else
    cancel(now);
}

// ---- Budget --------------------------------------------------------------------------------

Budget::Budget(std::shared_ptr<const TenantRegistry> tenants, AdmissionCounters* counters,
               JitterPolicy jitter, bool local_buckets)
    : tenants_(std::move(tenants)), counters_(counters), jitter_(jitter) {
  const size_t n = tenants_->size();
  state_ = std::make_unique<TenantState[]>(n);
  for (size_t i = 0; i < n; ++i) {
    const Tenant& t = tenants_->tenant(static_cast<TenantId>(i));
    state_[i].models.resize(t.model_limits.size());
    if (!local_buckets) continue;
    state_[i].tenant.buckets = buckets_for(t.limits);
    for (size_t m = 0; m < t.model_limits.size(); ++m)
      state_[i].models[m].buckets = buckets_for(t.model_limits[m].limits);
  }
}

Budget::~Budget() { assert(outstanding() == 0 && "a Reservation outlived its Budget"); }

void Budget::observe(Time now) {
  int64_t seen = latest_ns_.load(std::memory_order_relaxed);
  while (now.count() > seen &&
         !latest_ns_.compare_exchange_weak(seen, now.count(), std::memory_order_relaxed)) {
  }
}

RateLimitStatus Budget::status_locked(const TenantState& st, int32_t model_scope, Time now) const {
  RateLimitStatus s;
  auto add = [&](const Scope& sc) {
    if (sc.buckets[kReq]) tighter(s.requests, *sc.buckets[kReq], now);
    if (sc.buckets[kIn]) tighter(s.tokens, *sc.buckets[kIn], now);
    if (sc.buckets[kOut]) tighter(s.tokens, *sc.buckets[kOut], now);
  };
  add(st.tenant);
  if (model_scope >= 0) add(st.models[model_scope]);
  return s;
}

RateLimitStatus Budget::status(const Tenant& tenant, std::string_view model, Time now) {
  observe(now);
  TenantState& st = state_[tenant.id];
  const ModelLimits* ml = tenant.limits_for_model(model);
  const int32_t scope = ml ? static_cast<int32_t>(ml - tenant.model_limits.data()) : -1;
  std::lock_guard lock(st.mu);
  return status_locked(st, scope, now);
}

ReserveResult Budget::reserve(const Tenant& tenant, std::string_view model, const TokenCost& cost_in,
                              Time now, AdmissionRng& rng) {
  observe(now);
  TokenCost cost{std::max<int64_t>(0, cost_in.input_tokens), std::max<int64_t>(0, cost_in.output_bound)};
  TenantState& st = state_[tenant.id];
  const ModelLimits* ml = tenant.limits_for_model(model);
  const int32_t scope = ml ? static_cast<int32_t>(ml - tenant.model_limits.data()) : -1;
  const auto need = limit_amounts(cost);

  std::array<Scope*, 2> scopes{&st.tenant, scope >= 0 ? &st.models[scope] : nullptr};
  ReserveResult result;
  std::unique_lock lock(st.mu);

  // Pass 1: does every bucket have room? Track the worst wait, and any bucket too small.
  Duration worst{0};
  const Gcra* worst_bucket = nullptr;
  size_t worst_dim = 0;
  bool worst_is_model = false;
  for (size_t s = 0; s < scopes.size(); ++s) {
    if (scopes[s] == nullptr) continue;
    for (size_t d = 0; d < kLimitDimensionCount; ++d) {
      const auto& b = scopes[s]->buckets[d];
      if (!b) continue;
      const Duration wait = b->time_until(need[d], now);
      if (wait == Gcra::kNever || wait > worst) {
        worst = wait;
        worst_bucket = &*b;
        worst_dim = d;
        worst_is_model = s == 1;
        if (wait == Gcra::kNever) break;
      }
    }
    if (worst == Gcra::kNever) break;
  }

  if (worst_bucket != nullptr) {
    const std::string who = worst_is_model ? fmt::format("{} for model {}", tenant.name, model) : tenant.name;
    Denial d;
    d.error.status = 429;
    d.error.type = worst_dim == kReq ? "requests" : "tokens";
    d.error.code = "rate_limit_exceeded";
    if (worst == Gcra::kNever) {
      d.reason = RejectReason::too_large;
      d.should_retry = false;
      d.error.message = fmt::format(
          "Request too large for {} on {}: Limit {}, Requested {}. The input or output tokens must be "
          "reduced in order to run successfully.",
          who, limit_label(worst_dim), worst_bucket->burst(), need[worst_dim]);
    } else {
      d.reason = RejectReason::rate_limit;
      d.retry_after = jittered(worst, rng, jitter_);
      const int64_t used = worst_bucket->burst() - worst_bucket->remaining(now);
      d.error.message = fmt::format(
          "Rate limit reached for {} on {}: Limit {}, Used {}, Requested {}. Please try again in {}.",
          who, limit_label(worst_dim), worst_bucket->limit(), used, need[worst_dim],
          format_go_duration(d.retry_after));
    }
    result.status = status_locked(st, scope, now);
    lock.unlock();
    if (counters_ != nullptr) counters_->reject(d.reason);
    result.denial = std::move(d);
    return result;
  }

  // Pass 2: everything fits; charge every bucket.
  for (Scope* sc : scopes) {
    if (sc == nullptr) continue;
    for (size_t d = 0; d < kLimitDimensionCount; ++d)
      if (sc->buckets[d]) {
        [[maybe_unused]] const bool ok = sc->buckets[d]->try_consume(need[d], now);
        assert(ok);
      }
  }
  result.status = status_locked(st, scope, now);
  lock.unlock();

  result.reservation.budget_ = this;
  result.reservation.tenant_ = tenant.id;
  result.reservation.model_scope_ = scope;
  result.reservation.cost_ = cost;
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  if (counters_ != nullptr) {
    counters_->admitted.fetch_add(1, std::memory_order_relaxed);
    counters_->outstanding_reservations.fetch_add(1, std::memory_order_relaxed);
  }
  return result;
}

void Budget::apply_settlement(const Reservation& r, const Usage& actual, bool refund_all, Time now) {
  observe(now);
  std::array<int64_t, kLimitDimensionCount> delta{};  // > 0 charge extra, < 0 refund
  const auto reserved = limit_amounts(r.cost_);
  if (refund_all) {
    for (size_t d = 0; d < kLimitDimensionCount; ++d) delta[d] = -reserved[d];
  } else {
    const int64_t in = std::max<int64_t>(0, actual.input_tokens - std::max<int64_t>(0, actual.cached_input_tokens));
    const int64_t out = std::max<int64_t>(0, actual.output_tokens);
    delta[kReq] = 0;
    delta[kIn] = in - reserved[kIn];
    delta[kOut] = out - reserved[kOut];
    delta[kDay] = in + out - reserved[kDay];
  }
  TenantState& st = state_[r.tenant_];
  {
    std::lock_guard lock(st.mu);
    auto apply = [&](Scope& sc) {
      for (size_t d = 0; d < kLimitDimensionCount; ++d) {
        if (!sc.buckets[d] || delta[d] == 0) continue;
        if (delta[d] > 0)
          sc.buckets[d]->force_consume(delta[d], now);
        else
          sc.buckets[d]->refund(-delta[d], now);
      }
    };
    apply(st.tenant);
    if (r.model_scope_ >= 0) apply(st.models[r.model_scope_]);
  }
  outstanding_.fetch_sub(1, std::memory_order_relaxed);
  if (counters_ != nullptr) counters_->outstanding_reservations.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace sluice
