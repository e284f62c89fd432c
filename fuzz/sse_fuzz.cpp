// libFuzzer target: the gateway's view of an upstream stream. Bytes from the engine arrive split at
// arbitrary points; the SSE parser must yield the same events (fields and data) whatever the split
// and never lose or invent a byte (the relay forwards `raw`), and the per-event helpers (usage
// capture, token detection, model rewrite) must survive any text. Where a CRLF is split between
// two reads, the LF is carried at the head of the next block's raw bytes (the parser cannot wait
// for a byte that may never come), so raw grouping, not content, may differ there.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/openai/response_fields.h"
#include "core/openai/sse.h"

namespace {
struct Parsed {
  std::vector<std::string> events;  // event, id, data of each block
  std::string raw;                  // every raw byte handed out, in order
  bool operator==(const Parsed&) const = default;
};

Parsed events_of(std::string_view bytes, size_t split) {
  sluice::SseParser p;
  Parsed out;
  sluice::SseEvent e;
  for (size_t i = 0; i < bytes.size(); i += split) {
    p.append(bytes.substr(i, split));
    while (p.next(e)) {
      out.raw.append(e.raw);
      out.events.push_back(std::string(e.event) + '\0' + std::string(e.id) + '\0' + std::string(e.data) +
                           (e.has_data ? "+" : "-"));
      if (e.has_data) {
        (void)sluice::find_usage(e.data);
        (void)sluice::carries_tokens(e.data);
        std::string rewritten;
        sluice::ModelRewriter("m", "alias").append(e.data, rewritten);
      }
    }
    if (p.failed()) break;
  }
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t split = 1 + data[0] % 17;
  std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  auto whole = events_of(bytes, bytes.size() + 1);
  auto pieces = events_of(bytes, split);
  if (whole.events != pieces.events) std::abort();  // splitting must not change the events
  // Bytes handed out are a prefix of the input, and never more than the whole-buffer parse's
  // plus the one LF a split CRLF may carry into the pending block.
  if (bytes.substr(0, pieces.raw.size()) != pieces.raw) std::abort();
  if (bytes.substr(0, whole.raw.size()) != whole.raw) std::abort();
  return 0;
}
