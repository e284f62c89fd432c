// The peer-load report: what one gateway replica tells the others about its own in-flight load
// (peer_load.h), its msgpack wire format, and the reporter that decides what to send.
//
// Wire (one message per gateway per interval, all its sharing pools together), msgpack:
//   [1, gateway (str, <= 256 bytes), instance (uint), seq (uint),
//    [[pool (str), [[key, in_flight, prefill_requests, prefill_tokens, prefill_pairs, decode_tokens,
//                    live_context_tokens, context_tokens, input_tokens_total,
//                    predicted_cached_tokens_total, picks_total], ...](, shed_work_total_ms)], ...]]
// every number an unsigned int (prefill_pairs rounded). A pool's third element, the running total
// of the work the gateway refused there (peer_load.h), is sent once it is above 0 (round 25).
// Forward compatible: a decoder takes the elements it knows at each level (the message, a pool, an
// endpoint) and steps over any a later version appends (each checked whole first), so a field can be
// added without a version change and replicas of mixed versions keep sharing load through a rolling
// upgrade; the version changes only for a change an older decoder must not misread. (Replicas from
// before round 26 still refuse a pool's third element and any appended field.) A pool the message
// lists with no endpoints
// has nothing in flight from that gateway; every sharing pool is listed in every message, so a
// message is also the gateway's heartbeat. Decoding checks every header against the bytes left
// (msgpuck's mp_check_*), refuses another version, trailing bytes, wrong types (of the known
// elements; an unknown one only has to be well formed), more than
// kMaxPeerPools pools or kMaxPeerEndpoints endpoints: a rejected message is counted by the caller
// and dropped, never partly applied.
//
// The reporter (PeerReporter, one per pool): lists an endpoint when it has something in flight, or
// its totals changed since the last message, or every `refresh` (default 1 s: totals lost with a
// message are caught up); a gateway sends when any pool's report differs from the last one sent, or
// every `heartbeat` (default ttl / 4) so that peers do not expire it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/picker/peer_load.h"
#include "core/time.h"

namespace sluice {

inline constexpr size_t kMaxPeerPools = 256;
inline constexpr size_t kMaxPeerEndpoints = 16384;
inline constexpr size_t kMaxPeerGatewayId = 256;

struct PeerMessage {
  std::string gateway;
  uint64_t instance = 0;
  uint64_t seq = 0;
  std::vector<PeerPoolReport> pools;
};

std::string encode_peer_message(const PeerMessage& m);
// False (and `why`) when `payload` is not a valid message; `out` is then unspecified.
bool decode_peer_message(std::string_view payload, PeerMessage& out, std::string* why = nullptr);

class PeerReporter {
 public:
  PeerReporter(std::vector<uint64_t> keys, Duration refresh = std::chrono::seconds(1));
  // This pool's section from its own loads (`own[e]` for endpoint e, keys as given) and the running
  // total of the work it refused (peer_load.h); true when it differs from the section returned last
  // time.
  bool build(std::span<const EndpointLoad> own, int64_t shed_work_total_ms, Time now, PeerPoolReport& out);

 private:
  const std::vector<uint64_t> keys_;
  const Duration refresh_;
  std::vector<PeerEndpointLoad> last_;
  int64_t last_shed_total_ = 0;
  Time next_refresh_{};
};

// One gateway's side of the exchange: collects its pools' sections into messages, numbers them, and
// sends (returns the payload) when a section changed or the heartbeat is due.
class PeerSender {
 public:
  PeerSender(std::string gateway, uint64_t instance, Duration heartbeat);
  void begin();                                  // a new message
  void add(PeerPoolReport section, bool changed);  // one pool's section (PeerReporter::build)
  // The encoded message, or empty when nothing changed and the heartbeat is not due.
  std::string finish(Time now);
  const std::string& gateway() const { return message_.gateway; }
  uint64_t instance() const { return message_.instance; }

 private:
  PeerMessage message_;
  const Duration heartbeat_;
  bool changed_ = false;
  Time last_sent_{};
  bool sent_any_ = false;
};

}  // namespace sluice
