#include "core/admission/fair_share.h"

#include <gtest/gtest.h>

#include "core/admission/admission_queue.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr TenantId kNoisy = 0;
constexpr TenantId kLight = 1;

// Queue + dispatch one request of `t` (as the driver does).
void start(FairShare& fs, TenantId t, Time now, double weight = 1.0) {
  fs.on_queued(t, weight, now);
  fs.on_dispatched(t);
}

TEST(FairShare, AloneATenantMayTakeEverySlot) {
  FairShare fs;
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(fs.may_dispatch(kNoisy, 8, i, Time{0})) << i;
    start(fs, kNoisy, Time{0});
  }
  EXPECT_TRUE(fs.may_dispatch(kNoisy, 8, 7, Time{0}));  // work-conserving: nobody else is active
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 8, Time{0}), 0);
}

TEST(FairShare, KeepsHeadroomForAQuietTenantAboveTheNoisyOnesShare) {
  FairShare fs;  // spare 0, window 10 s
  const Time t0{0};
  // The light tenant sent one request a moment ago (200 ms); it finished. It stays active for the window.
  start(fs, kLight, t0);
  fs.on_finished(kLight, t0 + milliseconds(200));
  // Noisy fills its share (4 of 8) freely; above it, it must leave the light tenant its demand (1).
  const Time t1 = t0 + milliseconds(300);
  int64_t in_flight = 0;
  while (fs.may_dispatch(kNoisy, 8, in_flight, t1)) {
    start(fs, kNoisy, t1);
    ++in_flight;
    ASSERT_LE(in_flight, 8);
  }
  EXPECT_EQ(in_flight, 7);  // 8 slots - reserve min(share 4, demand 1 + spare 0) = 1
  EXPECT_DOUBLE_EQ(fs.share(kNoisy, 8, t1), 4.0);
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 8, t1), 1);
  // The light tenant below its share goes at once, into the slot kept for it.
  EXPECT_TRUE(fs.may_dispatch(kLight, 8, in_flight, t1 + milliseconds(10)));
  start(fs, kLight, t1 + milliseconds(10));
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 8, t1 + milliseconds(10)), 0);
  // After the window without light arrivals the reserve is released: noisy may fill the pool.
  fs.on_finished(kLight, t1 + milliseconds(200));
  EXPECT_FALSE(fs.may_dispatch(kNoisy, 8, 7, t0 + seconds(5)));
  EXPECT_TRUE(fs.may_dispatch(kNoisy, 8, 7, t0 + seconds(11)));
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 8, t0 + seconds(11)), 0);
}

TEST(FairShare, ReserveNeverExceedsTheQuietTenantsShare) {
  FairShare fs(FairShareConfig{true, seconds(10), 100});  // a huge spare is capped by the share
  start(fs, kLight, Time{0});
  fs.on_finished(kLight, Time{0});
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 8, Time{0}), 4);
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 9, Time{0}), 4);  // floor(4.5)
}

TEST(FairShare, WeightsSplitTheShares) {
  FairShare fs;
  start(fs, kNoisy, Time{0}, 3.0);
  start(fs, kLight, Time{0}, 1.0);
  EXPECT_DOUBLE_EQ(fs.share(kNoisy, 16, Time{0}), 12.0);
  EXPECT_DOUBLE_EQ(fs.share(kLight, 16, Time{0}), 4.0);
}

// The reserve follows the tenant's average concurrency (time constant window / 4 = 2.5 s), not
// its peak: three requests held for 5 s leave a reserve of 3 that decays to 1 as the tenant idles.
TEST(FairShare, AverageDemandIsReservedAndDecays) {
  FairShare fs;
  for (int i = 0; i < 3; ++i) start(fs, kLight, Time{0});
  for (int i = 0; i < 3; ++i) fs.on_finished(kLight, seconds(5));  // average now 3 * (1 - e^-2) = 2.59
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 16, seconds(5) + milliseconds(1)), 3);
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 16, seconds(9)), 1);  // 2.59 * e^-1.6 = 0.52 -> 1
  // A noisy tenant's own in-flight requests count: they use its reserve, not the others'.
  FairShare busy;
  for (int i = 0; i < 2; ++i) start(busy, kLight, Time{0});
  EXPECT_EQ(busy.reserved_for_others(kNoisy, 16, seconds(5)), 0);  // average ~1.7 -> 2, both in flight
}

