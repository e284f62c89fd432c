/*
 * The live gateway's driver for shared token budgets (`redis:` in the config): moves the calls the
 * pure SharedBudget (core/admission/shared_budget.h) plans between the request path and Redis
 * (redis_client.h), and decides what a failure means (redis.on_error).
 *
 *   reserve (per admitted request, on the request's own io_context):
 *     lease credit covers it      -> granted, no Redis call (path="lease")
 *     else, Redis believed up     -> one EVALSHA reserve (path="redis"); a failed, timed-out or
 *                                    garbled call marks Redis down and falls through to:
 *     Redis down, on_error open   -> the local 1/N bucket (path="fallback")
 *     Redis down, on_error closed -> 429 rate_limit_unavailable (path="closed")
 *   the sync loop (one coroutine, every lease.sync_interval, on the io_context of the first
 *   request): a `beat` call (registers this replica, reads N = replicas seen within
 *   replica_window; its success is also how recovery is noticed), then one settle call per bucket
 *   group with changes, all pipelined on one connection without waiting for each other.
 * Every transition up/down is logged once and exported: sluice_redis_up, sluice_redis_errors_total
 * {kind}, sluice_shared_budget_reservations_total{path}, sluice_shared_budget_held_units,
 * sluice_shared_budget_replicas. A replica never blocks longer than redis.timeout_ms on Redis.
 */
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "core/admission/redis_config.h"
#include "core/admission/shared_budget.h"
#include "gateway/redis/redis_client.h"

namespace sluice {

class MetricsRegistry;
class Counter;

class RedisBudgets : public std::enable_shared_from_this<RedisBudgets> {
 public:
  RedisBudgets(const RedisSpec& spec, std::shared_ptr<const TenantRegistry> tenants, AdmissionCounters* counters,
               JitterPolicy jitter, MetricsRegistry& registry, std::function<Time()> now);
  ~RedisBudgets();

  boost::asio::awaitable<SharedReserveResult> reserve(const Tenant& tenant, std::string_view model, TokenCost cost,
                                                      AdmissionRng& rng);
  void render(std::string& out) const;
  SharedBudget& budget() { return budget_; }

 private:
  enum Path { kLease, kRedis, kFallback, kClosed, kRefused, kPathCount };
  void start_sync_loop(const boost::asio::any_io_executor& ex);
  static boost::asio::awaitable<void> sync_loop(std::weak_ptr<RedisBudgets> weak);
  boost::asio::awaitable<void> sync_once();
  void mark(bool up, std::string_view why);
  void count_failure(const RedisReply& r, bool garbled);
  SharedReserveResult on_unreachable(const Tenant& tenant, std::string_view model, const TokenCost& cost,
                                     AdmissionRng& rng);

  const RedisSpec spec_;
  std::function<Time()> now_;
  SharedBudget budget_;
  RedisClient client_;
  std::atomic<bool> sync_started_{false};
  std::atomic<bool> up_{true};
  std::array<Counter*, kPathCount> paths_{};
  Counter* garbled_ = nullptr;
  Counter* down_events_ = nullptr;
};

}  // namespace sluice
