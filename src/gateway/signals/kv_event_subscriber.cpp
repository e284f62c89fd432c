#include "gateway/signals/kv_event_subscriber.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <fmt/format.h>
#include <cstring>
#include <optional>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace sluice {

namespace {

using SteadyClock = std::chrono::steady_clock;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A publisher may send anything: bound what one message can make us hold.
constexpr int64_t kMaxMessageBytes = 64ll << 20;

// The DEALER that asks `address`'s replay ROUTER; its receive queue holds a long replay whole.
void open_dealer(zmq::context_t& ctx, std::optional<zmq::socket_t>& dealer, const std::string& address) {
  dealer.emplace(ctx, zmq::socket_type::dealer);
  dealer->set(zmq::sockopt::linger, 0);
  dealer->set(zmq::sockopt::ipv6, true);
  dealer->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
  dealer->set(zmq::sockopt::rcvhwm, 100000);
  dealer->connect(address);
}

}  // namespace

struct KvEventSubscriber::Impl {
  // A replay in flight: a warm start (from 0, after a connection) or a gap's, which holds the live
  // batch that revealed the gap until the replay has run.
  struct Replay {
    SteadyClock::time_point deadline;
    bool warm = false;
    int64_t held_seq = 0;
    zmq::message_t held;
  };
  struct Ep {
    size_t index = 0;
    std::string name, address, replay_address;
    std::optional<zmq::socket_t> sub, monitor, dealer;
    KvSequence seq;
    SteadyClock::time_point last_warning{};
    std::optional<Replay> replaying;  // a replay in flight: its DEALER is polled instead of the SUB
  };
  zmq::context_t ctx{1};
  std::vector<Ep> eps;
  std::string topic;
  Duration replay_timeout{};
  std::function<Time()> now;
  std::string pool;
};

KvEventSubscriber::KvEventSubscriber(const PoolConfig& pool, std::shared_ptr<KvEventIndex> index,
                                     std::function<Time()> now)
    : index_(std::move(index)), impl_(std::make_unique<Impl>()) {
  impl_->topic = pool.kv_events.topic;
  impl_->replay_timeout = pool.kv_events.replay_timeout;
  impl_->now = std::move(now);
  impl_->pool = pool.name;
  static std::atomic<uint64_t> next_id{1};
  const uint64_t id = next_id.fetch_add(1);
  for (size_t i = 0; i < pool.endpoints.size(); ++i) {
    const auto& ec = pool.endpoints[i];
    if (ec.kv_events.empty()) continue;
    Impl::Ep ep;
    ep.index = i;
    ep.name = ec.name;
    ep.address = ec.kv_events;
    ep.replay_address = ec.kv_events_replay;
    try {
      ep.sub.emplace(impl_->ctx, zmq::socket_type::sub);
      ep.sub->set(zmq::sockopt::linger, 0);
      ep.sub->set(zmq::sockopt::ipv6, true);
      ep.sub->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
      ep.sub->set(zmq::sockopt::rcvhwm, 100000);
      ep.sub->set(zmq::sockopt::reconnect_ivl, 100);
      ep.sub->set(zmq::sockopt::reconnect_ivl_max, 250);
      ep.sub->set(zmq::sockopt::subscribe, impl_->topic);
      const std::string mon = fmt::format("inproc://kv-monitor-{}-{}", id, i);
      if (zmq_socket_monitor(ep.sub->handle(), mon.c_str(), ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED) != 0)
        throw zmq::error_t();
      ep.monitor.emplace(impl_->ctx, zmq::socket_type::pair);
      ep.monitor->set(zmq::sockopt::linger, 0);
      ep.monitor->connect(mon);
      ep.sub->connect(ep.address);
      if (!ep.replay_address.empty()) open_dealer(impl_->ctx, ep.dealer, ep.replay_address);
    } catch (const zmq::error_t& e) {
      spdlog::error("pool {} endpoint {}: kv events: cannot subscribe to {}: {}", pool.name, ec.name, ep.address,
                    e.what());
      continue;
    }
    impl_->eps.push_back(std::move(ep));
  }
  thread_ = std::thread([this] { run(); });
}

KvEventSubscriber::~KvEventSubscriber() { stop(); }

