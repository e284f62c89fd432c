#include "model/engine/engine.h"

#include <algorithm>

namespace sluice::engine {

std::string_view to_string(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::abort: return "abort";
  }
  return "stop";
}

std::string_view to_string(SubmitError e) {
  switch (e) {
    case SubmitError::none: return "ok";
    case SubmitError::duplicate_id: return "duplicate request id";
    case SubmitError::empty_prompt: return "empty prompt";
    case SubmitError::too_long: return "prompt plus output exceeds max_model_len";
    case SubmitError::exceeds_kv_capacity: return "request needs more KV blocks than the engine has";
    case SubmitError::lora_disabled: return "LoRA is not enabled on this engine (max_loras = 0)";
  }
  return "error";
}

EngineConfig EngineConfig::from_profile(const EngineProfile& p) {
  EngineConfig c;
  c.cost = p.cost;
  c.num_blocks = p.num_blocks;
  c.max_num_seqs = p.max_num_seqs;
  c.max_num_batched_tokens = p.max_num_batched_tokens;
  c.max_model_len = p.max_model_len;
  c.embedding = p.embedding;
  if (p.embedding) c.prefix_caching = false;
  return c;
}

std::string EngineConfig::validate() const {
  if (num_blocks <= 0) return "num_blocks must be positive";
  if (block_size <= 0) return "block_size must be positive";
  if (max_num_seqs <= 0) return "max_num_seqs must be positive";
  if (max_num_batched_tokens <= 0) return "max_num_batched_tokens must be positive";
  if (max_model_len <= 1) return "max_model_len must be > 1";
  if (long_prefill_token_threshold < 0) return "long_prefill_token_threshold must be >= 0";
  if (long_prefill_token_threshold > max_model_len) return "long_prefill_token_threshold must be <= max_model_len";
  if (max_loras < 0) return "max_loras must be >= 0";
  if (lora_load_ms < 0) return "lora_load_ms must be >= 0";
  if (cost.jitter_sigma < 0 || cost.jitter_sigma > 2) return "jitter sigma must be within [0, 2]";
  if (cost.c0_ms < 0 || cost.w_ms < 0 || cost.beta_ms < 0 || cost.delta_ms < 0 || cost.gamma_ms < 0 ||
      cost.eps_ms < 0)
    return "cost parameters must be >= 0";
  return {};
}

struct Engine::Request {
  RequestId id = 0;
  std::vector<TokenId> tokens;  // prompt then generated tokens
  int64_t prompt_len = 0;
  int64_t max_output = 0;
  FinishReason limit_reason = FinishReason::length;
  int64_t priority = 0;
  int64_t seq = 0;
  std::string adapter;
  std::string cache_salt;
  bool embedding = false;
  uint64_t extra_keys = 0;
  std::vector<BlockHash> hashes;  // of every full block of `tokens`
  std::vector<BlockId> blocks;
  size_t registered = 0;          // blocks[0..registered) are in the prefix cache
  int64_t num_computed = 0;
  int64_t num_output = 0;
  int64_t cached_tokens = 0;
  bool counted_prefix = false;
  bool running = false;
  bool done = false;
  QueueKey key{};
  Time arrival{}, queued{}, first_scheduled{-1}, last_token{};
};

Engine::Engine(const EngineConfig& cfg)
    : cfg_(cfg),
      cost_(cfg.cost, cfg.lora_load_ms),
      blocks_(cfg.num_blocks, cfg.block_size, cfg.prefix_caching && !cfg.embedding),
      lora_(cfg.max_loras),
      rng_(cfg.seed) {}

Engine::~Engine() = default;

