#include "core/picker/peer_report.h"

#include <msgpuck.h>

#include <algorithm>
#include <cmath>

namespace sluice {
namespace {

constexpr uint64_t kVersion = 1;
constexpr uint32_t kEndpointFields = 11;

void put_uint(std::string& out, uint64_t v) {
  char buf[9];
  out.append(buf, mp_encode_uint(buf, v) - buf);
}
void put_array(std::string& out, uint32_t n) {
  char buf[5];
  out.append(buf, mp_encode_array(buf, n) - buf);
}
void put_str(std::string& out, std::string_view s) {
  char buf[5];
  out.append(buf, mp_encode_strl(buf, static_cast<uint32_t>(s.size())) - buf);
  out.append(s);
}
uint64_t nonneg(int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(0, v)); }

// Bounds-checked reads: each header is checked against the bytes left before it is decoded, and a
// container's count against the bytes its elements need at least.
class Reader {
 public:
  Reader(const char* p, const char* end) : p_(p), end_(end) {}
  bool at_end() const { return p_ >= end_; }
  bool array(uint32_t& n) {
    if (at_end() || mp_typeof(*p_) != MP_ARRAY || mp_check_array(p_, end_) > 0) return false;
    n = mp_decode_array(&p_);
    return n <= static_cast<size_t>(end_ - p_);
  }
  bool uint(uint64_t& v) {
    if (at_end() || mp_typeof(*p_) != MP_UINT || mp_check_uint(p_, end_) > 0) return false;
    v = mp_decode_uint(&p_);
    return true;
  }
  bool str(std::string_view& s, size_t max) {
    if (at_end() || mp_typeof(*p_) != MP_STR || mp_check_strl(p_, end_) > 0) return false;
    const char* q = p_;
    const uint32_t len = mp_decode_strl(&q);
    if (len > static_cast<size_t>(end_ - q) || len > max) return false;
    s = {q, len};
    p_ = q + len;
    return true;
  }
  // Past one value of any type (a later version's field), every header in it checked against the
  // bytes left. Containers are walked here with a 64-bit count of the values still to step over
  // (mp_check keeps that count in an int, which a hostile 32-bit array length wraps, taking the
  // header alone for the whole value); a scalar is checked by mp_check.
  bool skip() {
    uint64_t pending = 1;
    while (pending > 0) {
      if (at_end()) return false;
      --pending;
      const mp_type type = mp_typeof(*p_);
      if (type == MP_ARRAY || type == MP_MAP) {
        if ((type == MP_ARRAY ? mp_check_array(p_, end_) : mp_check_map(p_, end_)) > 0) return false;
        pending += type == MP_ARRAY ? uint64_t{mp_decode_array(&p_)} : 2 * uint64_t{mp_decode_map(&p_)};
      } else {
        const char* q = p_;
        if (mp_check(&q, end_) != 0) return false;
        p_ = q;
      }
      if (pending > static_cast<uint64_t>(end_ - p_)) return false;  // each value takes a byte at least
    }
    return true;
  }
  bool skip(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i)
      if (!skip()) return false;
    return true;
  }

 private:
  const char* p_;
  const char* end_;
};

bool fail(std::string* why, const char* what) {
  if (why) *why = what;
  return false;
}

}  // namespace

std::string encode_peer_message(const PeerMessage& m) {
  std::string out;
  out.reserve(64 + m.pools.size() * 32);
  put_array(out, 5);
  put_uint(out, kVersion);
  put_str(out, m.gateway);
  put_uint(out, m.instance);
  put_uint(out, m.seq);
  put_array(out, static_cast<uint32_t>(m.pools.size()));
  for (const auto& p : m.pools) {
    const bool shed = p.shed_work_total_ms > 0;
    put_array(out, shed ? 3 : 2);
    put_str(out, p.pool);
    put_array(out, static_cast<uint32_t>(p.endpoints.size()));
    for (const auto& e : p.endpoints) {
      const PeerEndpointLoad& l = e.load;
      put_array(out, kEndpointFields);
      put_uint(out, e.key);
      for (int64_t v : {l.in_flight, l.prefill_requests, l.prefill_tokens})
        put_uint(out, nonneg(v));
      put_uint(out, std::isfinite(l.prefill_pairs) && l.prefill_pairs > 0 ? static_cast<uint64_t>(std::llround(std::min(l.prefill_pairs, 1e18))) : 0);
      for (int64_t v : {l.decode_tokens, l.live_context_tokens, l.context_tokens, l.input_tokens_total,
                        l.predicted_cached_tokens_total, l.picks_total})
        put_uint(out, nonneg(v));
    }
    if (shed) put_uint(out, nonneg(p.shed_work_total_ms));
  }
  return out;
}

bool decode_peer_message(std::string_view payload, PeerMessage& out, std::string* why) {
  Reader r(payload.data(), payload.data() + payload.size());
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