// Strict priority first: shares are split within a band, and slots are kept only for tenants of the
// same or a higher priority.
TEST(FairShare, NoSlotsKeptForALowerBand) {
  constexpr TenantId kCritical = 2;
  FairShare fs;
  fs.on_queued(kLight, 1.0, Time{0}, 0);  // a quiet standard tenant, active
  fs.on_dispatched(kLight);
  fs.on_finished(kLight, Time{0});
  EXPECT_DOUBLE_EQ(fs.share(kLight, 8, Time{0}), 8.0);  // alone in its band
  int64_t in_flight = 0;
  while (in_flight < 8 && fs.may_dispatch(kCritical, 8, in_flight, Time{0})) {
    fs.on_queued(kCritical, 1.0, Time{0}, 2);
    fs.on_dispatched(kCritical);
    ++in_flight;
  }
  EXPECT_EQ(in_flight, 8);  // nothing was kept back for the lower band
  EXPECT_EQ(fs.reserved_for_others(kCritical, 8, Time{0}), 0);
  // The other way round: a standard tenant above its share leaves room for the critical one.
  FairShare up;
  up.on_queued(kCritical, 1.0, Time{0}, 2);
  up.on_dispatched(kCritical);
  up.on_finished(kCritical, Time{0});
  EXPECT_EQ(up.reserved_for_others(kNoisy, 8, Time{0}), 1);  // min(share 8, demand 1 + spare 0)
}

// Decisions look only at recently active tenants: a thousand tenants that came and went are
// dropped from the list once their window has passed.
TEST(FairShare, IdleTenantsLeaveTheList) {
  FairShare fs;
  for (TenantId t = 10; t < 1010; ++t) {
    start(fs, t, Time{0});
    fs.on_finished(t, milliseconds(1));
  }
  EXPECT_GE(fs.listed(), 1000u);
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 4096, milliseconds(2)), 1000);  // each still active: demand 1
  start(fs, kLight, seconds(11));
  EXPECT_EQ(fs.listed(), 1u);
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 4096, seconds(11)), 0);  // the light one is in flight
}

TEST(FairShare, DisabledAlwaysAllows) {
  FairShare fs(FairShareConfig{false, seconds(10), 1});
  start(fs, kLight, Time{0});
  EXPECT_TRUE(fs.may_dispatch(kNoisy, 8, 7, Time{0}));
}

TEST(FairShare, CountsNeverGoNegative) {
  FairShare fs;
  fs.on_finished(kNoisy, Time{0});
  fs.on_left_queue(kNoisy, Time{0});
  EXPECT_EQ(fs.in_flight(kNoisy), 0);
  EXPECT_EQ(fs.queued(kNoisy), 0);
  fs.on_queued(kNoisy, 1.0, Time{0});
  fs.on_left_queue(kNoisy, Time{0});
  EXPECT_EQ(fs.queued(kNoisy), 0);
  start(fs, kNoisy, Time{0});
  start(fs, kLight, Time{0});
  EXPECT_EQ(fs.total_in_flight(), 2);
  fs.on_finished(kLight, Time{0});
  fs.on_finished(kLight, Time{0});  // a second finish of the same tenant changes nothing
  EXPECT_EQ(fs.total_in_flight(), 1);
}

// The queue passes over an ineligible tenant without losing its place, and takes the next one.
TEST(FairShare, QueuePassesOverTenantsTheFilterRefuses) {
  AdmissionQueue q;
  AdmissionRng rng{3};
  ASSERT_TRUE(q.enqueue(QueueRequest{kNoisy, 1.0, 0, 10, 10, 1}, true, Time{0}, rng).ok());
  ASSERT_TRUE(q.enqueue(QueueRequest{kNoisy, 1.0, 0, 10, 10, 2}, true, Time{0}, rng).ok());
  ASSERT_TRUE(q.enqueue(QueueRequest{kLight, 1.0, 0, 50, 10, 3}, true, Time{0}, rng).ok());
  const auto not_noisy = [](TenantId t, uintptr_t) { return t != kNoisy; };
  auto d = q.pop_next(Time{0}, not_noisy);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->cookie, 3u);  // noisy has the smaller counter (tie, lower id) but is refused
  EXPECT_FALSE(q.pop_next(Time{0}, not_noisy));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.pop_next(Time{0})->cookie, 1u);  // FCFS kept
  EXPECT_EQ(q.pop_next(Time{0})->cookie, 2u);
}

// A strict-priority band with only refused tenants lets a lower band go (nobody waits on a slot
// that its tenant may not take).
TEST(FairShare, QueueFallsThroughToALowerBand) {
  AdmissionQueue q;
  AdmissionRng rng{3};
  ASSERT_TRUE(q.enqueue(QueueRequest{kNoisy, 1.0, 5, 10, 10, 1}, true, Time{0}, rng).ok());
  ASSERT_TRUE(q.enqueue(QueueRequest{kLight, 1.0, 0, 10, 10, 2}, true, Time{0}, rng).ok());
  auto d = q.pop_next(Time{0}, [](TenantId t, uintptr_t) { return t != kNoisy; });
  ASSERT_TRUE(d);
  EXPECT_EQ(d->cookie, 2u);
}

}  // namespace
}  // namespace sluice
