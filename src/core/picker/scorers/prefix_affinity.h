// Prefix affinity scorer: the fraction of the request's input tokens the endpoint is expected to
// hold in its KV cache (from the prefix index), in [0,1]. 0 for an empty request. The llm-d scorer
// (matched blocks / request blocks) is the same quantity measured in blocks.
#pragma once
#include <cstdint>

namespace sluice {

inline double prefix_affinity_score(int64_t cached_tokens, int64_t input_tokens) {
  if (input_tokens <= 0 || cached_tokens <= 0) return 0;
  return cached_tokens >= input_tokens ? 1.0 : static_cast<double>(cached_tokens) / static_cast<double>(input_tokens);
}

}  // namespace sluice
