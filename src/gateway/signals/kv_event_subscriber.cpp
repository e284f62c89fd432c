#include "gateway/signals/kv_event_subscriber.h"

#include <spdlog/spdlog.h>

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

}  // namespace

struct KvEventSubscriber::Impl {
  struct Ep {
    size_t index = 0;
    std::string name, address, replay_address;
    std::optional<zmq::socket_t> sub, monitor, dealer;
    KvSequence seq;
    SteadyClock::time_point last_warning{};
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
      if (!ep.replay_address.empty()) {
        ep.dealer.emplace(impl_->ctx, zmq::socket_type::dealer);
        ep.dealer->set(zmq::sockopt::linger, 0);
        ep.dealer->set(zmq::sockopt::ipv6, true);
        ep.dealer->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
        ep.dealer->connect(ep.replay_address);
      }
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
  // Replays from `from` on until the end marker; false when it timed out or left a gap.
  auto replay = [&](Impl::Ep& ep, int64_t from) {
    if (!ep.dealer) return false;
    idx.count(ep.index, [](KvEndpointCounters& c) { ++c.replays; });
    const std::string seq_frame = kv::encode_seq(from);
    try {
      ep.dealer->send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      if (!ep.dealer->send(zmq::buffer(seq_frame), zmq::send_flags::dontwait)) return false;
      const auto deadline = SteadyClock::now() + impl_->replay_timeout;
      while (!stop_.load()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
        if (left.count() <= 0) break;
        zmq::pollitem_t item{ep.dealer->handle(), 0, ZMQ_POLLIN, 0};
        if (zmq::poll(&item, 1, left) <= 0) continue;
        std::vector<zmq::message_t> f;
        if (!zmq::recv_multipart(*ep.dealer, std::back_inserter(f), zmq::recv_flags::dontwait)) continue;
        int64_t seq = 0;
        if (f.size() != 3 || f[0].size() != 0 || !kv::decode_seq(f[1].to_string_view(), seq)) {
          idx.count(ep.index, [](KvEndpointCounters& c) { ++c.decode_errors; });
          warn(ep, "malformed replay reply");
          continue;
        }
        if (seq == -1) return true;
        switch (ep.seq.on_batch(seq)) {
          case KvSequence::Verdict::apply: apply(ep, seq, f[2].to_string_view()); break;
          case KvSequence::Verdict::duplicate: break;
          case KvSequence::Verdict::gap: break;  // the buffer no longer holds what we missed: resync
        }
        if (ep.seq.last() < seq) break;
      }
    } catch (const zmq::error_t& e) {
      warn(ep, std::string("replay: ") + e.what());
    }
    // Timed out (or left a gap): late replies must not confuse the next replay.
    ep.dealer.emplace(impl_->ctx, zmq::socket_type::dealer);
    ep.dealer->set(zmq::sockopt::linger, 0);
    ep.dealer->set(zmq::sockopt::ipv6, true);
    ep.dealer->set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
    ep.dealer->connect(ep.replay_address);
    return false;
  };
  auto on_connected = [&](Impl::Ep& ep) {
    idx.set_connected(ep.index, true, impl_->now());
    ep.seq.reset();
    if (ep.dealer && !replay(ep, 0)) {
      idx.count(ep.index, [](KvEndpointCounters& c) { ++c.replay_failures; });
      idx.resync(ep.index);
      ep.seq.reset();
    }
    idx.set_synced(ep.index, true);
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
      replay(ep, ep.seq.next());
      if (ep.seq.on_batch(seq) == KvSequence::Verdict::duplicate) return;  // the replay brought it
      if (ep.seq.on_batch(seq) == KvSequence::Verdict::apply) {
        apply(ep, seq, f[2].to_string_view());
        return;
      }
      idx.count(ep.index, [](KvEndpointCounters& c) { ++c.replay_failures; });
    }
    idx.resync(ep.index);  // what was missed is unknown: start over from this batch
    ep.seq.reset();
    apply(ep, seq, f[2].to_string_view());
  };

  std::vector<zmq::pollitem_t> items;
  while (!stop_.load()) {
    items.clear();
    for (auto& ep : eps) {
      items.push_back({ep.sub->handle(), 0, ZMQ_POLLIN, 0});
      items.push_back({ep.monitor->handle(), 0, ZMQ_POLLIN, 0});
    }
    try {
      if (items.empty()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      if (zmq::poll(items, std::chrono::milliseconds(100)) <= 0) continue;
      for (size_t i = 0; i < eps.size(); ++i) {
        Impl::Ep& ep = eps[i];
        if (items[2 * i + 1].revents & ZMQ_POLLIN) {
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
        }
        if (items[2 * i].revents & ZMQ_POLLIN) {
          // A bounded number per endpoint and round, so one busy publisher cannot starve the others.
          for (int n = 0; n < 256; ++n) {
            std::vector<zmq::message_t> f;
            if (!zmq::recv_multipart(*ep.sub, std::back_inserter(f), zmq::recv_flags::dontwait)) break;
            on_message(ep, f);
          }
        }
      }
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
