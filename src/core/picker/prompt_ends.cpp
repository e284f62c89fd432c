#include "core/picker/prompt_ends.h"

#include <xxhash.h>

namespace sluice {

uint64_t PromptEnds::hash_tail(std::string_view tail) { return XXH3_64bits(tail.data(), tail.size()); }

void PromptEnds::note(uint64_t last_block, std::string_view text, size_t blocks, size_t block_chars, Time now) {
  if (last_block == 0 || blocks == 0 || block_chars == 0 || blocks * block_chars > text.size()) return;
  const std::string_view tail = text.substr(blocks * block_chars);
  if (tail.size() >= block_chars) return;  // `blocks` was capped (max_prefix_blocks): the end is not known
  const Way w{last_block, hash_tail(tail), static_cast<uint32_t>(tail.size()), now};
  auto& set = sets_[set_of(last_block)];
  for (Way& x : set)
    if (x.key == last_block) {
      x = w;
      return;
    }
  (set[0].last <= set[1].last ? set[0] : set[1]) = w;
}

bool PromptEnds::extends(uint64_t block, std::string_view text, size_t blocks, size_t block_chars) const {
  if (block == 0 || blocks * block_chars > text.size()) return false;
  for (const Way& x : sets_[set_of(block)]) {
    if (x.key != block) continue;
    const size_t start = blocks * block_chars;
    return text.size() > start + x.tail_chars && hash_tail(text.substr(start, x.tail_chars)) == x.tail;
  }
  return false;
}

void PromptEnds::clear() { sets_ = {}; }

}  // namespace sluice
