// The gateway runs several worker threads: reservations, slots and queue entries are taken and
// released concurrently. Real threads hammer one Admission; afterwards nothing is outstanding and
// no bucket granted more than it holds (no check-then-charge gap across threads).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/admission/admission.h"

namespace sluice {
namespace {

TEST(AdmissionThreads, ConcurrentAdmitDispatchSettleNeverOvergrantsOrLeaks) {
  TenantsSpec s;
  for (int i = 0; i < 3; ++i) {
    TenantSpec t;
    t.name = "t" + std::to_string(i);
    t.limits.tokens_per_day = 1'000'000;  // refills ~11.6 tokens/s: effectively a fixed cap here
    t.limits.max_concurrent = 4;
    s.tenants.push_back(t);
  }
  auto reg = TenantRegistry::build(s).registry;
  ASSERT_TRUE(reg);
  AdmissionConfig cfg;
  cfg.queue.max_requests = 64;
  Admission adm(reg, cfg);
  std::atomic<int64_t> charged[3] = {0, 0, 0};
  std::atomic<int> admitted{0};
  constexpr int kThreads = 4, kPerThread = 3000;
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      AdmissionRng rng(w);
      std::mt19937_64 gen(100 + w);
      for (int i = 0; i < kPerThread; ++i) {
        const TenantId tid = static_cast<TenantId>(gen() % 3);
        const Tenant& t = reg->tenant(tid);
        const int64_t in = static_cast<int64_t>(gen() % 2000), out = static_cast<int64_t>(gen() % 500) + 1;
        AdmissionResult r = adm.admit(t, {"m", in, out, std::nullopt, 10, 0}, false, Time{0}, rng);
        if (!r.ok()) continue;
        admitted.fetch_add(1);
        // Dispatch whatever is next (maybe another thread's entry); ours leaves below either way.
        adm.pop_next(Time{0});
        switch (gen() % 3) {
          case 0:  // completes with full usage
            r.request.on_dispatched();
            r.request.on_output(out);
            r.request.settle(Usage{in, 0, out}, Time{0});
            charged[tid].fetch_add(in + out);
            break;
          case 1:  // cut mid-stream by the client
            r.request.on_dispatched();
            r.request.on_output(out / 2);
            charged[tid].fetch_add(in + out / 2);
            break;
          default:  // client left while queued: nothing charged
            break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_GT(admitted.load(), 100);
  const auto snap = adm.counters().snapshot();
  EXPECT_EQ(snap.outstanding_reservations, 0);
  EXPECT_EQ(snap.in_flight, 0);
  EXPECT_EQ(adm.budget().outstanding(), 0);
  EXPECT_EQ(adm.limiter().total_in_flight(), 0);
  EXPECT_EQ(adm.queue().size(), 0u);
  for (TenantId t = 0; t < 3; ++t) {
    // Time never moved, so the daily bucket holds exactly 1M minus what was charged: probe it.
    const int64_t left = 1'000'000 - charged[t].load();
    AdmissionRng rng(9);
    EXPECT_LE(charged[t].load(), 1'000'000);
    if (left > 0) {
      AdmissionResult fits = adm.admit(reg->tenant(t), {"m", left, 0, std::nullopt, 1, 0}, false, Time{0}, rng);
      EXPECT_FALSE(fits.ok()) << "output bound 0 means the default bound is added, so this must not fit";
      AdmissionResult exact = adm.admit(reg->tenant(t), {"m", left - 1, 1, std::nullopt, 1, 0}, false, Time{0}, rng);
      EXPECT_TRUE(exact.ok()) << "tenant " << t << " left " << left;
      AdmissionResult over = adm.admit(reg->tenant(t), {"m", 1, 1, std::nullopt, 1, 0}, false, Time{0}, rng);
      EXPECT_FALSE(over.ok());
    }
  }
}

}  // namespace
}  // namespace sluice
