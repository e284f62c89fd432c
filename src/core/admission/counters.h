/*
 * Admission counters for visibility: plain structs the metrics layer reads. One
 * `AdmissionCounters` is shared by the admission pieces of one gateway (or simulator run); each
 * piece takes an optional pointer to it and bumps relaxed atomics, so any thread may read a
 * consistent-enough `snapshot()` at any time without locks.
 *
 *   admitted                  reservations granted by Budget::reserve
 *   rejected[reason]          refusals by RejectReason (rate_limit, too_large, queue_full,
 *                             queue_timeout, shed, unauthorized)
 *   dispatched                requests handed out by AdmissionQueue::pop_next
 *   cancelled_queued          queued requests removed because their client left
 *   outstanding_reservations  Reservation objects alive (must return to 0)
 *   in_flight                 concurrency slots held (must return to 0)
 * Queue depth per band is read from AdmissionQueue::band_depths(); it lives with the queue.
 */
#pragma once
#include <array>
#include <atomic>
#include <cstdint>

#include "core/admission/outcome.h"

namespace sluice {

struct AdmissionCountersSnapshot {
  uint64_t admitted = 0;
  std::array<uint64_t, kRejectReasonCount> rejected{};
  uint64_t dispatched = 0;
  uint64_t cancelled_queued = 0;
  int64_t outstanding_reservations = 0;
  int64_t in_flight = 0;

  uint64_t rejected_for(RejectReason r) const { return rejected[static_cast<size_t>(r)]; }
};

struct AdmissionCounters {
  std::atomic<uint64_t> admitted{0};
  std::array<std::atomic<uint64_t>, kRejectReasonCount> rejected{};
  std::atomic<uint64_t> dispatched{0};
  std::atomic<uint64_t> cancelled_queued{0};
  std::atomic<int64_t> outstanding_reservations{0};
  std::atomic<int64_t> in_flight{0};

  void reject(RejectReason r) { rejected[static_cast<size_t>(r)].fetch_add(1, std::memory_order_relaxed); }

  AdmissionCountersSnapshot snapshot() const {
    AdmissionCountersSnapshot s;
    s.admitted = admitted.load(std::memory_order_relaxed);
    for (size_t i = 0; i < kRejectReasonCount; ++i) s.rejected[i] = rejected[i].load(std::memory_order_relaxed);
    s.dispatched = dispatched.load(std::memory_order_relaxed);
    s.cancelled_queued = cancelled_queued.load(std::memory_order_relaxed);
    s.outstanding_reservations = outstanding_reservations.load(std::memory_order_relaxed);
    s.in_flight = in_flight.load(std::memory_order_relaxed);
    return s;
  }
};

}  // namespace sluice
