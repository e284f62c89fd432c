// Token-id blocks: the key scheme of the engine-event prefix index (kv_event_index.h).
//
// The gateway never trusts the engine's block hashes for matching (their algorithm and seed are
// the engine's: sha256, xxhash, a random PYTHONHASHSEED...). It recomputes its own chained hash
// from the token ids every BlockStored event carries, as llm-d does:
//   root = XXH64(lora_name \0 cache_salt, seed 0x6b76)          (the chain's seed)
//   h_i  = XXH3_64bits(token ids of block i as little-endian u32, seed = h_{i-1}, h_{-1} = root)
// A request is looked up by the same hash of its own token ids, so the two sides match whenever
// the token ids match, whatever the engine hashes with.
//
// Token ids for a request: `estimate_token_ids` is the byte rule of sluice's simulated engine
// (and llm-d's estimate): the text cut into 4-byte chunks, each chunk's id XXH3_64bits(chunk) %
// 128000. It is exact for `sluice sim` (src/model/engine/tokenizer.h calls it) and an estimate for
// a real tokenizer, whose ids only the engine's render endpoint knows: a pool with
// `token_ids: {source: render}` asks it (render_tokens.h, gateway/render_client.h) and looks the
// answer up instead (PickRequest::token_ids).
#pragma once
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace sluice {

inline constexpr uint32_t kEstimateVocabSize = 128000;
inline constexpr size_t kEstimateBytesPerToken = 4;

// Appends the estimated token ids of `text` (ceil(size / 4) of them) to `out`.
void estimate_token_ids(std::string_view text, std::vector<uint32_t>& out);

// The chain's root seed for an adapter and a cache salt (both empty: the base model).
uint64_t token_chain_seed(std::string_view lora_name, std::string_view cache_salt);
// The chained hash of one block given its parent's hash (or the root seed).
uint64_t token_block_hash(uint64_t parent, std::span<const uint32_t> block_tokens);
// Appends to `out` the chained hashes of the full blocks of `tokens` (at most `max_blocks`).
void token_block_hashes(std::span<const uint32_t> tokens, size_t block_size, uint64_t root, size_t max_blocks,
                        std::vector<uint64_t>& out);

}  // namespace sluice
