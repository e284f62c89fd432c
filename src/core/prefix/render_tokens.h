// The engine's token ids for the prefix lookup (issue 15, item 3): what the gateway needs to ask
// the engine's render endpoint and to remember its answers. Pure: no sockets, no clocks. The
// HTTP call itself is gateway/render_client.h.
//
// Key. `render_key` hashes (XXH3-128) the model the engine is asked for, the adapter, and the
// body's prompt-bearing bytes: every top-level member except "model" (the target is hashed
// instead) and the sampling / transport members that cannot change the rendered token ids
// (stream, max_tokens, temperature, n, user, ... : kSamplingMembers in the .cpp). A denylist, not
// an allowlist: a member the gateway does not know (tools, chat_template_kwargs, documents, a new
// template switch) stays in the key, so an unknown field can only cost a cache miss, never return
// another prompt's ids. Members are hashed with their raw bytes, so two bodies that differ only in
// whitespace or member order are two keys (a miss, never a wrong answer). The body must already
// have passed parse_request (well-formed JSON): the scan only finds member boundaries; simdjson
// 3.0.1 (Debian) has no raw_json() for composite values, hence the small hand-written scanner.
//
// Answer. `parse_render_answer` reads vLLM's answers: /v1/chat/completions/render returns an
// object {"request_id", "token_ids": [...], "sampling_params", "model", ...};
// /v1/completions/render a JSON array of such objects, one per prompt (the first prompt's ids are
// taken: the lookup prices one placement). Anything else (not JSON, no token_ids, a non-integer
// or out-of-range id, an empty list, more than `max_ids` ids) is refused with a reason; the
// caller counts it and falls back to the estimate.
//
// Cache. RenderCache is an LRU of answers bounded by entries and by the ids it holds in total
// (4 bytes each), shared by a pool's workers under one mutex taken twice per request at most
// (lookup, insert), never per token. Values are shared immutable vectors, so a request keeps its
// ids through the pick while the cache evicts.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sluice {

struct RenderKey {
  uint64_t lo = 0, hi = 0;
  bool operator==(const RenderKey&) const = default;
};

RenderKey render_key(std::string_view model, std::string_view adapter, std::string_view body);

using TokenIds = std::vector<uint32_t>;

struct RenderAnswer {
  std::shared_ptr<const TokenIds> ids;  // set on success
  std::string error;                    // why it was refused (for the debug log)
};
// `completions`: the answer of /v1/completions/render (an array); else the chat route's object.
RenderAnswer parse_render_answer(std::string_view body, bool completions, size_t max_ids = 1u << 22);

class RenderCache {
 public:
  // entries == 0 disables the cache (every lookup misses, nothing is kept).
  RenderCache(size_t max_entries, size_t max_tokens);

  std::shared_ptr<const TokenIds> find(const RenderKey& key);
  void insert(const RenderKey& key, std::shared_ptr<const TokenIds> ids);

  size_t entries() const;
  size_t tokens() const;
  size_t max_entries() const { return max_entries_; }

 private:
  struct KeyHash {
    size_t operator()(const RenderKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)); }
  };
  using Lru = std::list<std::pair<RenderKey, std::shared_ptr<const TokenIds>>>;  // front = most recent
  void evict_locked();

  const size_t max_entries_, max_tokens_;
  mutable std::mutex mu_;
  Lru lru_;
  std::unordered_map<RenderKey, Lru::iterator, KeyHash> map_;
  size_t tokens_ = 0;
};

}  // namespace sluice
