#include "model/engine/tokenizer.h"

#include <xxhash.h>

#include <algorithm>

namespace sluice::engine {

void tokenize_into(std::string_view text, std::vector<TokenId>& out) {
  out.reserve(out.size() + static_cast<size_t>(count_tokens(text)));
  for (size_t pos = 0; pos < text.size(); pos += kBytesPerToken) {
    const size_t len = std::min(kBytesPerToken, text.size() - pos);
    out.push_back(static_cast<TokenId>(XXH3_64bits(text.data() + pos, len) % kVocabSize));
  }
}

std::vector<TokenId> tokenize(std::string_view text) {
  std::vector<TokenId> out;
  tokenize_into(text, out);
  return out;
}

}  // namespace sluice::engine
