// Leak-freedom: drive the whole admission path the way the gateway will (authenticate -> slot ->
// reserve -> enqueue -> dispatch -> stream -> settle) under a randomised mix of completions,
// upstream errors, queue timeouts and client cancellations (queued and mid-stream), in virtual
// time. Afterwards outstanding reservations, in-flight slots and queue entries are exactly zero.
#include <gtest/gtest.h>

#include <memory>
#include <random>

#include "core/admission/admission_queue.h"
#include "core/admission/budget.h"
#include "core/admission/concurrency.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

struct InFlight {
  ConcurrencySlot slot;
  Reservation reservation;
  QueuePlacement placement;
  Ticket ticket = 0;
  TenantId tenant = 0;
  int priority = 0;
  bool running = false;
  int64_t to_generate = 0;
};

std::shared_ptr<const TenantRegistry> tenants() {
  TenantsSpec s;
  for (int i = 0; i < 4; ++i) {
    TenantSpec t;
    t.name = "t" + std::to_string(i);
    t.key_sha256_hex = {sha256_hex("key-" + std::to_string(i))};
    t.priority = i == 3 ? -1 : i % 2;
    t.weight = 1.0 + i;
    t.limits.requests_per_min = 600;
    t.limits.input_tokens_per_min = 2'000'000;
    t.limits.output_tokens_per_min = 1'000'000;
    t.limits.tokens_per_day = 5'000'000;
    t.limits.max_concurrent = 6;
    if (i == 0) t.model_limits = {ModelLimits{"big", {}}};
    if (i == 0) t.model_limits[0].limits.output_tokens_per_min = 20'000;
    s.tenants.push_back(t);
  }
  auto built = TenantRegistry::build(s);
  EXPECT_TRUE(built.registry) << built.error;
  return built.registry;
}

