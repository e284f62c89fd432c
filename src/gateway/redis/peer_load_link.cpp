#include "gateway/redis/peer_load_link.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <unistd.h>

#include <random>

#include <spdlog/spdlog.h>

#include "core/picker/peer_report.h"
#include "core/prom_writer.h"
#include "gateway/gateway.h"
#include "gateway/generation.h"

namespace sluice {

namespace {

std::string default_id() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "gateway");
  return fmt::format("{}-{}", host, ::getpid());
}

timeval to_timeval(Duration d) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return timeval{static_cast<time_t>(us / 1'000'000), static_cast<suseconds_t>(us % 1'000'000)};
}

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;
struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

Context connect(const PeerLoadSpec& s, std::string& error) {
  const timeval tv = to_timeval(s.timeout);
  Context c(s.unix_path.empty() ? redisConnectWithTimeout(s.host.c_str(), s.port, tv)
                                : redisConnectUnixWithTimeout(s.unix_path.c_str(), tv));
  if (!c || c->err) {
    error = c ? c->errstr : "cannot allocate a context";
    return nullptr;
  }
  if (redisSetTimeout(c.get(), tv) != REDIS_OK) {
    error = "cannot set the socket timeout";
    return nullptr;
  }
  return c;
}

}  // namespace

PeerLoadLink::PeerLoadLink(Gateway& gateway, const PeerLoadSpec& spec)
    : gateway_(gateway), spec_(spec), id_(spec.gateway_id.empty() ? default_id() : spec.gateway_id),
      stats_(std::make_shared<Stats>()) {
  // Series read at scrape time: the link's counters and each current pool's peers.
  gateway_.registry().add_collector([stats = stats_, gw = &gateway_](std::string& out) {
    PromWriter w(out);
    w.family("sluice_peer_load_reports_total", "counter",
             "Peer-load reports (peer_load:) this gateway sent, and received from the channel (its own included).");
    w.sample("sluice_peer_load_reports_total", {{"direction", "sent"}}, double(stats->sent.load()));
    w.sample("sluice_peer_load_reports_total", {{"direction", "received"}}, double(stats->received.load()));
    w.family("sluice_peer_load_decode_errors_total", "counter", "Messages on the peer-load channel that did not decode (dropped).");
    w.sample("sluice_peer_load_decode_errors_total", "", double(stats->decode_errors.load()));
    w.family("sluice_peer_load_dropped_total", "counter", "Decoded peer-load sections not applied, by reason.");
    w.sample("sluice_peer_load_dropped_total", {{"reason", "unknown_pool"}}, double(stats->unknown_pool.load()));
    w.sample("sluice_peer_load_dropped_total", {{"reason", "duplicate"}}, double(stats->duplicate.load()));
    w.sample("sluice_peer_load_dropped_total", {{"reason", "too_many_peers"}}, double(stats->too_many_peers.load()));
    w.sample("sluice_peer_load_dropped_total", {{"reason", "bad_value"}}, double(stats->bad_value.load()));
    w.family("sluice_peer_load_redis_up", "gauge", "1 while the peer-load link is connected to Redis and subscribed.");
    w.sample("sluice_peer_load_redis_up", "", stats->up.load() ? 1.0 : 0.0);
    w.family("sluice_peer_load_redis_errors_total", "counter", "Peer-load link failures (connect, subscribe, publish, read).");
    w.sample("sluice_peer_load_redis_errors_total", "", double(stats->redis_errors.load()));
    const auto gen = gw->current();
    const Time now = gw->now();
    std::vector<std::pair<const PoolRuntime*, PoolRouter::PeerStats>> pools;
    for (const auto& [name, pool] : gen->pools)
      if (pool->router.shares_load()) pools.emplace_back(pool.get(), pool->router.peer_stats(now));
    w.family("sluice_peer_load_peers", "gauge", "Peer gateways heard from within peer_load.ttl_ms, per pool.");
    for (const auto& [pool, s] : pools) w.sample("sluice_peer_load_peers", {{"pool", pool->config().name}}, double(s.peers));
    w.family("sluice_peer_load_in_flight", "gauge", "Requests in flight on the endpoint from the live peer gateways.");
    for (const auto& [pool, s] : pools)
      for (size_t e = 0; e < s.in_flight.size() && e < pool->config().endpoints.size(); ++e)
        w.sample("sluice_peer_load_in_flight", {{"pool", pool->config().name}, {"endpoint", pool->config().endpoints[e].name}},
                 double(s.in_flight[e]));
  });
}

PeerLoadLink::~PeerLoadLink() { stop(); }

void PeerLoadLink::start() {
  if (thread_.joinable()) return;
  spdlog::info("peer load: gateway {} on {} channel {} (every {} ms, ttl {} ms)", id_, spec_.url, spec_.channel,
               to_millis(spec_.interval), to_millis(spec_.ttl));
  thread_ = std::thread([this] { run(); });
}

