#include "core/prefix/token_blocks.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace sluice {

void estimate_token_ids(std::string_view text, std::vector<uint32_t>& out) {
  out.reserve(out.size() + (text.size() + kEstimateBytesPerToken - 1) / kEstimateBytesPerToken);
  for (size_t pos = 0; pos < text.size(); pos += kEstimateBytesPerToken) {
    const size_t len = std::min(kEstimateBytesPerToken, text.size() - pos);
    out.push_back(static_cast<uint32_t>(XXH3_64bits(text.data() + pos, len) % kEstimateVocabSize));
  }
}

uint64_t token_chain_seed(std::string_view lora_name, std::string_view cache_salt) {
  std::string buf;
  buf.reserve(lora_name.size() + 1 + cache_salt.size());
  buf.append(lora_name);
  buf.push_back('\0');
  buf.append(cache_salt);
  return XXH64(buf.data(), buf.size(), 0x6b76);
}

uint64_t token_block_hash(uint64_t parent, std::span<const uint32_t> block_tokens) {
  // The ids as little-endian u32 on every host (x86 and ARM are little-endian: a plain copy).
  static_assert(sizeof(uint32_t) == 4);
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), parent);
}

void token_block_hashes(std::span<const uint32_t> tokens, size_t block_size, uint64_t root, size_t max_blocks,
                        std::vector<uint64_t>& out) {
  if (block_size == 0) return;
  const size_t n = std::min(tokens.size() / block_size, max_blocks);
  uint64_t h = root;
  for (size_t i = 0; i < n; ++i) {
    h = token_block_hash(h, tokens.subspan(i * block_size, block_size));
    out.push_back(h);
  }
}

}  // namespace sluice
