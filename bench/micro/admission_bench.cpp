// Admission cost per request (goal: median under 2 us): the pure admission path a gateway runs
// for one request -- authenticate the Bearer key (SHA-256 + constant-time compare), take a
// concurrency slot, reserve across all budget dimensions, enqueue, dispatch via VTC, settle, and
// format the x-ratelimit-* headers -- with 100 tenants and a standing backlog of 1000 queued
// requests over 50 tenants, so the queue's maps and the VTC's ordered set are not trivially small.
//
//   build-adm-rel/sluice_microbench --benchmark_filter=Admission --benchmark_repetitions=5
//
// BM_AdmissionPath also records per-request latency (p50/p99, ns) measured around each request.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/admission/admission_queue.h"
#include "core/admission/budget.h"
#include "core/admission/concurrency.h"
#include "core/admission/fair_share.h"

namespace sluice {
namespace {

constexpr int kTenants = 100;

std::shared_ptr<const TenantRegistry> bench_tenants() {
  TenantsSpec s;
  for (int i = 0; i < kTenants; ++i) {
    TenantSpec t;
    t.name = "tenant-" + std::to_string(i);
    t.key_sha256_hex = {sha256_hex("sk-bench-key-" + std::to_string(i) + "-0123456789abcdef")};
    t.priority = i % 3;
    t.weight = 1.0 + (i % 4);
    t.limits.requests_per_min = 1'000'000'000;
    t.limits.input_tokens_per_min = 1'000'000'000'000;
    t.limits.output_tokens_per_min = 1'000'000'000'000;
    t.limits.tokens_per_day = 1'000'000'000'000'000;
    t.limits.max_concurrent = 1'000'000;
    if (i % 10 == 0) {
      t.model_limits = {ModelLimits{"llama-70b", {}}};
      t.model_limits[0].limits.output_tokens_per_min = 1'000'000'000'000;
    }
    s.tenants.push_back(t);
  }
  return TenantRegistry::build(s).registry;
}

struct Fixture {
  std::shared_ptr<const TenantRegistry> reg = bench_tenants();
  AdmissionCounters counters;
  Budget budget{reg, &counters};
  ConcurrencyLimiter limiter{reg, &counters};
  AdmissionQueue queue{QueueConfig{}, &counters};
  AdmissionRng rng{42};
  std::vector<std::string> headers;
  Time now{0};

  Fixture() {
    for (int i = 0; i < kTenants; ++i)
      headers.push_back("Bearer sk-bench-key-" + std::to_string(i) + "-0123456789abcdef");
    // Standing backlog: 1000 requests over 50 tenants, far from expiry.
    for (int i = 0; i < 1000; ++i) {
      const Tenant& t = reg->tenant(static_cast<TenantId>(i % 50));
      queue.enqueue({t.id, t.weight, t.priority, 500, 2000, 0}, true, now, rng);
    }
  }