void KvEventSubscriber::stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void KvEventSubscriber::run() {
  auto& eps = impl_->eps;
  KvEventIndex& idx = *index_;
  auto warn = [&](Impl::Ep& ep, std::string_view what) {
    const auto t = SteadyClock::now();
    if (t - ep.last_warning < std::chrono::seconds(10)) return;
    ep.last_warning = t;
    spdlog::warn("pool {} endpoint {}: kv events: {} (counted; further ones for 10 s not logged)", impl_->pool, ep.name,
                 what);
  };
  auto apply = [&](Impl::Ep& ep, int64_t seq, std::string_view payload) {
    kv::EventBatch b;
    if (auto err = kv::decode_event_batch(payload, b); !err.empty()) {
      idx.count(ep.index, [](KvEndpointCounters& c) { ++c.decode_errors; });
      warn(ep, err);
    } else {
      idx.apply(ep.index, b, seq, std::max(0.0, unix_now() - b.ts), impl_->now());
    }
    ep.seq.applied(seq);
  };
  auto new_dealer = [&](Impl::Ep& ep) { open_dealer(impl_->ctx, ep.dealer, ep.replay_address); };
  // A replay ended (the end marker came: ok; or it timed out, left a gap, or was abandoned). A warm
  // start that failed is a resync; a gap's held live batch is then applied, replayed past or resynced.
  auto finish_replay = [&](Impl::Ep& ep, bool ok) {
    Impl::Replay r = std::move(*ep.replaying);
    ep.replaying.reset();
    if (!ok) new_dealer(ep);  // late replies must not confuse the next replay
    if (r.warm) {
      if (!ok) {
        idx.count(ep.index, [](KvEndpointCounters& c) { ++c.replay_failures; });
        idx.resync(ep.index);
        ep.seq.reset();
      }
      idx.set_synced(ep.index, true);
      return;
    }
    switch (ep.seq.on_batch(r.held_seq)) {
      case KvSequence::Verdict::duplicate: return;  // the replay brought it
      case KvSequence::Verdict::apply: apply(ep, r.held_seq, r.held.to_string_view()); return;
      case KvSequence::Verdict::gap: break;
    }
    idx.count(ep.index, [](KvEndpointCounters& c) { ++c.replay_failures; });
    idx.resync(ep.index);  // what was missed is unknown: start over from this batch
    ep.seq.reset();
    apply(ep, r.held_seq, r.held.to_string_view());
  };
  // Asks for `from` onwards. The replies are read by the poll loop while the live stream waits in
  // the SUB socket's queue, so one endpoint's replay never holds up another's events.
  auto start_replay = [&](Impl::Ep& ep, int64_t from, bool warm, int64_t held_seq, zmq::message_t held) {
    idx.count(ep.index, [](KvEndpointCounters& c) { ++c.replays; });
    ep.replaying = Impl::Replay{SteadyClock::now() + impl_->replay_timeout, warm, held_seq, std::move(held)};
    const std::string seq_frame = kv::encode_seq(from);
    bool sent = false;
    try {
      sent = ep.dealer->send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
             ep.dealer->send(zmq::buffer(seq_frame), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      warn(ep, std::string("replay: ") + e.what());
    }
    if (!sent) finish_replay(ep, false);
  };
  auto on_replay_reply = [&](Impl::Ep& ep) {
    for (int n = 0; n < 256 && ep.replaying; ++n) {
      std::vector<zmq::message_t> f;
      if (!zmq::recv_multipart(*ep.dealer, std::back_inserter(f), zmq::recv_flags::dontwait)) return;
      int64_t seq = 0;
      if (f.size() != 3 || f[0].size() != 0 || !kv::decode_seq(f[1].to_string_view(), seq)) {
        idx.count(ep.index, [](KvEndpointCounters& c) { ++c.decode_errors; });
        warn(ep, "malformed replay reply");
        continue;
      }
      if (seq == -1) {
        finish_replay(ep, true);
        return;
      }
      switch (ep.seq.on_batch(seq)) {
        case KvSequence::Verdict::apply: apply(ep, seq, f[2].to_string_view()); break;
        case KvSequence::Verdict::duplicate: break;
        case KvSequence::Verdict::gap:  // the buffer no longer holds what we missed (or dropped replies)
          finish_replay(ep, false);
          return;
      }
    }
  };
  auto on_connected = [&](Impl::Ep& ep) {
    if (ep.replaying) {  // a reconnect abandons what the old connection was replaying
      ep.replaying.reset();
      new_dealer(ep);
    }
    idx.set_connected(ep.index, true, impl_->now());
    ep.seq.reset();
    if (ep.dealer) {
      start_replay(ep, 0, true, 0, {});
    } else {
      idx.set_synced(ep.index, true);
    }
  };
  auto on_message = [&](Impl::Ep& ep, std::vector<zmq::message_t>& f) {
    int64_t seq = 0;
    if (f.size() != 3 || !kv::decode_seq(f[1].to_string_view(), seq) || seq < 0) {
      idx.count(ep.index, [](KvEndpointCounters& c) { ++c.decode_errors; });
      warn(ep, fmt::format("malformed message ({} frames)", f.size()));
      return;
    }
    switch (ep.seq.on_batch(seq)) {
      case KvSequence::Verdict::duplicate: idx.count(ep.index, [](KvEndpointCounters& c) { ++c.duplicates; }); return;
      case KvSequence::Verdict::apply: apply(ep, seq, f[2].to_string_view()); return;
      case KvSequence::Verdict::gap: break;
    }
    idx.count(ep.index, [](KvEndpointCounters& c) { ++c.gaps; });
    if (ep.dealer) {
      start_replay(ep, ep.seq.next(), false, seq, std::move(f[2]));
      return;
    }
    idx.resync(ep.index);  // what was missed is unknown: start over from this batch
    ep.seq.reset();
    apply(ep, seq, f[2].to_string_view());
  };

  // Per endpoint: its monitor, and its SUB socket or, while it replays, its DEALER.
  std::vector<zmq::pollitem_t> items;
  while (!stop_.load()) {
    items.clear();
    auto tick = std::chrono::milliseconds(100);
    const auto now = SteadyClock::now();
    for (auto& ep : eps) {
      items.push_back({ep.monitor->handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({ep.replaying ? ep.dealer->handle() : ep.sub->handle(), 0, ZMQ_POLLIN, 0});
      if (ep.replaying) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(ep.replaying->deadline - now);
        tick = std::clamp(left, std::chrono::milliseconds(0), tick);
      }
    }
    try {
      if (items.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      zmq::poll(items, tick);
      for (size_t i = 0; i < eps.size(); ++i) {
        Impl::Ep& ep = eps[i];
        if (items[2 * i].revents & ZMQ_POLLIN) {
          std::vector<zmq::message_t> f;
          while (zmq::recv_multipart(*ep.monitor, std::back_inserter(f), zmq::recv_flags::dontwait)) {
            if (!f.empty() && f[0].size() >= 2) {
              uint16_t event = 0;
              std::memcpy(&event, f[0].data(), sizeof event);
              if (event == ZMQ_EVENT_CONNECTED) {
                spdlog::info("pool {} endpoint {}: kv events connected ({})", impl_->pool, ep.name, ep.address);
                on_connected(ep);
              } else if (event == ZMQ_EVENT_DISCONNECTED) {
                spdlog::info("pool {} endpoint {}: kv events disconnected", impl_->pool, ep.name);
                idx.set_connected(ep.index, false, impl_->now());
              }
            }
            f.clear();
          }
          continue;  // the socket polled for this endpoint may have changed: next round
        }
        if (!(items[2 * i + 1].revents & ZMQ_POLLIN)) continue;
        if (ep.replaying) {
          on_replay_reply(ep);
          continue;
        }
        // A bounded number per endpoint and round, so one busy publisher cannot starve the others.
        for (int n = 0; n < 256 && !ep.replaying; ++n) {
          std::vector<zmq::message_t> f;
          if (!zmq::recv_multipart(*ep.sub, std::back_inserter(f), zmq::recv_flags::dontwait)) break;
          on_message(ep, f);
        }
      }
      const auto t = SteadyClock::now();
      for (auto& ep : eps)
        if (ep.replaying && t >= ep.replaying->deadline) finish_replay(ep, false);
    } catch (const zmq::error_t& e) {
      spdlog::warn("pool {}: kv events: {}", impl_->pool, e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  for (auto& ep : eps) {
    if (ep.sub) zmq_socket_monitor(ep.sub->handle(), nullptr, 0);
    ep.monitor.reset();
    ep.dealer.reset();
    ep.sub.reset();
  }
}

}  // namespace sluice
