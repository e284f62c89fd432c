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
  FairShare fs;  // spare 1, window 10 s
  const Time t0{0};
  // The light tenant sent one request a moment ago; it finished. It stays active for the window.
  start(fs, kLight, t0);
  fs.on_finished(kLight);
  // Noisy fills its share (4 of 8) freely; above it, it must leave the light tenant demand 1 + spare 1.
  int64_t in_flight = 0;
  while (fs.may_dispatch(kNoisy, 8, in_flight, t0 + milliseconds(10))) {
    start(fs, kNoisy, t0 + milliseconds(10));
    ++in_flight;
    ASSERT_LE(in_flight, 8);
  }
  EXPECT_EQ(in_flight, 6);  // 8 slots - reserve min(share 4, demand 1 + spare 1) = 2
  EXPECT_DOUBLE_EQ(fs.share(kNoisy, 8, t0 + milliseconds(10)), 4.0);
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 8, t0 + milliseconds(10)), 2);
  // The light tenant below its share goes at once, into the slots kept for it.
  EXPECT_TRUE(fs.may_dispatch(kLight, 8, in_flight, t0 + milliseconds(20)));
  start(fs, kLight, t0 + milliseconds(20));
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 8, t0 + milliseconds(20)), 1);
  // After the window without light arrivals the reserve is released: noisy may fill the pool.
  fs.on_finished(kLight);
  EXPECT_FALSE(fs.may_dispatch(kNoisy, 8, 6, t0 + seconds(5)));
  EXPECT_TRUE(fs.may_dispatch(kNoisy, 8, 6, t0 + seconds(11)));
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 8, t0 + seconds(11)), 0);
}

TEST(FairShare, ReserveNeverExceedsTheQuietTenantsShare) {
  FairShare fs(FairShareConfig{true, seconds(10), 100});  // a huge spare is capped by the share
  start(fs, kLight, Time{0});
  fs.on_finished(kLight);
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

TEST(FairShare, RecentPeakDemandIsReservedNotJustTheCurrentOne) {
  FairShare fs;
  for (int i = 0; i < 3; ++i) start(fs, kLight, Time{0});  // a burst of 3
  for (int i = 0; i < 3; ++i) fs.on_finished(kLight);
  // 16 slots, share 8: reserve min(8, peak 3 + spare 1) = 4 while the peak is recent.
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 16, seconds(1)), 4);
  // A new window forgets the old peak (demand back to 1 after the next arrival).
  start(fs, kLight, seconds(12));
  fs.on_finished(kLight);
  EXPECT_EQ(fs.reserved_for_others(kNoisy, 16, seconds(12) + milliseconds(1)), 2);
}

// Strict priority first: shares are split within a band, and slots are kept only for tenants of the
// same or a higher priority.
TEST(FairShare, NoSlotsKeptForALowerBand) {
  constexpr TenantId kCritical = 2;
  FairShare fs;
  fs.on_queued(kLight, 1.0, Time{0}, 0);  // a quiet standard tenant, active
  fs.on_dispatched(kLight);
  fs.on_finished(kLight);
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
  up.on_finished(kCritical);
  EXPECT_EQ(up.reserved_for_others(kNoisy, 8, Time{0}), 2);  // min(share 8, demand 1 + spare 1)
}

TEST(FairShare, DisabledAlwaysAllows) {
  FairShare fs(FairShareConfig{false, seconds(10), 1});
  start(fs, kLight, Time{0});
  EXPECT_TRUE(fs.may_dispatch(kNoisy, 8, 7, Time{0}));
}

TEST(FairShare, CountsNeverGoNegative) {
  FairShare fs;
  fs.on_finished(kNoisy);
  fs.on_left_queue(kNoisy);
  EXPECT_EQ(fs.in_flight(kNoisy), 0);
  EXPECT_EQ(fs.queued(kNoisy), 0);
  fs.on_queued(kNoisy, 1.0, Time{0});
  fs.on_left_queue(kNoisy);
  EXPECT_EQ(fs.queued(kNoisy), 0);
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