void PeerLoadLink::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void PeerLoadLink::run() {
  std::random_device rd;
  const uint64_t instance = (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
  PeerSender sender(id_, instance, spec_.ttl / 4);
  PeerLoad::Options options;
  options.ttl = spec_.ttl;
  options.max_peers = spec_.max_peers;
  Context pub, sub;
  Duration backoff = std::chrono::milliseconds(200);
  Time retry_at{};
  Time next_send{};
  PeerMessage message;
  std::string why;
  const auto down = [&](const char* what, const char* detail) {
    stats_->redis_errors.fetch_add(1);
    if (stats_->up.exchange(false) || backoff == std::chrono::milliseconds(200))
      spdlog::warn("peer load: Redis {} failed ({}): routing uses the local accounting until it is back", what, detail);
    pub.reset();
    sub.reset();
    retry_at = gateway_.now() + backoff;
    backoff = std::min<Duration>(backoff * 2, std::chrono::seconds(2));
  };

  while (!stop_) {
    const Time now = gateway_.now();
    const auto gen = gateway_.current();
    // Pools join when first seen (start-up, and the new pools of a reload).
    for (const auto& [name, pool] : gen->pools)
      if (!pool->router.shares_load()) pool->router.share_load(id_, options);

    if (!sub && now >= retry_at) {
      std::string error;
      pub = connect(spec_, error);
      if (pub) sub = connect(spec_, error);
      if (!sub) {
        down("connect", error.c_str());
        continue;
      }
      Reply r(static_cast<redisReply*>(redisCommand(sub.get(), "SUBSCRIBE %b", spec_.channel.data(), spec_.channel.size())));
      if (!r || r->type != REDIS_REPLY_ARRAY) {
        down("subscribe", sub->err ? sub->errstr : "unexpected reply");
        continue;
      }
      stats_->up = true;
      backoff = std::chrono::milliseconds(200);
      spdlog::info("peer load: subscribed to {} on {}", spec_.channel, spec_.url);
    }

    if (now >= next_send) {
      next_send = now + spec_.interval;
      sender.begin();
      for (const auto& [name, pool] : gen->pools) {
        PeerPoolReport section;
        const bool changed = pool->router.peer_report(now, section);
        sender.add(std::move(section), changed);
      }
      if (pub) {  // while Redis is down nothing is built up: the next report is the whole state
        const std::string payload = sender.finish(now);
        if (!payload.empty()) {
          Reply r(static_cast<redisReply*>(redisCommand(pub.get(), "PUBLISH %b %b", spec_.channel.data(), spec_.channel.size(),
                                                        payload.data(), payload.size())));
          if (!r || r->type == REDIS_REPLY_ERROR) {
            down("publish", pub->err ? pub->errstr : (r ? r->str : "no reply"));
            continue;
          }
          stats_->sent.fetch_add(1);
        }
      }
    }

    // Wait for messages until the next report is due (at most 100 ms, to notice stop()).
    const Duration wait = std::clamp<Duration>(next_send - gateway_.now(), Duration::zero(), std::chrono::milliseconds(100));
    if (!sub) {
      std::this_thread::sleep_for(std::min<Duration>(wait + std::chrono::milliseconds(1), retry_at - gateway_.now()));
      continue;
    }
    pollfd pfd{sub->fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(wait).count()));
    if (ready <= 0) continue;
    if (redisBufferRead(sub.get()) != REDIS_OK) {
      down("read", sub->errstr);
      continue;
    }
    for (;;) {
      void* raw = nullptr;
      if (redisGetReplyFromReader(sub.get(), &raw) != REDIS_OK) {
        down("read", sub->errstr);  // the reader could not parse what Redis sent
        break;
      }
      if (raw == nullptr) break;
      Reply r(static_cast<redisReply*>(raw));
      if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 || r->element[0]->type != REDIS_REPLY_STRING ||
          std::string_view(r->element[0]->str, r->element[0]->len) != "message" || r->element[2]->type != REDIS_REPLY_STRING) {
        stats_->decode_errors.fetch_add(1);
        continue;
      }
      stats_->received.fetch_add(1);
      if (!decode_peer_message(std::string_view(r->element[2]->str, r->element[2]->len), message, &why)) {
        if (stats_->decode_errors.fetch_add(1) % 1000 == 0) spdlog::warn("peer load: dropped a message ({})", why);
        continue;
      }
      if (message.gateway == id_) continue;  // our own, echoed back
      const Time at = gateway_.now();
      for (const auto& section : message.pools) {
        PoolRuntime* pool = gen->pool(section.pool);
        if (!pool) {
          stats_->unknown_pool.fetch_add(1);
          continue;
        }
        switch (pool->router.apply_peer(message.gateway, message.instance, message.seq, section, at)) {
          case PeerLoad::Applied::duplicate: stats_->duplicate.fetch_add(1); break;
          case PeerLoad::Applied::too_many_peers: stats_->too_many_peers.fetch_add(1); break;
          case PeerLoad::Applied::bad_value: stats_->bad_value.fetch_add(1); break;
          default: break;
        }
      }
    }
  }
  stats_->up = false;
}

}  // namespace sluice
