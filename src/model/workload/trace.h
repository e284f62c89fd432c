// Replay of a JSONL trace, one request per line, in file order (arrivals must not decrease).
// Two line formats are accepted:
//   Mooncake / Dynamo:  {"timestamp": 27482, "input_length": 6955, "output_length": 52,
//                        "hash_ids": [46, 47, ...]}
//     timestamp in ms; each hash id names a block of `block` (512) tokens of text that is the same
//     wherever the id appears (text_for_id), so the trace's sharing structure is reproduced; the
//     prompt is the ids' texts joined, cut (or padded with fresh text) to input_length tokens.
//   Explicit:           {"arrival_s": 1.5, "tenant": "a", "model": "m", "adapter": "x",
//                        "messages": [{"role": "user", "content": "..."}] | "prompt": "...",
//                        "max_tokens": 100, "stream": true}
//     ("timestamp" in ms also accepted; tenant/model/adapter/stream optional).
// Arrivals are multiplied by `scale` (2 = half the rate) and shifted so the first is at 0.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "model/workload/workload.h"

namespace sluice::workload {

struct TraceEntry {
  double arrival_s = 0;
  std::string tenant, model, adapter;
  std::vector<ChatMessage> messages;
  std::string prompt;
  bool has_messages = false;
  int64_t input_length = 0, output_length = 0;
  std::vector<uint64_t> hash_ids;
  bool stream = true;
};

// Parses the whole trace text; error names the line.
std::variant<std::vector<TraceEntry>, std::string> parse_trace(std::string_view jsonl);

std::unique_ptr<ContentGenerator> make_trace_content(std::vector<TraceEntry> entries, double scale,
                                                     int64_t block_tokens, std::string default_model,
                                                     uint64_t seed);

}  // namespace sluice::workload