TEST(AdmissionLeaks, RandomMixReturnsEverythingToZero) {
  auto reg = tenants();
  AdmissionCounters counters;
  Budget budget(reg, &counters);
  ConcurrencyLimiter limiter(reg, &counters);
  QueueConfig qcfg;
  qcfg.max_requests = 40;
  qcfg.default_ttl = milliseconds(300);
  qcfg.ttl_by_priority = {{1, milliseconds(500)}};
  AdmissionQueue queue(qcfg, &counters);
  AdmissionRng rng(2024);
  std::mt19937_64 gen(99);
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(gen) < p; };
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); };

  constexpr int kPoolSlots = 6;
  std::unordered_map<uintptr_t, std::unique_ptr<InFlight>> live;
  uintptr_t next_id = 1;
  int running = 0;
  uint64_t completed = 0, errors = 0, cut = 0, cancelled_queued = 0, expired = 0, refused = 0;

  Time now{0};
  for (int step = 0; step < 20000; ++step, now += milliseconds(10)) {
    // Arrivals.
    for (int a = chance(0.3) ? uniform(1, 2) : 0; a > 0; --a) {
      const int k = static_cast<int>(uniform(0, 4));  // 4 = unknown key
      AuthResult auth = reg->authenticate("Bearer key-" + std::to_string(k));
      if (!auth.ok()) {
        ++refused;
        continue;
      }
      const Tenant& t = *auth.tenant;
      auto r = std::make_unique<InFlight>();
      r->tenant = t.id;
      SlotResult slot = limiter.try_acquire(t, rng);
      if (!slot.ok()) {
        ++refused;
        continue;
      }
      r->slot = std::move(slot.slot);
      const std::string model = chance(0.3) ? "big" : "small";
      const int64_t in = uniform(1, 3000);
      const OutputBound bound = output_bound_for(chance(0.5) ? std::optional<int64_t>(uniform(1, 1000)) : std::nullopt, 512);
      ReserveResult res = budget.reserve(t, model, {in, bound.tokens}, now, rng);
      if (!res.ok()) {
        ++refused;
        continue;  // the slot guard goes with r
      }
      r->reservation = std::move(res.reservation);
      r->to_generate = uniform(0, bound.tokens + 50);  // sometimes more than reserved
      r->priority = effective_priority(t.priority, chance(0.1) ? std::optional<int64_t>(-1) : std::nullopt);
      const bool saturated = running >= kPoolSlots || queue.size() > 0;
      EnqueueResult e = queue.enqueue({t.id, t.weight, r->priority, in, 4 * static_cast<size_t>(in), next_id},
                                      saturated, now, rng);
      if (!e.ok()) {
        ++refused;
        continue;  // reservation refunded, slot released, by the guards
      }
      r->ticket = e.ticket;
      r->placement = QueuePlacement(queue, e.ticket);
      live.emplace(next_id++, std::move(r));
    }
    // Queue timeouts.
    for (const QueueExit& x : queue.expire(now, rng)) {
      EXPECT_EQ(x.denial.error.status, 503);
      live.erase(x.cookie);
      ++expired;
    }
    // Dispatch while the pool has room.
    while (running < kPoolSlots) {
      auto d = queue.pop_next(now);
      if (!d) break;
      InFlight& r = *live.at(d->cookie);
      r.placement.disarm();
      r.reservation.mark_dispatched();
      r.running = true;
      ++running;
    }
    // Progress and endings.
    std::vector<uintptr_t> done;
    for (auto& [id, rp] : live) {
      InFlight& r = *rp;
      if (!r.running) {
        if (chance(0.01)) {  // client left while queued
          EXPECT_TRUE(r.placement.leave());
          done.push_back(id);
          ++cancelled_queued;
        }
        continue;
      }
      const int64_t n = std::min<int64_t>(r.to_generate, uniform(0, 10));
      r.to_generate -= n;
      r.reservation.add_delivered(n);
      queue.charge_output(r.tenant, r.priority, n, reg->tenant(r.tenant).weight);
      if (r.to_generate == 0) {
        r.reservation.settle(Usage{r.reservation.reserved().input_tokens, uniform(0, 100),
                                   r.reservation.delivered_output()},
                             now);
        ++completed;
        done.push_back(id);
      } else if (chance(0.005)) {  // upstream error: explicit settle of what was delivered
        r.reservation.settle(Usage{0, 0, r.reservation.delivered_output()}, now);
        ++errors;
        done.push_back(id);
      } else if (chance(0.005)) {  // client cancelled mid-stream: guards settle
        ++cut;
        done.push_back(id);
      }
    }
    for (uintptr_t id : done) {
      if (live.at(id)->running) --running;
      live.erase(id);
    }
    ASSERT_EQ(budget.outstanding(), static_cast<int64_t>(live.size()));
    ASSERT_EQ(limiter.total_in_flight(), static_cast<int64_t>(live.size()));
  }
  std::printf("completed %lu errors %lu cut %lu cancelled_queued %lu expired %lu refused %lu\n",
              static_cast<unsigned long>(completed), static_cast<unsigned long>(errors),
              static_cast<unsigned long>(cut), static_cast<unsigned long>(cancelled_queued),
              static_cast<unsigned long>(expired), static_cast<unsigned long>(refused));
  // Every path really happened.
  EXPECT_GT(completed, 100u);
  EXPECT_GT(errors, 5u);
  EXPECT_GT(cut, 5u);
  EXPECT_GT(cancelled_queued, 5u);
  EXPECT_GT(expired, 5u);
  EXPECT_GT(refused, 5u);
  const auto snap = counters.snapshot();
  EXPECT_GT(snap.rejected_for(RejectReason::rate_limit), 0u);
  EXPECT_GT(snap.rejected_for(RejectReason::queue_timeout), 0u);
  EXPECT_GT(snap.rejected_for(RejectReason::shed), 0u);

  live.clear();  // whatever is still queued or streaming ends with its guards
  EXPECT_EQ(budget.outstanding(), 0);
  EXPECT_EQ(limiter.total_in_flight(), 0);
  EXPECT_EQ(queue.size(), 0u);
  EXPECT_EQ(queue.bytes(), 0u);
  EXPECT_EQ(counters.snapshot().outstanding_reservations, 0);
  EXPECT_EQ(counters.snapshot().in_flight, 0);
  for (TenantId t = 0; t < reg->size(); ++t) EXPECT_EQ(limiter.in_flight(t), 0);
}

TEST(AdmissionLeaks, CancelledBeforeDispatchChargesNothing) {
  auto reg = tenants();
  Budget budget(reg);
  AdmissionQueue queue;
  AdmissionRng rng(1);
  const Tenant& t = reg->tenant(1);
  const RateLimitStatus before = budget.status(t, "m", Time{0});
  for (int i = 0; i < 50; ++i) {
    ReserveResult r = budget.reserve(t, "m", {1000, 500}, Time{0}, rng);
    ASSERT_TRUE(r.ok());
    EnqueueResult e = queue.enqueue({t.id, t.weight, 0, 1000, 10, 0}, true, Time{0}, rng);
    QueuePlacement p(queue, e.ticket);
  }  // each iteration: the client leaves while queued
  const RateLimitStatus after = budget.status(t, "m", Time{0});
  EXPECT_EQ(after.requests.remaining, before.requests.remaining);
  EXPECT_EQ(after.tokens.remaining, before.tokens.remaining);
  EXPECT_EQ(queue.size(), 0u);
}

}  // namespace
}  // namespace sluice