SubmitError Engine::submit(EngineRequest req, Time now) {
  if (requests_.count(req.id)) return SubmitError::duplicate_id;
  if (req.prompt.empty()) return SubmitError::empty_prompt;
  if (!req.adapter.empty() && cfg_.max_loras == 0) return SubmitError::lora_disabled;
  const bool embedding = req.embedding || cfg_.embedding;
  const int64_t max_out = embedding ? 0 : std::max<int64_t>(1, req.max_output_tokens);
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + max_out;
  if (total > cfg_.max_model_len) return SubmitError::too_long;
  if (!embedding && (total + cfg_.block_size - 1) / cfg_.block_size > cfg_.num_blocks)
    return SubmitError::exceeds_kv_capacity;

  auto r = std::make_unique<Request>();
  r->id = req.id;
  r->prompt_len = static_cast<int64_t>(req.prompt.size());
  r->tokens = std::move(req.prompt);
  r->max_output = max_out;
  r->limit_reason = req.finish_reason;
  r->priority = cfg_.policy == SchedulingPolicy::priority ? req.priority : 0;
  r->seq = next_seq_++;
  r->adapter = std::move(req.adapter);
  r->embedding = embedding;
  r->arrival = req.arrival.value_or(now);
  r->queued = now;
  if (!embedding) {
    r->extra_keys = extra_keys_hash(r->adapter, req.cache_salt);
    r->cache_salt = req.cache_salt;
    extend_block_hashes(r->tokens, r->extra_keys, cfg_.block_size, r->hashes);
  }
  Request* raw = r.get();
  requests_.emplace(raw->id, std::move(r));
  enqueue_waiting(raw, false);
  return SubmitError::none;
}

void Engine::enqueue_waiting(Request* r, bool at_head) {
  r->running = false;
  if (cfg_.policy == SchedulingPolicy::priority) r->key = {r->priority, r->seq};
  else r->key = {0, at_head ? --head_seq_ : r->seq};
  waiting_.insert({r->key, r->id});
}

bool Engine::adapter_in_use(std::string_view name) const {
  auto it = running_adapters_.find(std::string(name));
  return it != running_adapters_.end() && it->second > 0;
}

bool Engine::abort(RequestId id, Time now) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request* r = it->second.get();
  finish(r, FinishReason::abort, now);
  if (r->running) running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  requests_.erase(it);  // a step in flight finds no request under this id and emits nothing
  return true;
}

// Leaves the request's slot in running_ for the caller to compact.
void Engine::finish(Request* r, FinishReason why, Time now) {
  r->done = true;
  if (r->running) {
    if (!r->adapter.empty()) --running_adapters_[r->adapter];
  } else {
    waiting_.erase({r->key, r->id});
  }
  blocks_.release(r->blocks);
  switch (why) {
    case FinishReason::stop: ++counters_.finished_stop; break;
    case FinishReason::length: ++counters_.finished_length; break;
    case FinishReason::abort: ++counters_.finished_abort; break;
  }
  hist_.e2e.observe(std::max(0.0, to_seconds(now - r->arrival)));
}

void Engine::register_full_blocks(Request* r, int64_t computed) {
  const size_t bs = static_cast<size_t>(cfg_.block_size);
  while (r->registered < r->hashes.size() && r->registered < r->blocks.size() &&
         (r->registered + 1) * bs <= static_cast<size_t>(computed)) {
    if (blocks_.events_enabled()) {
      const size_t i = r->registered;
      BlockManager::StoredInfo info;
      if (i > 0) info.parent = r->hashes[i - 1];
      info.tokens = std::span<const TokenId>(r->tokens).subspan(i * bs, bs);
      info.lora_name = r->adapter;
      info.cache_salt = r->cache_salt;
      blocks_.cache_block(r->blocks[i], r->hashes[i], &info);
    } else {
      blocks_.cache_block(r->blocks[r->registered], r->hashes[r->registered]);
    }
    ++r->registered;
  }
}

void Engine::preempt(Request* r) {
  blocks_.release(r->blocks);
  r->registered = 0;
  r->num_computed = 0;
  if (!r->adapter.empty()) --running_adapters_[r->adapter];
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
  enqueue_waiting(r, true);
  ++counters_.preemptions;
  ++step_preemptions_;
}

size_t Engine::pick_victim(size_t first_unscheduled) const {
  size_t victim = running_.size() - 1;  // FCFS: the newest
  if (cfg_.policy == SchedulingPolicy::priority) {
    for (size_t i = first_unscheduled; i < running_.size(); ++i)
      if (running_[i]->key > running_[victim]->key) victim = i;
  }
  return victim;
}

