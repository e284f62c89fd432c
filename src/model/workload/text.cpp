#include "model/workload/text.h"

#include <iterator>
#include <string_view>

namespace sluice::workload {
namespace {

constexpr std::string_view kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be",
    "at", "by", "this", "had", "not", "are", "but", "from", "or", "have", "an", "they", "which",
    "one", "you", "were", "all", "her", "she", "there", "would", "their", "we", "him", "been",
    "has", "when", "who", "will", "more", "no", "if", "out", "so", "said", "what", "up", "its",
    "about", "into", "than", "them", "can", "only", "other", "new", "some", "could", "time",
    "these", "two", "may", "then", "do", "first", "any", "my", "now", "such", "like", "our",
    "over", "man", "me", "even", "most", "made", "after", "also", "did", "many", "before",
    "must", "through", "back", "years", "where", "much", "your", "way", "well", "down", "should",
    "because", "each", "just", "those", "people", "how", "too", "little", "state", "good",
    "very", "make", "world", "still", "own", "see", "men", "work", "long", "get", "here",
    "between", "both", "life", "being", "under", "never", "day", "same", "another", "know",
    "while", "last", "might", "great", "old", "year", "off", "come", "since", "against", "go",
    "came", "right", "used", "take", "three", "gateway", "replica", "token", "cache", "prefix",
    "request", "latency", "queue", "engine", "model", "batch", "memory", "kernel", "router",
    "throughput", "schedule", "decode", "prefill", "attention", "block", "adapter", "tenant",
    "budget", "signal", "metric", "window", "stream", "buffer", "socket", "packet", "server",
    "client", "question", "answer", "document", "summary", "context", "history", "system",
    "assistant", "function", "variable", "compile", "library", "network", "protocol", "garden",
    "river", "mountain", "village", "harbour", "weather", "kitchen", "library", "morning",
    "evening", "silver", "orange", "purple", "quickly", "slowly", "carefully"};

}  // namespace

double uniform01(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

int64_t uniform_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = uint64_t(hi - lo) + 1;
  return lo + int64_t(rng() % span);
}

void append_text(std::mt19937_64& rng, int64_t tokens, std::string& out) {
  if (tokens <= 0) return;
  const size_t target = out.size() + size_t(tokens * kCharsPerToken);
  out.reserve(target + 16);
  while (out.size() < target) {
    const auto w = kWords[rng() % std::size(kWords)];
    out.append(w);
    out.push_back(' ');
  }
  out.resize(target);
}

std::string text_of_tokens(std::mt19937_64& rng, int64_t tokens) {
  std::string s;
  append_text(rng, tokens, s);
  return s;
}

std::string text_for_id(uint64_t seed, uint64_t id, int64_t tokens) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(id), uint32_t(id >> 32), 0x7e47u};
  std::mt19937_64 rng(seq);
  return text_of_tokens(rng, tokens);
}

}  // namespace sluice::workload
