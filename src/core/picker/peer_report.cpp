#include "core/picker/peer_report.h"

#include <algorithm>
#include <cmath>

#include "core/msgpack_io.h"

namespace sluice {
namespace {

constexpr uint64_t kVersion = 1;
constexpr uint32_t kEndpointFields = 11;

uint64_t nonneg(int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(0, v)); }

bool fail(std::string* why, const char* what) {
  if (why) *why = what;
  return false;
}

}  // namespace

std::string encode_peer_message(const PeerMessage& m) {
  std::string out;
  out.reserve(64 + m.pools.size() * 32);
  MsgpackWriter w(out);
  w.array(5);
  w.uint(kVersion);
  w.str(m.gateway);
  w.uint(m.instance);
  w.uint(m.seq);
  w.array(static_cast<uint32_t>(m.pools.size()));
  for (const auto& p : m.pools) {
    const bool shed = p.shed_work_total_ms > 0;
    w.array(shed ? 3 : 2);
    w.str(p.pool);
    w.array(static_cast<uint32_t>(p.endpoints.size()));
    for (const auto& e : p.endpoints) {
      const PeerEndpointLoad& l = e.load;
      w.array(kEndpointFields);
      w.uint(e.key);
      for (int64_t v : {l.in_flight, l.prefill_requests, l.prefill_tokens})
        w.uint(nonneg(v));
      w.uint(std::isfinite(l.prefill_pairs) && l.prefill_pairs > 0 ? static_cast<uint64_t>(std::llround(std::min(l.prefill_pairs, 1e18))) : 0);
      for (int64_t v : {l.decode_tokens, l.live_context_tokens, l.context_tokens, l.input_tokens_total,
                        l.predicted_cached_tokens_total, l.picks_total})
        w.uint(nonneg(v));
    }
    if (shed) w.uint(nonneg(p.shed_work_total_ms));
  }
  return out;
}

bool decode_peer_message(std::string_view payload, PeerMessage& out, std::string* why) {
  MsgpackReader r(payload.data(), payload.data() + payload.size());
  uint32_t n = 0;
  uint64_t version = 0;
  std::string_view s;
  if (!r.array(n) || n < 5) return fail(why, "not an array of at least 5 elements");
  if (!r.uint(version) || version != kVersion) return fail(why, "unknown version");
  if (!r.str(s, kMaxPeerGatewayId) || s.empty()) return fail(why, "bad gateway id");
  out.gateway.assign(s);
  if (!r.uint(out.instance) || !r.uint(out.seq)) return fail(why, "bad instance or seq");
  uint32_t pools = 0;
  if (!r.array(pools) || pools > kMaxPeerPools) return fail(why, "bad pool list");
  out.pools.resize(pools);
  for (auto& p : out.pools) {
    uint32_t fields = 0, eps = 0;
    if (!r.array(fields) || fields < 2 || !r.str(s, 1024)) return fail(why, "bad pool entry");
    p.pool.assign(s);
    if (!r.array(eps) || eps > kMaxPeerEndpoints) return fail(why, "bad endpoint list");
    p.endpoints.resize(eps);
    for (auto& e : p.endpoints) {
      uint32_t f = 0;
      uint64_t v[kEndpointFields];
      if (!r.array(f) || f < kEndpointFields) return fail(why, "bad endpoint entry");
      for (uint64_t& x : v)
        if (!r.uint(x)) return fail(why, "bad endpoint value");
      if (!r.skip(f - kEndpointFields)) return fail(why, "bad endpoint entry");
      for (size_t i = 1; i < kEndpointFields; ++i)
        if (v[i] > kMaxPeerValue && i != 4) return fail(why, "endpoint value out of range");
      e.key = v[0];
      PeerEndpointLoad& l = e.load;
      l.in_flight = static_cast<int64_t>(v[1]);
      l.prefill_requests = static_cast<int64_t>(v[2]);
      l.prefill_tokens = static_cast<int64_t>(v[3]);
      l.prefill_pairs = static_cast<double>(v[4]);
      l.decode_tokens = static_cast<int64_t>(v[5]);
      l.live_context_tokens = static_cast<int64_t>(v[6]);
      l.context_tokens = static_cast<int64_t>(v[7]);
      l.input_tokens_total = static_cast<int64_t>(v[8]);
      l.predicted_cached_tokens_total = static_cast<int64_t>(v[9]);
      l.picks_total = static_cast<int64_t>(v[10]);
    }
    p.shed_work_total_ms = 0;
    if (fields >= 3) {
      uint64_t total = 0;
      if (!r.uint(total) || total > kMaxPeerValue) return fail(why, "bad shed work total");
      p.shed_work_total_ms = static_cast<int64_t>(total);
    }
    if (fields > 3 && !r.skip(fields - 3)) return fail(why, "bad pool entry");
  }
  if (!r.skip(n - 5)) return fail(why, "bad message");
  if (!r.at_end()) return fail(why, "trailing bytes");
  return true;
}

PeerReporter::PeerReporter(std::vector<uint64_t> keys, Duration refresh)
    : keys_(std::move(keys)), refresh_(refresh), last_(keys_.size()) {}

bool PeerReporter::build(std::span<const EndpointLoad> own, int64_t shed_work_total_ms, Time now, PeerPoolReport& out) {
  out.endpoints.clear();
  out.shed_work_total_ms = shed_work_total_ms;
  const bool refresh = now >= next_refresh_;
  if (refresh) next_refresh_ = now + refresh_;
  bool changed = shed_work_total_ms != last_shed_total_;
  last_shed_total_ = shed_work_total_ms;
  for (size_t e = 0; e < keys_.size() && e < own.size(); ++e) {
    const PeerEndpointLoad l = PeerEndpointLoad::of(own[e]);
    const PeerEndpointLoad& was = last_[e];
    const bool totals = l.input_tokens_total != was.input_tokens_total ||
                        l.predicted_cached_tokens_total != was.predicted_cached_tokens_total || l.picks_total != was.picks_total;
    const bool list = !l.idle() || totals || (refresh && l.picks_total > 0);
    const bool differs = totals || l.in_flight != was.in_flight || l.prefill_requests != was.prefill_requests ||
                         l.prefill_tokens != was.prefill_tokens || l.decode_tokens != was.decode_tokens ||
                         l.live_context_tokens != was.live_context_tokens;
    if (list) out.endpoints.push_back({keys_[e], l});
    changed = changed || differs;
    last_[e] = l;
  }
  return changed;
}

PeerSender::PeerSender(std::string gateway, uint64_t instance, Duration heartbeat) : heartbeat_(heartbeat) {
  message_.gateway = std::move(gateway);
  message_.instance = instance;
}

void PeerSender::begin() {
  message_.pools.clear();
  changed_ = false;
}

void PeerSender::add(PeerPoolReport section, bool changed) {
  message_.pools.push_back(std::move(section));
  changed_ = changed_ || changed;
}

std::string PeerSender::finish(Time now) {
  if (!changed_ && sent_any_ && now - last_sent_ < heartbeat_) return {};
  message_.seq += 1;
  last_sent_ = now;
  sent_any_ = true;
  return encode_peer_message(message_);
}

}  // namespace sluice
