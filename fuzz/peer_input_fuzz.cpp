// libFuzzer target: what other processes send the gateway. The first byte picks the peer, the rest
// is its payload:
//   even: an engine's KV-event batch (msgpack, vLLM's array or tagged-map encoding), decoded and
//         applied to an event index, which is then matched against; a batch that decodes must
//         encode again in both encodings and decode to the same number of events;
//   odd:  another gateway replica's peer-load message (core/picker/peer_report.h), decoded and
//         applied to a PeerLoad, whose merge is then read; a message that decodes must survive an
//         encode/decode round trip with the same pools.
// Neither may crash, read out of bounds or overflow (ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/picker/peer_load.h"
#include "core/picker/peer_report.h"
#include "core/prefix/kv_event_index.h"
#include "core/prefix/kv_events.h"

namespace {

void kv_batch(std::string_view payload) {
  sluice::kv::EventBatch b;
  if (!sluice::kv::decode_event_batch(payload, b).empty()) return;
  const sluice::Time now{std::chrono::seconds(5)};
  sluice::KvEventIndex idx(2);
  idx.set_connected(0, true, now);
  idx.set_synced(0, true);
  idx.apply(0, b, 0, 0.0, now);
  idx.apply(1, b, 7, 0.0, now);
  std::vector<uint32_t> matched(2, 0);
  std::vector<sluice::KvEventIndex::Source> source(2);
  const std::vector<uint32_t> ids(64, 3);
  idx.match("<|begin_of_text|>any rendered prompt text of a few blocks, long enough to hash", "", "", now, matched,
            source, ids);
  (void)idx.memory_bytes();
  for (auto enc : {sluice::kv::Encoding::arrays, sluice::kv::Encoding::maps}) {
    std::string again;
    sluice::kv::encode_event_batch(b, enc, again);
    sluice::kv::EventBatch b2;
    if (!sluice::kv::decode_event_batch(again, b2).empty() || b2.events.size() != b.events.size()) std::abort();
  }
}

void peer_message(std::string_view payload) {
  sluice::PeerMessage m;
  if (!sluice::decode_peer_message(payload, m)) return;
  sluice::PeerMessage m2;
  if (!sluice::decode_peer_message(sluice::encode_peer_message(m), m2) || m2.pools.size() != m.pools.size() ||
      m2.gateway != m.gateway)
    std::abort();
  sluice::PeerLoad load({sluice::peer_endpoint_key("10.0.0.1:8000"), sluice::peer_endpoint_key("10.0.0.2:8000")}, "self",
                        {});
  const sluice::Time now{std::chrono::seconds(5)};
  for (const auto& pool : m.pools) (void)load.apply(m.gateway, m.instance, m.seq, pool, now);
  for (size_t e = 0; e < 2; ++e) {
    sluice::EndpointLoad l;
    load.add_to(e, l);
  }
  load.expire(now + std::chrono::seconds(10));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view payload(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) peer_message(payload);
  else kv_batch(payload);
  return 0;
}
