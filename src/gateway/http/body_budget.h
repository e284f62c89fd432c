// A gateway-wide bound on buffered request-body bytes (config `limits.max_buffered_body_bytes`).
//
// Every connection charges the body bytes it has read for its current request (as they arrive,
// not as Content-Length promises them, so a client that announces 8 MiB and sends nothing holds
// nothing) and gives them back when the request is done with (`BodyCharge`, RAII). A read that
// would take the total past the limit is refused: the session answers 503 + Retry-After and closes
// the connection. Lock-free (one atomic add per read).
//
// Memory return: glibc keeps freed heap pages of large bodies in its arenas (after the first big
// free it raises the mmap threshold, so later bodies come from the heap). `trim_due()` says when
// the total has fallen by `threshold` since its last peak; the housekeeping timer then calls
// malloc_trim(0) (server.cpp), at most once a second.
#pragma once
#include <atomic>
#include <cstddef>

namespace sluice {

class BodyBudget {
 public:
  // Adds n bytes unless the total would exceed `limit`.
  bool try_charge(size_t n, size_t limit);
  void release(size_t n);
  size_t buffered() const { return buffered_.load(std::memory_order_relaxed); }
  size_t peak() const { return peak_.load(std::memory_order_relaxed); }
  // True (once) when the total has fallen by at least `threshold` since the peak; resets the peak.
  bool trim_due(size_t threshold);

 private:
  std::atomic<size_t> buffered_{0};
  std::atomic<size_t> peak_{0};
};

// The process's budget (one gateway per process).
BodyBudget& body_budget();

// What one request holds of the budget; released on destruction.
class BodyCharge {
 public:
  explicit BodyCharge(BodyBudget& budget) : budget_(budget) {}
  BodyCharge(const BodyCharge&) = delete;
  BodyCharge& operator=(const BodyCharge&) = delete;
  ~BodyCharge() { budget_.release(held_); }

  // Grows the charge to `total` bytes; false (charge unchanged) when the budget has no room.
  bool grow_to(size_t total, size_t limit) {
    if (total <= held_) return true;
    if (!budget_.try_charge(total - held_, limit)) return false;
    held_ = total;
    return true;
  }
  size_t held() const { return held_; }

 private:
  BodyBudget& budget_;
  size_t held_ = 0;
};

}  // namespace sluice
