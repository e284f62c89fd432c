// Deterministic filler text for synthetic workloads. Words are drawn uniformly from a fixed list
// of ~200 English words of varied lengths, so prompts are not trivially repetitive (every 4-byte
// chunk, i.e. every simulated token, varies) yet are reproducible from the generator's state.
// Lengths are in tokens at 4 characters per token, matching the simulator's tokenizer
// (core/engine/tokenizer.h): text_of_tokens(rng, n) is exactly 4 * n bytes long.
#pragma once
#include <cstdint>
#include <random>
#include <string>

namespace sluice::workload {

inline constexpr int64_t kCharsPerToken = 4;

// Appends exactly 4 * tokens bytes of words separated by spaces (the last word may be cut).
void append_text(std::mt19937_64& rng, int64_t tokens, std::string& out);
std::string text_of_tokens(std::mt19937_64& rng, int64_t tokens);

// Text for one content id (e.g. a trace's block hash id): a pure function of (seed, id, tokens).
std::string text_for_id(uint64_t seed, uint64_t id, int64_t tokens);

// Uniform integer in [lo, hi] from `rng` (portable: does not depend on the standard library's
// distribution implementations).
int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi);
// Uniform double in [0, 1).
double uniform01(std::mt19937_64& rng);

}  // namespace sluice::workload
