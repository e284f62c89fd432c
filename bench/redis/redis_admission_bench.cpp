// Admission latency on shared (Redis) budgets, and Redis memory per bucket: `threads` io_contexts
// (one thread each, like the gateway's workers), each running `conc` coroutines that reserve and
// settle for random tenants out of `tenants` (3 dimensions each: requests, input, output tokens per
// minute) through RedisBudgets -- the gateway's own driver and client -- against a real
// redis-server. Prints the admission (reserve) latency percentiles, the share of reservations
// answered from the lease, and used_memory per bucket key. Driven by bench/redis_budgets.py.
//
//   sluice_redis_bench --redis unix:///tmp/x/redis.sock --threads 16 --tenants 1000 --seconds 5
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "core/admission/redis_config.h"
#include "gateway/observability/metrics.h"
#include "gateway/redis/redis_budgets.h"

namespace asio = boost::asio;
using namespace sluice;

namespace {

int64_t used_memory(const std::string& sock) {
  redisContext* c = redisConnectUnix(sock.c_str());
  if (!c || c->err) return -1;
  auto* r = static_cast<redisReply*>(redisCommand(c, "INFO memory"));
  int64_t v = -1;
  if (r && r->type == REDIS_REPLY_STRING) {
    std::string s(r->str, r->len);
    auto p = s.find("used_memory:");
    if (p != std::string::npos) v = std::stoll(s.substr(p + 12));
  }
  if (r) freeReplyObject(r);
  redisFree(c);
  return v;
}

int64_t bucket_keys(const std::string& sock) {
  redisContext* c = redisConnectUnix(sock.c_str());
  if (!c || c->err) return -1;
  int64_t n = 0;
  std::string cursor = "0";
  do {
    auto* r = static_cast<redisReply*>(redisCommand(c, "SCAN %s MATCH bench:b:* COUNT 1000", cursor.c_str()));
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) break;
    cursor.assign(r->element[0]->str, r->element[0]->len);
    n += static_cast<int64_t>(r->element[1]->elements);
    freeReplyObject(r);
  } while (cursor != "0");
  redisFree(c);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string url;
  int threads = 16, tenants = 1000, conc = 4, gap_us = 1000;
  double seconds = 5, share = 0.25;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--redis") url = v;
    else if (k == "--threads") threads = std::stoi(v);
    else if (k == "--tenants") tenants = std::stoi(v);
    else if (k == "--conc") conc = std::stoi(v);
    else if (k == "--seconds") seconds = std::stod(v);
    else if (k == "--share") share = std::stod(v);
    else if (k == "--gap-us") gap_us = std::stoi(v);
  }
  if (url.rfind("unix://", 0) != 0) {
    std::fprintf(stderr, "usage: sluice_redis_bench --redis unix:///path [--threads N --tenants N --seconds S]\n");
    return 2;
  }
  YAML::Node node;
  node["url"] = url;
  node["key_prefix"] = "bench:";
  RedisSpec spec = parse_redis_yaml(node);
  spec.lease.share = share;
  const std::string sock = spec.unix_path;

  TenantsSpec ts;
  for (int t = 0; t < tenants; ++t) {
    TenantSpec s;
    s.name = "t" + std::to_string(t);
    s.limits.requests_per_min = 100000;
    s.limits.input_tokens_per_min = 10'000'000;
    s.limits.output_tokens_per_min = 5'000'000;
    ts.tenants.push_back(s);
  }
  ts.anonymous_tenant = "t0";
  auto reg = TenantRegistry::build(ts).registry;
  MetricsRegistry metrics;
  const auto epoch = std::chrono::steady_clock::now();
  auto now = [epoch] { return std::chrono::duration_cast<Time>(std::chrono::steady_clock::now() - epoch); };
  const int64_t mem_before = used_memory(sock);
  auto budgets = std::make_shared<RedisBudgets>(spec, reg, nullptr, JitterPolicy{}, metrics, now);

  std::vector<std::unique_ptr<asio::io_context>> ios;
  std::vector<std::vector<double>> lat(threads);
  std::atomic<int64_t> ok{0}, refused{0};
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  for (int i = 0; i < threads; ++i) {
    ios.push_back(std::make_unique<asio::io_context>(1));
    for (int c = 0; c < conc; ++c)
      asio::co_spawn(
          *ios.back(),
          [&, i, c]() -> asio::awaitable<void> {
            AdmissionRng rng(i * 1000 + c);
            std::mt19937_64 pick(i * 7919 + c);
            asio::steady_timer gap(co_await asio::this_coro::executor);
            while (std::chrono::steady_clock::now() < end) {
              const Tenant& t = reg->tenant(static_cast<TenantId>(pick() % reg->size()));
              const auto t0 = std::chrono::steady_clock::now();
              SharedReserveResult r = co_await budgets->reserve(t, "m", TokenCost{200, 100}, rng);
              const auto t1 = std::chrono::steady_clock::now();
              lat[i].push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
              if (r.ok()) {
                ++ok;
                r.reservation.mark_dispatched();
                r.reservation.settle(Usage{200, 0, 40}, now());
              } else {
                ++refused;
              }
              // A request's life between admission and settlement (so threads interleave).
              gap.expires_after(std::chrono::microseconds(gap_us));
              co_await gap.async_wait(asio::use_awaitable);
            }
          },
          asio::detached);
  }
  // The sync loop (on one of the io_contexts) never ends by itself: run every context until the
  // load is over plus time for the leases to go back.
  std::vector<std::thread> ths;
  for (auto& io : ios) ths.emplace_back([&io, end] { io->run_until(end + std::chrono::milliseconds(2000)); });
  // Memory while every tenant's buckets are live (they expire once full again, after the load).
  std::this_thread::sleep_until(end - std::chrono::milliseconds(300));
  const int64_t keys = bucket_keys(sock);
  const int64_t mem_after = used_memory(sock);
  for (auto& t : ths) t.join();

  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all.empty() ? 0.0 : all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))]; };
  std::string m = metrics.render();
  auto count = [&](const char* path) {
    const std::string needle = std::string("sluice_shared_budget_reservations_total{path=\"") + path + "\"} ";
    auto p = m.find(needle);
    return p == std::string::npos ? 0.0 : std::stod(m.substr(p + needle.size()));
  };
  const double lease = count("lease"), redis = count("redis"), fallback = count("fallback");
  std::printf("threads %d, coroutines per thread %d (each: reserve, settle, %d us pause), tenants %d x 3 dimensions, "
              "%.1f s, lease share %.2f\n", threads, conc, gap_us, tenants, seconds, share);
  const double total = std::max(1.0, lease + redis + fallback);
  std::printf("admissions %zu (%lld granted, %lld refused): %.1f%% from the lease, %.1f%% with a Redis call, "
              "%.1f%% fail-open fallback (after a failed call)\n",
              all.size(), static_cast<long long>(ok.load()), static_cast<long long>(refused.load()), 100.0 * lease / total,
              100.0 * redis / total, 100.0 * fallback / total);
  for (const char* kind : {"timeout", "io", "protocol", "unavailable"}) {
    const std::string needle = std::string("sluice_redis_errors_total{kind=\"") + kind + "\"} ";
    std::string text;
    budgets->render(text);
    auto p = text.find(needle);
    if (p != std::string::npos) std::printf("  redis errors %s: %s", kind, text.substr(p + needle.size(), text.find('\n', p) - p - needle.size() + 1).c_str());
  }
  std::printf("admission latency us: p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", pct(0.5), pct(0.9),
              pct(0.99), pct(0.999), all.empty() ? 0.0 : all.back());
  std::printf("redis bucket keys %lld (while loaded), used_memory %lld -> %lld bytes: %.0f bytes per bucket "
              "(its hash + its field in the held hash)\n",
              static_cast<long long>(keys), static_cast<long long>(mem_before), static_cast<long long>(mem_after),
              keys > 0 ? static_cast<double>(mem_after - mem_before) / static_cast<double>(keys) : 0.0);
  std::printf("units held in leases after the load (returned when idle): %lld\n",
              static_cast<long long>(budgets->budget().held_units()));
  budgets.reset();
  return 0;
}
