#include "model/engine/tokenizer.h"

#include "core/prefix/token_blocks.h"

namespace sluice::engine {

// The rule lives in the core (core/prefix/token_blocks.h): the gateway's engine-event index
// computes the same ids for a request's text.
void tokenize_into(std::string_view text, std::vector<TokenId>& out) { estimate_token_ids(text, out); }

std::vector<TokenId> tokenize(std::string_view text) {
  std::vector<TokenId> out;
  tokenize_into(text, out);
  return out;
}

}  // namespace sluice::engine
