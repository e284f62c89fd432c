// PromptEnds: where recent prompts ended, so the default policy can tell a request that extends an
// earlier prompt as a whole (an agent's or a chat's next turn: the previous turn's prompt, its
// answer, then new text) from one that only shares a prefix with others (a common system prompt).
//
// A prompt ends inside or at the end of a block: its last whole block (named by the prefix index's
// chained hash, core/prefix/prefix_index.h) and the partial tail after it, under one block long.
// Per last-block hash, the latest prompt's tail length and a hash of the tail (XXH3). A request
// extends that prompt when its own block at the same depth has the same chained hash (the prefix
// index gives it: its deepest cached block), its text goes on past the tail, and the tail's bytes
// match. Matching the whole block chain alone is not enough: "system prompt + hi" ends in the
// system prompt's last block, and every request behind that system prompt would then "extend" it.
//
// Storage: 2-way set-associative, 2 x 2048 sets of {key, tail hash, tail length, last use}: 128 KiB,
// no allocation after construction; a new key takes the way used least recently. Prompts that share
// a last whole block overwrite each other's tail (the latest wins), and a displaced entry only
// hides a continuation, never invents one. Time is passed in (pure core: no clock of its own).
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "core/time.h"

namespace sluice {

class PromptEnds {
 public:
  static constexpr size_t kSets = 2048;

  // A prompt `text` was sent whose last whole block (block_chars each, the first `blocks` of them
  // hashed) has the chained hash `last_block` (0: shorter than a block; not kept).
  void note(uint64_t last_block, std::string_view text, size_t blocks, size_t block_chars, Time now);
  // True when `text`, whose block number `blocks` (1-based, block_chars each) has the chained hash
  // `block`, is a kept prompt followed by more text.
  bool extends(uint64_t block, std::string_view text, size_t blocks, size_t block_chars) const;
  void clear();

 private:
  struct Way {
    uint64_t key = 0, tail = 0;
    uint32_t tail_chars = 0;
    Time last{};
  };
  static uint64_t hash_tail(std::string_view tail);
  size_t set_of(uint64_t key) const { return static_cast<size_t>((key ^ (key >> 31)) % kSets); }
  std::array<std::array<Way, 2>, kSets> sets_{};
};

}  // namespace sluice
