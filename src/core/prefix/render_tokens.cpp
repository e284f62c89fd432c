#include "core/prefix/render_tokens.h"

#include <simdjson.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>

namespace sluice {

namespace {

// Top-level members that never change the prompt's token ids: sampling, output bounds, transport
// and bookkeeping. Everything else is prompt-bearing (see the header: a denylist on purpose).
constexpr std::array<std::string_view, 44> kSamplingMembers = {
    "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p",
    "n", "best_of", "seed", "user", "priority", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "length_penalty", "logprobs", "top_logprobs", "prompt_logprobs", "stop", "stop_token_ids", "logit_bias",
    "ignore_eos", "min_tokens", "request_id", "metadata", "store", "service_tier", "response_format",
    "structured_outputs", "guided_json", "guided_regex", "guided_choice", "guided_grammar", "guided_decoding_backend",
    "include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens", "parallel_tool_calls",
    "kv_transfer_params", "vllm_xargs", "use_beam_search", "bad_words"};

bool is_sampling_member(std::string_view raw_key) {
  return std::find(kSamplingMembers.begin(), kSamplingMembers.end(), raw_key) != kSamplingMembers.end();
}

constexpr size_t npos = std::string_view::npos;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_space(std::string_view s, size_t i) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// s[i] == '"': the index just past the closing quote, or npos. Quotes are found with memchr (a
// prompt is nearly all string content; find_first_of would call memchr once per byte); a quote
// preceded by an odd run of backslashes is escaped.
size_t skip_string(std::string_view s, size_t i) {
  const size_t first = i + 1;
  size_t from = first;
  for (;;) {
    if (from >= s.size()) return npos;
    const void* hit = std::memchr(s.data() + from, '"', s.size() - from);
    if (!hit) return npos;
    const size_t q = static_cast<size_t>(static_cast<const char*>(hit) - s.data());
    size_t run = 0;
    while (q - run > first && s[q - run - 1] == '\\') ++run;
    if (run % 2 == 0) return q + 1;
    from = q + 1;
  }
}

// From the start of a value: the index of the ',' or '}' that ends it at depth 0, or npos.
size_t skip_value(std::string_view s, size_t i) {
  int depth = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') {
      i = skip_string(s, i);
      if (i == npos) return npos;
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (depth == 0) return i;
      --depth;
    } else if (c == ',' && depth == 0) {
      return i;
    }
    ++i;
  }
  return npos;
}

void update(XXH3_state_t* st, std::string_view part) {
  XXH3_128bits_update(st, part.data(), part.size());
  XXH3_128bits_update(st, "\0", 1);
}

}  // namespace

RenderKey render_key(std::string_view model, std::string_view adapter, std::string_view body) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_128bits_reset(st);
  update(st, model);
  update(st, adapter);
  size_t i = skip_space(body, 0);
  if (i < body.size() && body[i] == '{') {
    ++i;
    for (;;) {
      i = skip_space(body, i);
      if (i >= body.size() || body[i] != '"') break;  // '}' or not a member: the end
      const size_t key_end = skip_string(body, i);
      if (key_end == npos) break;
      const std::string_view key = body.substr(i + 1, key_end - i - 2);
      i = skip_space(body, key_end);
      if (i >= body.size() || body[i] != ':') break;
      const size_t value_start = skip_space(body, i + 1);
      const size_t value_end = skip_value(body, value_start);
      if (value_end == npos) break;
      if (key != "model" && !is_sampling_member(key)) {
        std::string_view value = body.substr(value_start, value_end - value_start);
        while (!value.empty() && is_space(value.back())) value.remove_suffix(1);
        update(st, key);
        update(st, value);
      }
      i = value_end;
      if (body[i] != ',') break;
      ++i;
    }
  } else {
    update(st, body);  // not an object (never after parse_request): the whole body is the key
  }
  const XXH128_hash_t h = XXH3_128bits_digest(st);
  XXH3_freeState(st);
  return RenderKey{h.low64, h.high64};
}

namespace {

namespace od = simdjson::ondemand;

// The "token_ids" member of one render object into `out`; an error message or empty.
std::string read_token_ids(od::value obj_value, TokenIds& out, size_t max_ids) {
  od::object obj;
  if (obj_value.get_object().get(obj)) return "the answer is not an object";
  od::array arr;
  auto field = obj.find_field_unordered("token_ids");
  if (field.error() == simdjson::NO_SUCH_FIELD) return "no token_ids";
  if (field.get_array().get(arr)) return "token_ids is not an array";
  for (auto el : arr) {
    uint64_t id = 0;
    if (el.get_uint64().get(id)) return "a token id is not a non-negative integer";
    if (id > UINT32_MAX) return "a token id is out of range";
    if (out.size() >= max_ids) return "too many token ids";
    out.push_back(static_cast<uint32_t>(id));
  }
  if (out.empty()) return "token_ids is empty";
  return {};
}

}  // namespace

RenderAnswer parse_render_answer(std::string_view body, bool completions, size_t max_ids) {
  RenderAnswer a;
  thread_local od::parser parser;
  const simdjson::padded_string padded(body);
  od::document doc;
  if (parser.iterate(padded).get(doc)) {
    a.error = "not JSON";
    return a;
  }
  auto ids = std::make_shared<TokenIds>();
  if (completions) {
    od::array arr;
    if (doc.get_array().get(arr)) {
      a.error = "the completions answer is not an array";
      return a;
    }
    bool any = false;
    for (auto el : arr) {
      od::value v;
      if (el.get(v)) {
        a.error = "not JSON";
        return a;
      }
      a.error = read_token_ids(v, *ids, max_ids);
      any = true;
      break;  // the first prompt's ids: the one placement the pick prices
    }
    if (!any) a.error = "the completions answer is an empty array";
  } else {
    od::value v;
    if (doc.get_value().get(v)) a.error = "not JSON";
    else a.error = read_token_ids(v, *ids, max_ids);
  }
  if (a.error.empty()) a.ids = std::move(ids);
  return a;
}

RenderCache::RenderCache(size_t max_entries, size_t max_tokens) : max_entries_(max_entries), max_tokens_(max_tokens) {}

std::shared_ptr<const TokenIds> RenderCache::find(const RenderKey& key) {
  std::lock_guard lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void RenderCache::insert(const RenderKey& key, std::shared_ptr<const TokenIds> ids) {
  if (max_entries_ == 0 || !ids || ids->size() > max_tokens_) return;
  std::lock_guard lock(mu_);
  if (auto it = map_.find(key); it != map_.end()) {
    tokens_ -= it->second->second->size();
    it->second->second = std::move(ids);
    tokens_ += it->second->second->size();
    lru_.splice(lru_.begin(), lru_, it->second);
  } else {
    tokens_ += ids->size();
    lru_.emplace_front(key, std::move(ids));
    map_.emplace(key, lru_.begin());
  }
  evict_locked();
}

void RenderCache::evict_locked() {
  while (!lru_.empty() && (map_.size() > max_entries_ || tokens_ > max_tokens_)) {
    tokens_ -= lru_.back().second->size();
    map_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

size_t RenderCache::entries() const {
  std::lock_guard lock(mu_);
  return map_.size();
}

size_t RenderCache::tokens() const {
  std::lock_guard lock(mu_);
  return tokens_;
}

}  // namespace sluice
