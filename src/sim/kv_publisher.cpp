#include "sim/kv_publisher.h"

#include <algorithm>

#include <simdjson.h>
#include <spdlog/spdlog.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <iterator>
#include <fmt/format.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace sluice::sim {

namespace asio = boost::asio;

std::optional<KvEventsConfig> parse_kv_events_config(std::string_view json, std::string& error) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element doc;
  if (parser.parse(padded).get(doc) || !doc.is_object()) {
    error = "--kv-events-config: not a JSON object";
    return std::nullopt;
  }
  KvEventsConfig c;
  simdjson::dom::object obj;
  if (doc.get_object().get(obj)) {
    error = "--kv-events-config: not a JSON object";
    return std::nullopt;
  }
  for (auto field : obj) {
    const std::string_view key = field.key;
    simdjson::dom::element value = field.value;
    auto need_string = [&](std::string& out) {
      std::string_view s;
      if (value.get_string().get(s)) return false;
      out.assign(s);
      return true;
    };
    bool ok = true;
    if (key == "enable_kv_cache_events") {
      ok = !value.get_bool().get(c.enabled);
    } else if (key == "publisher") {
      std::string p;
      ok = need_string(p);
      if (ok && p == "null") c.enabled = false;
      else if (ok && p != "zmq") {
        error = "--kv-events-config: publisher must be zmq or null";
        return std::nullopt;
      }
    } else if (key == "endpoint") {
      ok = need_string(c.endpoint);
    } else if (key == "replay_endpoint") {
      ok = value.is_null() || need_string(c.replay_endpoint);
    } else if (key == "topic") {
      ok = need_string(c.topic);
    } else if (key == "buffer_steps") {
      int64_t n = 0;
      ok = !value.get_int64().get(n) && n > 0 && n <= 10'000'000;
      c.buffer_steps = static_cast<size_t>(n);
    } else if (key == "hwm") {
      int64_t n = 0;
      ok = !value.get_int64().get(n) && n >= 0 && n <= 100'000'000;
      c.hwm = static_cast<int>(n);
    }  // other vLLM keys (max_queue_size, ...) are accepted and ignored
    if (!ok) {
      error = fmt::format("--kv-events-config: bad value for \"{}\"", key);
      return std::nullopt;
    }
  }
  if (c.enabled && !c.endpoint.starts_with("tcp://") && !c.endpoint.starts_with("ipc://") &&
      !c.endpoint.starts_with("inproc://")) {
    error = "--kv-events-config: endpoint must be tcp://, ipc:// or inproc://";
    return std::nullopt;
  }
  return c;
}

std::string offset_endpoint_port(const std::string& endpoint, int offset) {
  if (endpoint.empty() || offset == 0) return endpoint;
  if (endpoint.starts_with("inproc://") || endpoint.starts_with("ipc://")) return endpoint + "_dp" + std::to_string(offset);
  const auto colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon + 1 >= endpoint.size() || endpoint.substr(colon + 1) == "*") return endpoint;
  try {
    return endpoint.substr(0, colon + 1) + std::to_string(std::stoi(endpoint.substr(colon + 1)) + offset);
  } catch (const std::exception&) {
    return endpoint;
  }
}

namespace {
zmq::context_t& shared_context() {
  static zmq::context_t ctx(1);
  return ctx;
}
// vLLM's rule: bind when the address has a wildcard (or is ipc/inproc), else connect.
bool binds(const std::string& ep) {
  return ep.find('*') != std::string::npos || ep.find("::") != std::string::npos || ep.starts_with("ipc://") ||
         ep.starts_with("inproc://");
}
}  // namespace

struct KvPublisher::Impl {
  explicit Impl(asio::io_context& io) : pub(shared_context(), zmq::socket_type::pub), replay_fd(io) {}
  zmq::socket_t pub;
  std::optional<zmq::socket_t> replay;
  asio::posix::stream_descriptor replay_fd;  // the ROUTER's ZMQ_FD (owned by ZeroMQ: released, never closed)
  bool open = false;
};

KvPublisher::KvPublisher(asio::io_context& io, KvEventsConfig cfg, int data_parallel_rank)
    : io_(io), cfg_(std::move(cfg)), rank_(data_parallel_rank), impl_(std::make_unique<Impl>(io)) {}

KvPublisher::~KvPublisher() { close(); }

