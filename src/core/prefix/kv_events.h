// vLLM's KV-cache events: the types, and the msgpack codec for both wire encodings.
//
// Wire (vllm/distributed/kv_events.py): a ZeroMQ PUB message [topic, seq (8 bytes big-endian),
// payload], payload = msgpack EventBatch. Two encodings are in the field and both are accepted at
// both levels (the batch and each event):
//   arrays  (vLLM <= 0.25, msgspec array_like):  EventBatch = [ts, events, data_parallel_rank?]
//           BlockStored  = ["BlockStored", block_hashes, parent_block_hash|nil, token_ids,
//                           block_size, lora_id|nil, medium|nil, lora_name|nil, extra_keys?, group_idx?, ...]
//           BlockRemoved = ["BlockRemoved", block_hashes, medium|nil, group_idx?]
//           AllBlocksCleared = ["AllBlocksCleared"]
//   maps    (vLLM >= 0.26): {"ts":..,"events":[..],"data_parallel_rank":..}, each event a map with
//           "type": "BlockStored" | ... and its fields by name; fields at their default are omitted.
//   Trailing array fields and absent map fields take their defaults; unknown map keys and extra
//   trailing array elements are skipped (newer vLLM adds fields). A block hash is an int (taken as
//   its 64-bit two's complement) or bytes (the low 64 bits of the big-endian value).
//
// Decoding: the payload is first validated whole by msgpuck's mp_check (bounds and nesting, no
// recursion), so the typed reads after it never run past the buffer. A batch that is not msgpack,
// truncated, has trailing bytes or the wrong shape is rejected with a reason; one malformed event
// inside a good batch is skipped and counted (EventBatch::skipped_events), the others are kept.
//
// Why msgpuck and not msgpack-c: Debian 12's msgpack-c/cxx packages depend on Boost 1.74 and
// conflict with the Boost 1.81 this project builds with; msgpuck (libmsgpuck-dev) is a small C
// library with a bounds-checking validator (mp_check) and no dependencies.
//
// The encoder (used by the simulator's publisher, and by tests) writes exactly what msgspec writes
// for vLLM's structs: the arrays encoding drops trailing fields at their default (omit_defaults),
// the maps encoding omits extra_keys when absent.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sluice::kv {

struct BlockStored {
  std::vector<uint64_t> block_hashes;
  std::optional<uint64_t> parent_block_hash;
  std::vector<uint32_t> token_ids;  // the tokens of every block of the event, in order
  int64_t block_size = 0;
  std::optional<int64_t> lora_id;    // deprecated by vLLM, kept for the wire
  std::string medium;                // "GPU", "CPU"...; empty = nil
  std::string lora_name;             // empty = nil (base model)
  // The first block's extra keys that are strings other than the LoRA name (vLLM puts the
  // request's cache_salt there), joined by '\0'; empty when absent.
  std::string cache_salt;
  bool has_extra_keys = false;
};

struct BlockRemoved {
  std::vector<uint64_t> block_hashes;
  std::string medium;
};

struct AllBlocksCleared {};

using Event = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

struct EventBatch {
  double ts = 0;  // unix seconds at the publisher
  std::vector<Event> events;
  std::optional<int64_t> data_parallel_rank;
  size_t skipped_events = 0;  // malformed events dropped while decoding (the rest were kept)
};

enum class Encoding { arrays, maps };
std::string_view to_string(Encoding e);

// Decodes one payload into `out` (cleared first). Empty string on success, else why it failed.
std::string decode_event_batch(std::string_view payload, EventBatch& out);

// Appends the msgpack encoding of `batch` to `out`.
void encode_event_batch(const EventBatch& batch, Encoding enc, std::string& out);

// 8-byte big-endian sequence numbers (PUB frame 2, replay request and replies).
std::string encode_seq(int64_t seq);
// False when `frame` is not 8 bytes.
bool decode_seq(std::string_view frame, int64_t& seq);

}  // namespace sluice::kv