std::optional<Duration> Engine::begin_step(Time now) {
  if (in_flight_) return std::nullopt;
  // A prefill's tokens this step: at most long_prefill_token_threshold (when set), as vLLM's
  // scheduler caps num_new_tokens for running and waiting requests alike. A decode (1 token) is
  // never capped.
  const int64_t cap = cfg_.long_prefill_token_threshold;
  const auto capped = [cap](int64_t tokens) { return cap > 0 && tokens > cap ? cap : tokens; };
  scheduled_.clear();
  step_preemptions_ = 0;
  int64_t budget = cfg_.max_num_batched_tokens;

  // 1. Running requests.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    const int64_t need = (r->embedding ? r->prompt_len : static_cast<int64_t>(r->tokens.size())) - r->num_computed;
    const int64_t n = std::min(capped(need), budget);
    if (n <= 0) { ++i; continue; }
    bool self_preempted = false;
    while (!r->embedding && !blocks_.allocate_slots(r->blocks, {}, 0, r->num_computed + n)) {
      const size_t v = pick_victim(i);
      Request* victim = running_[v];
      preempt(victim);
      if (victim == r) { self_preempted = true; break; }
    }
    if (self_preempted) continue;  // running_[i] is now the next request
    if (!r->embedding) register_full_blocks(r, r->num_computed + n);  // cached when scheduled, as vLLM v1
    scheduled_.push_back({r->id, n});
    budget -= n;
    ++i;
  }

  // 2. Waiting requests, unless this step had to preempt.
  int lora_loads = 0;
  if (step_preemptions_ == 0) {
    auto in_use = [this](std::string_view a) { return adapter_in_use(a); };
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (static_cast<int64_t>(running_.size()) >= cfg_.max_num_seqs || budget <= 0) break;
      Request* r = requests_.at(it->second).get();
      if (!r->adapter.empty() && !lora_.can_admit(r->adapter, in_use)) { ++it; continue; }
      const int64_t ntok = r->embedding ? r->prompt_len : static_cast<int64_t>(r->tokens.size());
      int64_t hit_blocks = 0;
      if (!r->embedding) {
        const int64_t max_hit = (ntok - 1) / cfg_.block_size;  // always recompute the last token
        hit_blocks = blocks_.cached_prefix_blocks(r->hashes, max_hit);
      }
      const int64_t hit_tokens = hit_blocks * cfg_.block_size;
      const int64_t n = std::min(capped(ntok - hit_tokens), budget);
      if (!r->embedding && !blocks_.allocate_slots(r->blocks, r->hashes, hit_blocks, hit_tokens + n)) break;
      if (!r->adapter.empty()) {
        if (lora_.admit(r->adapter, ++lora_tick_, in_use)) { ++lora_loads; ++counters_.lora_loads; }
        ++running_adapters_[r->adapter];
      }
      if (!r->counted_prefix) {
        r->counted_prefix = true;
        r->cached_tokens = hit_tokens;
        if (!r->embedding) {
          counters_.prefix_queries += ntok;
          counters_.prefix_hits += hit_tokens;
        }
      }
      r->num_computed = hit_tokens;
      r->registered = static_cast<size_t>(hit_blocks);
      if (r->first_scheduled < Time{0}) {
        r->first_scheduled = now;
        hist_.queue.observe(std::max(0.0, to_seconds(now - r->queued)));  // engine queue only, like vLLM
      }
      it = waiting_.erase(it);
      r->running = true;
      running_.push_back(r);
      if (!r->embedding) register_full_blocks(r, hit_tokens + n);  // cached when scheduled, as vLLM v1
      scheduled_.push_back({r->id, n});
      budget -= n;
    }
  }
  if (scheduled_.empty()) return std::nullopt;

  // 3. Shape of the step, and advance the computed tokens.
  StepShape shape;
  shape.num_lora_loads = lora_loads;
  for (const auto& s : scheduled_) {
    Request* r = requests_.at(s.id).get();
    shape.num_tokens += s.tokens;
    ++shape.num_seqs;
    const bool decode = s.tokens == 1 && r->num_output > 0 &&
                        r->num_computed + 1 == static_cast<int64_t>(r->tokens.size());
    if (decode) shape.kv_read_tokens += r->num_computed + 1;
    else shape.prefill_pairs += double(s.tokens) * (double(r->num_computed) + double(s.tokens) / 2.0);
    r->num_computed += s.tokens;
  }
  step_shape_ = shape;
  step_duration_ = cost_.step_duration(shape, rng_);
  step_start_ = now;
  in_flight_ = true;
  ++counters_.steps;
  return step_duration_;
}