  // One request, start to finish. Returns the number of header values produced (kept alive).
  size_t one_request(int i) {
    now += std::chrono::microseconds(10);
    AuthResult auth = reg->authenticate(headers[i % kTenants]);
    const Tenant& t = *auth.tenant;
    SlotResult slot = limiter.try_acquire(t, rng);
    const OutputBound bound = output_bound_for(std::nullopt, 512);
    ReserveResult r = budget.reserve(t, (i % 2) ? "llama-70b" : "llama-8b", {800, bound.tokens}, now, rng);
    EnqueueResult e = queue.enqueue({t.id, t.weight, t.priority, 800, 3200, static_cast<uintptr_t>(i)},
                                    true, now, rng);
    QueuePlacement placement(queue, e.ticket);
    std::optional<Dispatch> d = queue.pop_next(now);  // dispatches some request (keeps depth stable)
    placement.leave();                               // ours leaves if it was not the one picked
    r.reservation.mark_dispatched();
    queue.charge_output(t.id, t.priority, 200, t.weight);
    r.reservation.settle(Usage{800, 0, 200}, now);
    auto h = r.status.headers();
    // Keep the backlog constant: put back what pop_next took from it.
    if (d && d->ticket != e.ticket) {
      const Tenant& bt = reg->tenant(d->tenant);
      queue.enqueue({bt.id, bt.weight, d->priority, 500, 2000, 0}, true, now, rng);
    }
    return h.size() + (slot.ok() ? 1 : 0);
  }
};

void BM_AdmissionPath(benchmark::State& state) {
  Fixture f;
  std::vector<int64_t> samples;
  samples.reserve(1 << 20);
  int i = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(f.one_request(i++));
    const auto t1 = std::chrono::steady_clock::now();
    if (samples.size() < samples.capacity())
      samples.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
  }
  std::sort(samples.begin(), samples.end());
  if (!samples.empty()) {
    state.counters["p50_ns"] = static_cast<double>(samples[samples.size() / 2]);
    state.counters["p99_ns"] = static_cast<double>(samples[samples.size() * 99 / 100]);
  }
  state.counters["queue_depth"] = static_cast<double>(f.queue.size());
  if (f.budget.outstanding() != 0) state.SkipWithError("reservations leaked");
}
BENCHMARK(BM_AdmissionPath);

void BM_AdmissionAuthenticate(benchmark::State& state) {
  Fixture f;
  int i = 0;
  for (auto _ : state) benchmark::DoNotOptimize(f.reg->authenticate(f.headers[i++ % kTenants]).tenant);
}
BENCHMARK(BM_AdmissionAuthenticate);

void BM_AdmissionReserveSettle(benchmark::State& state) {
  Fixture f;
  int i = 0;
  for (auto _ : state) {
    f.now += std::chrono::microseconds(10);
    ReserveResult r = f.budget.reserve(f.reg->tenant(i++ % kTenants), "llama-70b", {800, 512}, f.now, f.rng);
    r.reservation.settle(Usage{800, 0, 200}, f.now);
  }
}
BENCHMARK(BM_AdmissionReserveSettle);

void BM_AdmissionEnqueuePop(benchmark::State& state) {
  Fixture f;
  int i = 0;
  for (auto _ : state) {
    const Tenant& t = f.reg->tenant(i++ % kTenants);
    f.queue.enqueue({t.id, t.weight, t.priority, 800, 3200, 0}, true, f.now, f.rng);
    benchmark::DoNotOptimize(f.queue.pop_next(f.now));
  }
}
BENCHMARK(BM_AdmissionEnqueuePop);

// The dispatcher's fair-share decision (fair_share.h) with 100 recently active tenants in one band,
// half of them holding a request in flight, in a pool of 64 slots: one request's whole life in it
// (queued, may_dispatch, dispatched, finished). Arg 0: the tenant has nothing in flight (the light
// tenant's O(1) case); arg 1: it already holds two, above its share, so the reserves of the other 99
// tenants are computed (the O(active tenants) case).
void BM_AdmissionFairShareDecision(benchmark::State& state) {
  FairShare fs;
  Time now{0};
  const bool busy = state.range(0) == 1;
  for (TenantId t = 0; t < kTenants; ++t) {
    fs.on_queued(t, 1.0, now);
    fs.on_dispatched(t);
    if (t % 2 == 0) fs.on_finished(t, now + std::chrono::milliseconds(100));
  }
  constexpr TenantId kBusy = kTenants;  // holds two requests throughout
  for (int i = 0; i < 2 && busy; ++i) {
    fs.on_queued(kBusy, 1.0, now);
    fs.on_dispatched(kBusy);
  }
  TenantId t = 0;
  for (auto _ : state) {
    now += std::chrono::microseconds(50);
    const TenantId who = busy ? kBusy : (t = (t + 2) % kTenants, t);  // even tenants: nothing in flight
    fs.on_queued(who, 1.0, now);
    benchmark::DoNotOptimize(fs.may_dispatch(who, 64, 50, now));
    fs.on_dispatched(who);
    fs.on_finished(who, now);
  }
}
BENCHMARK(BM_AdmissionFairShareDecision)->Arg(0)->Arg(1);

void BM_AdmissionRateLimitedDenial(benchmark::State& state) {
  // The refusal path: builds the OpenAI 429 body text and jittered retry-after.
  TenantsSpec s;
  TenantSpec t;
  t.name = "tiny";
  t.limits.requests_per_min = 1;
  s.tenants = {t};
  auto reg = TenantRegistry::build(s).registry;
  Budget budget(reg);
  AdmissionRng rng(1);
  ReserveResult held = budget.reserve(reg->tenant(0), "m", {1, 1}, Time{0}, rng);
  for (auto _ : state) benchmark::DoNotOptimize(budget.reserve(reg->tenant(0), "m", {1, 1}, Time{0}, rng).denial);
}
BENCHMARK(BM_AdmissionRateLimitedDenial);

}  // namespace
}  // namespace sluice



namespace sluice {
namespace {
void BM_AdmissionRateLimitHeaders(benchmark::State& state) {
  RateLimitStatus s;
  s.requests = {true, 600, 599, std::chrono::milliseconds(100)};
  s.tokens = {true, 150000, 149000, std::chrono::milliseconds(400)};
  for (auto _ : state) benchmark::DoNotOptimize(s.headers());
}
BENCHMARK(BM_AdmissionRateLimitHeaders);
}  // namespace
}  // namespace sluice