std::optional<std::string> KvPublisher::open() {
  try {
    const std::string ep = offset_endpoint_port(cfg_.endpoint, rank_);
    impl_->pub.set(zmq::sockopt::sndhwm, cfg_.hwm);
    impl_->pub.set(zmq::sockopt::linger, 0);
    impl_->pub.set(zmq::sockopt::ipv6, true);  // tcp://[::1]:P (vLLM binds an address with "::")
    if (binds(ep)) impl_->pub.bind(ep);
    else impl_->pub.connect(ep);
    if (!cfg_.replay_endpoint.empty()) {
      impl_->replay.emplace(shared_context(), zmq::socket_type::router);
      impl_->replay->set(zmq::sockopt::linger, 0);
      impl_->replay->set(zmq::sockopt::ipv6, true);
      impl_->replay->set(zmq::sockopt::maxmsgsize, int64_t{1024});
      // A ROUTER drops what exceeds a peer's send high-water mark (default 1000) without a word, end
      // marker included: let one whole buffer (plus the marker) queue for each replaying peer.
      impl_->replay->set(zmq::sockopt::sndhwm,
                         static_cast<int>(std::min<size_t>(cfg_.buffer_steps + 16, size_t{1} << 30)));
      impl_->replay->bind(offset_endpoint_port(cfg_.replay_endpoint, rank_));
      impl_->replay_fd.assign(impl_->replay->get(zmq::sockopt::fd));
      arm_replay();
    }
  } catch (const zmq::error_t& e) {
    return fmt::format("kv events: {}", e.what());
  }
  impl_->open = true;
  return std::nullopt;
}

std::string KvPublisher::pub_address() const { return impl_->pub.get(zmq::sockopt::last_endpoint); }
std::string KvPublisher::replay_address() const {
  return impl_->replay ? impl_->replay->get(zmq::sockopt::last_endpoint) : std::string();
}

void KvPublisher::publish(std::vector<kv::Event> events) {
  if (!impl_->open || events.empty()) return;
  kv::EventBatch batch;
  batch.ts = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  batch.events = std::move(events);
  batch.data_parallel_rank = rank_;
  std::string payload;
  kv::encode_event_batch(batch, cfg_.encoding, payload);
  const int64_t seq = next_seq_++;
  const std::string seq_bytes = kv::encode_seq(seq);
  try {
    impl_->pub.send(zmq::buffer(cfg_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    impl_->pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    impl_->pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("kv events: publish failed: {}", e.what());
  }
  buffer_.emplace_back(seq, std::move(payload));
  while (buffer_.size() > cfg_.buffer_steps) buffer_.pop_front();
  // Sending on the PUB socket does not touch the ROUTER: its readiness is unchanged.
}

void KvPublisher::arm_replay() {
  impl_->replay_fd.async_wait(asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
    if (ec || !impl_->open) return;
    serve_replay();
    arm_replay();
  });
}

void KvPublisher::serve_replay() {
  // ZMQ_FD is edge-triggered: drain while ZMQ_EVENTS says a message is readable.
  auto& sock = *impl_->replay;
  try {
    while (sock.get(zmq::sockopt::events) & ZMQ_POLLIN) {
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(sock, std::back_inserter(frames), zmq::recv_flags::dontwait)) break;
      ++replay_requests_;
      int64_t start = 0;
      // [identity, "", start] from a REQ or DEALER peer; anything else is ignored.
      if (frames.size() != 3 || frames[1].size() != 0 || !kv::decode_seq(frames[2].to_string_view(), start)) {
        ++bad_replay_requests_;
        continue;
      }
      const std::string id = frames[0].to_string();
      for (const auto& [seq, payload] : buffer_) {
        if (seq < start) continue;
        const std::string s = kv::encode_seq(seq);
        sock.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        sock.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        sock.send(zmq::buffer(s), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        sock.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      }
      const std::string end = kv::encode_seq(-1);
      sock.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      sock.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      sock.send(zmq::buffer(end), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      sock.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::dontwait);
    }
  } catch (const zmq::error_t& e) {
    spdlog::warn("kv events: replay failed: {}", e.what());
  }
}

void KvPublisher::close() {
  if (!impl_) return;
  impl_->open = false;
  if (impl_->replay_fd.is_open()) {
    impl_->replay_fd.cancel();
    impl_->replay_fd.release();
  }
  try {
    impl_->replay.reset();
    impl_->pub.close();
  } catch (const zmq::error_t&) {
  }
}

}  // namespace sluice::sim