namespace {
TokenId generated_token(RequestId id, int64_t index) {
  uint64_t x = id * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(index) * 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 29;
  return static_cast<TokenId>(x % kVocabSize);
}
}  // namespace

StepResult Engine::end_step(Time now) {
  StepResult res;
  if (!in_flight_) return res;
  in_flight_ = false;
  busy_done_ += step_duration_;
  res.start = step_start_;
  res.end = now;
  res.shape = step_shape_;
  res.preemptions = step_preemptions_;
  res.outputs.reserve(scheduled_.size());
  for (const auto& s : scheduled_) {
    auto it = requests_.find(s.id);
    if (it == requests_.end()) continue;  // aborted during the step
    Request* r = it->second.get();
    RequestOutput out;
    out.id = r->id;
    out.prompt_tokens = r->prompt_len;
    out.cached_tokens = r->cached_tokens;
    if (r->embedding) {
      if (r->num_computed < r->prompt_len) continue;
      counters_.prompt_tokens += r->prompt_len;
      out.finished = FinishReason::stop;
      finish(r, FinishReason::stop, now);
      res.outputs.push_back(out);
      continue;
    }
    if (r->num_computed < static_cast<int64_t>(r->tokens.size())) continue;  // prefill chunk
    out.token = generated_token(r->id, r->num_output);
    r->tokens.push_back(out.token);
    extend_block_hashes(r->tokens, r->extra_keys, cfg_.block_size, r->hashes);
    ++r->num_output;
    ++counters_.generation_tokens;
    out.new_tokens = 1;
    out.output_tokens = r->num_output;
    if (r->num_output == 1) {
      out.first_token = true;
      counters_.prompt_tokens += r->prompt_len;
      hist_.ttft.observe(std::max(0.0, to_seconds(now - r->arrival)));
    } else {
      hist_.itl.observe(std::max(0.0, to_seconds(now - r->last_token)));
    }
    r->last_token = now;
    if (r->num_output >= r->max_output) {
      out.finished = r->limit_reason;
      finish(r, r->limit_reason, now);
    }
    res.outputs.push_back(out);
  }
  for (const auto& o : res.outputs) {
    if (!o.finished) continue;
    auto it = requests_.find(o.id);
    running_.erase(std::remove(running_.begin(), running_.end(), it->second.get()), running_.end());
    requests_.erase(it);
  }
  scheduled_.clear();
  return res;
}

StepResult Engine::step(Time now) {
  auto d = begin_step(now);
  if (!d) return StepResult{now, now, {}, 0, {}};
  return end_step(now + *d);
}

bool Engine::unload_adapter(std::string_view name) {
  if (adapter_in_use(name)) return false;
  return lora_.evict(name);
}

Duration Engine::busy_time(Time now) const {
  if (!in_flight_) return busy_done_;
  return busy_done_ + std::clamp(now - step_start_, Duration{0}, step_duration_);
}

EngineStats Engine::stats(Time now) const {
  EngineStats s;
  s.num_waiting = static_cast<int64_t>(waiting_.size());
  s.num_running = static_cast<int64_t>(running_.size());
  s.kv_usage = blocks_.usage();
  s.num_blocks = blocks_.num_blocks();
  s.num_free_blocks = blocks_.num_free();
  s.counters = counters_;
  s.histograms = hist_;
  s.busy_time = busy_time(now);
  for (const auto& [name, n] : running_adapters_)
    if (n > 0) s.running_adapters.push_back(name);
  std::sort(s.running_adapters.begin(), s.running_adapters.end());
  for (const auto& [key, id] : waiting_) {
    const auto& a = requests_.at(id)->adapter;
    if (!a.empty() && std::find(s.waiting_adapters.begin(), s.waiting_adapters.end(), a) == s.waiting_adapters.end())
      s.waiting_adapters.push_back(a);
  }
  std::sort(s.waiting_adapters.begin(), s.waiting_adapters.end());
  return s;
}

}  // namespace sluice::engine
