/*
 * GCRA token bucket (Generic Cell Rate Algorithm), one per rate-limit dimension.
 *
 * Algorithm. A bucket allows `limit` units per `period` with a bucket size (burst) of `burst`
 * units. Each unit costs the emission interval T = period / limit. The only state is the
 * theoretical arrival time TAT: the instant at which the bucket would be full again.
 *   - n units fit at `now` iff max(TAT, now) + n*T - now <= burst*T (the tolerance tau).
 *   - consuming sets TAT = max(TAT, now) + n*T.
 *   - refunding sets TAT = max(TAT - n*T, now) (a bucket never holds more than `burst`).
 *   - remaining(now) = floor((now + tau - max(TAT, now)) / T), in [0, burst].
 *   - time_until(n, now) = max(0, max(TAT, now) + n*T - tau - now): the refill time a 429's
 *     Retry-After is computed from; infinite when n > burst (the request can never fit).
 *   - time_until_full(now) = max(0, TAT - now): OpenAI's x-ratelimit-reset-*.
 * `force_consume` may push TAT past the tolerance (debt): used when settlement finds that a
 * request used more than it reserved; later requests then wait until the debt has refilled.
 * Arithmetic is exact: time is kept in 128-bit "scaled nanoseconds" (ns x limit), in which one
 * unit costs exactly `period` (ns), so costs add up exactly and consume(n) followed by refund(n)
 * restores the state bit for bit (unless the bucket refilled to full in between). Waits are
 * rounded up to the next nanosecond, so a client that waits exactly that long always fits.
 *
 * Defaults: burst = limit (the bucket holds one period's allowance). Not thread-safe: the owner
 * (Budget) serialises access. Pure: time is passed in.
 */
#pragma once
#include <cstdint>
#include <limits>

#include "core/time.h"

namespace sluice {

struct GcraSpec {
  int64_t limit = 0;                                  // units per period, > 0
  Duration period = std::chrono::minutes(1);          // > 0
  int64_t burst = 0;                                  // bucket size; 0 = limit
};

class Gcra {
 public:
  static constexpr Duration kNever = Duration::max();

  Gcra() = default;
  // Precondition: spec.limit > 0, spec.period > 0, spec.burst >= 0 (validated by config).
  explicit Gcra(const GcraSpec& spec);

  int64_t limit() const { return limit_; }
  int64_t burst() const { return burst_; }
  Duration period() const { return period_; }

  // Consumes n units if they fit now; returns false (state unchanged) otherwise.
  bool try_consume(int64_t n, Time now);
  // Consumes n units even if they do not fit (the bucket goes into debt).
  void force_consume(int64_t n, Time now);
  // Gives back n units previously consumed (never above the bucket size).
  void refund(int64_t n, Time now);

  // 0 when n units fit now; kNever when n > burst; otherwise the refill time until they fit.
  Duration time_until(int64_t n, Time now) const;
  // Units available now, in [0, burst].
  int64_t remaining(Time now) const;
  // Time until the bucket is full again (0 when full).
  Duration time_until_full(Time now) const;

 private:
  using Scaled = __int128;  // nanoseconds x limit
  Scaled scaled(Time t) const { return static_cast<Scaled>(t.count()) * limit_; }
  Scaled cost(int64_t n) const { return static_cast<Scaled>(n) * period_.count(); }
  Duration to_duration_ceil(Scaled s) const;

  int64_t limit_ = 1;
  int64_t burst_ = 1;
  Duration period_ = std::chrono::minutes(1);
  Scaled tau_ = 0;  // cost(burst)
  Scaled tat_ = static_cast<Scaled>(std::numeric_limits<int64_t>::min());  // long ago: full
};

}  // namespace sluice
