// The simulator's tokenizer: deterministic, ~4 characters per token, no vocabulary files.
//
// Rule (shared with the gateway's prefix index, which cuts rendered text into 64-byte blocks =
// 16 tokens): the text is cut into consecutive 4-byte chunks (the last one may be shorter) and
// each chunk's token id is XXH3_64bits(chunk) % kVocabSize. Equal text gives equal tokens, and
// texts sharing a byte prefix of 4k bytes share a token prefix of k tokens.
// Chat requests are rendered with sluice::render_chat (src/core/chat_template.h) before this.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

namespace sluice::engine {

using TokenId = uint32_t;
inline constexpr uint32_t kVocabSize = 128000;
inline constexpr size_t kBytesPerToken = 4;

// Number of tokens `text` yields: ceil(size / 4).
inline int64_t count_tokens(std::string_view text) {
  return static_cast<int64_t>((text.size() + kBytesPerToken - 1) / kBytesPerToken);
}

std::vector<TokenId> tokenize(std::string_view text);

// Appends the tokens of `text` to `out`.
void tokenize_into(std::string_view text, std::vector<TokenId>& out);

}  // namespace sluice::engine
