#include "core/prefix/kv_event_index.h"

#include <algorithm>

#include "core/prefix/token_blocks.h"

namespace sluice {

namespace {
// An endpoint is evicting while its last BlockRemoved is this recent; a dispatch not followed by
// this much of the engine's events is taken as scheduled (an idle engine publishes nothing).
constexpr Duration kEvictingWindow = std::chrono::seconds(1);
// Engine steps (batches) within which a chain counts as recently stored or touched: near the
// LRU's head already, not walked again.
constexpr uint64_t kRecentSteps = 32;
}  // namespace

KvSequence::Verdict KvSequence::on_batch(int64_t seq) {
  if (last_ < 0 || seq == last_ + 1) return Verdict::apply;
  if (seq <= last_) return Verdict::duplicate;
  return Verdict::gap;
}

std::string_view KvEventIndex::to_string(Source s) {
  switch (s) {
    case Source::events: return "events";
    case Source::recent: return "recent";
    case Source::learned: break;
  }
  return "learned";
}

KvEventIndex::KvEventIndex(size_t endpoints, Options opts)
    : opts_(opts),
      eps_(endpoints),
      blocks_(endpoints, opts.default_capacity_blocks),
      recent_{PrefixIndex(endpoints, opts.recent_capacity_blocks), PrefixIndex(endpoints, opts.recent_capacity_blocks)} {
  for (auto& ep : eps_) ep.capacity = opts_.default_capacity_blocks;
}

void KvEventIndex::set_capacity(size_t e, int64_t blocks) {
  std::lock_guard lock(mu_);
  if (e >= eps_.size()) return;
  eps_[e].capacity = blocks > 0 ? blocks : opts_.default_capacity_blocks;
  blocks_.set_capacity(e, eps_[e].capacity);
}

void KvEventIndex::clear_locked(size_t e) {
  blocks_.purge(e);
  recent_[0].purge(e);
  recent_[1].purge(e);
  eps_[e].own_of_engine.clear();
  eps_[e].parent_of.clear();
}

// The chain ending at `own`, back to its root (bounded: a cycle of colliding hashes cannot loop),
// becomes the endpoint's most recent, head first (the engine's LRU order after the request).
// A parent stored in the last 32 batches (engine steps) is most likely the running request's own
// last block (a decode step storing its next one), and a chain that young is near the LRU's head
// anyway: the walk, O(context), is skipped; walking again on every decode block would cost
// O(context) per 16 tokens (agent sessions with 20k-token contexts: 15x the fleet simulator's time).
void KvEventIndex::touch_chain_locked(size_t e, uint64_t own) {
  Endpoint& ep = eps_[e];
  const uint64_t batch = ep.counters.batches;
  if (auto it = ep.parent_of.find(own); it == ep.parent_of.end() || it->second.stored + kRecentSteps >= batch) return;
  chain_.clear();
  for (size_t depth = 0; own != 0 && depth < opts_.max_blocks; ++depth) {
    auto it = ep.parent_of.find(own);
    // The rest was touched with it (or within the 32 steps before): near the LRU's head already.
    if (it == ep.parent_of.end() || it->second.touched + kRecentSteps >= batch) break;
    it->second.touched = batch;
    chain_.push_back(own);
    own = it->second.parent;
  }
  std::reverse(chain_.begin(), chain_.end());
  blocks_.learn(e, chain_);
}

void KvEventIndex::drop_scheduled_locked(Endpoint& ep, Time before) {
  while (!ep.unscheduled.empty() && ep.unscheduled.front().first < before) {
    ep.unscheduled_blocks -= ep.unscheduled.front().second;
    ep.unscheduled.pop_front();
  }
}

bool KvEventIndex::evicting_locked(const Endpoint& ep, Time now) { return now - ep.last_eviction <= kEvictingWindow; }

uint32_t KvEventIndex::forecast_locked(size_t e, uint32_t n, Time now) {
  Endpoint& ep = eps_[e];
  if (n == 0 || !opts_.eviction_forecast) return n;  // nothing held, or off: no LRU walk on the pick path
  drop_scheduled_locked(ep, now - kEvictingWindow);
  if (ep.unscheduled_blocks == 0 || !evicting_locked(ep, now)) return n;
  // The blocks the requests ahead of this one allocate evict the engine's least recent ones.
  tail_.clear();
  blocks_.least_recent(e, static_cast<size_t>(ep.unscheduled_blocks), tail_);
  std::sort(tail_.begin(), tail_.end());
  for (uint32_t i = 0; i < n && i < hashes_.size(); ++i)
    if (std::binary_search(tail_.begin(), tail_.end(), hashes_[i])) return i;
  return n;
}

void KvEventIndex::set_connected(size_t e, bool connected, Time now) {
  std::lock_guard lock(mu_);
  if (e >= eps_.size()) return;
  Endpoint& ep = eps_[e];
  // Either way the engine's blocks are unknown now: a lost engine took its cache with it, and a
  // reconnection may be a restarted engine (the replay that follows rebuilds what it still holds).
  if (connected) ++ep.counters.reconnects;
  clear_locked(e);
  ep.waiting_for_events = false;
  ep.connected = connected;
  ep.synced = false;
}

void KvEventIndex::set_synced(size_t e, bool synced) {
  std::lock_guard lock(mu_);
  if (e < eps_.size()) eps_[e].synced = synced;
}

void KvEventIndex::resync(size_t e) {
  std::lock_guard lock(mu_);
  if (e >= eps_.size()) return;
  ++eps_[e].counters.resyncs;
  clear_locked(e);
}

void KvEventIndex::apply(size_t e, const kv::EventBatch& batch, int64_t seq, double lag_s, Time now) {
  std::lock_guard lock(mu_);
  if (e >= eps_.size()) return;
  Endpoint& ep = eps_[e];
  ep.counters.batches += 1;
  ep.counters.skipped_events += batch.skipped_events;
  ep.last_lag_s = lag_s;
  ep.last_seq = seq;
  ep.waiting_for_events = false;
  // A step ended: what was sent before the previous batch has been scheduled.
  drop_scheduled_locked(ep, ep.last_batch);
  ep.last_batch = now;
  std::vector<uint64_t> own;
  for (const kv::Event& ev : batch.events) {
    ep.counters.events += 1;
    if (const auto* st = std::get_if<kv::BlockStored>(&ev)) {
      if (st->block_size <= 0 || st->block_size > 4096) {
        ep.counters.skipped_events += 1;
        continue;
      }
      if (st->block_size != block_size_) {
        // Every key was cut at the old block size: start over (a mixed pool is not supported).
        block_size_ = static_cast<int>(st->block_size);
        for (size_t i = 0; i < eps_.size(); ++i) clear_locked(i);
      }
      uint64_t parent = 0;
      if (st->parent_block_hash) {
        auto it = ep.own_of_engine.find(*st->parent_block_hash);
        if (it == ep.own_of_engine.end()) {
          ep.counters.orphans += st->block_hashes.size();
          continue;
        }
        parent = it->second;
        // The request that stored these blocks was scheduled on the chain's cached blocks: a hit.
        touch_chain_locked(e, parent);
      } else {
        parent = token_chain_seed(st->lora_name, st->cache_salt);
      }
      const size_t bs = static_cast<size_t>(st->block_size);
      const size_t n = std::min(st->block_hashes.size(), st->token_ids.size() / bs);
      own.clear();
      for (size_t i = 0; i < n; ++i) {
        const uint64_t prev = st->parent_block_hash || i > 0 ? parent : 0;
        parent = token_block_hash(parent, std::span<const uint32_t>(st->token_ids).subspan(i * bs, bs));
        own.push_back(parent);
        ep.own_of_engine[st->block_hashes[i]] = parent;
        ep.parent_of[parent] = Endpoint::Link{prev, ep.counters.batches, ep.counters.batches};
      }
      ep.counters.orphans += st->block_hashes.size() - n;  // no tokens for them: cannot be keyed
      ep.counters.stored_blocks += n;
      // learn() makes the first of its list the most recent; a chain's head outlives its tail.
      blocks_.learn(e, own);
      if (ep.own_of_engine.size() > static_cast<size_t>(4 * ep.capacity)) {
        ++ep.counters.resyncs;  // removals were missed: start over rather than grow
        clear_locked(e);
      }
    } else if (const auto* rm = std::get_if<kv::BlockRemoved>(&ev)) {
      for (uint64_t h : rm->block_hashes) {
        auto it = ep.own_of_engine.find(h);
        if (it == ep.own_of_engine.end()) continue;
        ep.parent_of.erase(it->second);
        ep.last_eviction = now;
        blocks_.forget(e, it->second);
        // A recent dispatch of this block is stale now: the engine says it is gone.
        recent_[0].forget(e, it->second);
        recent_[1].forget(e, it->second);
        ep.own_of_engine.erase(it);
        ep.counters.removed_blocks += 1;
      }
    } else {
      ep.counters.cleared += 1;
      clear_locked(e);
    }
  }
}

bool KvEventIndex::fresh_locked(const Endpoint& ep, Time now) const {
  if (!ep.connected || !ep.synced) return false;
  return !(ep.waiting_for_events && now - ep.dispatch_pending_since > opts_.stale_after);
}

bool KvEventIndex::fresh(size_t e, Time now) const {
  std::lock_guard lock(mu_);
  return e < eps_.size() && fresh_locked(eps_[e], now);
}

void KvEventIndex::rotate_locked(Time now) {
  if (now - recent_since_ < opts_.recent_window) return;
  std::swap(recent_[0], recent_[1]);
  recent_[0].reset(eps_.size());
  recent_since_ = now;
}

void KvEventIndex::request_hashes(std::string_view text, std::span<const uint32_t> token_ids, std::string_view lora_name,
                                  std::string_view cache_salt) {
  const size_t bs = static_cast<size_t>(block_size_);
  hashes_.clear();
  if (!token_ids.empty()) {  // the engine's own ids: exact, no estimate
    token_block_hashes(token_ids, bs, token_chain_seed(lora_name, cache_salt), opts_.max_blocks, hashes_);
    return;
  }
  const size_t chars = std::min(text.size(), opts_.max_blocks * bs * kEstimateBytesPerToken);
  tokens_.clear();
  estimate_token_ids(text.substr(0, chars), tokens_);
  token_block_hashes(tokens_, bs, token_chain_seed(lora_name, cache_salt), opts_.max_blocks, hashes_);
}

size_t KvEventIndex::match(std::string_view text, std::string_view lora_name, std::string_view cache_salt, Time now,
                           std::span<uint32_t> matched, std::span<Source> source,
                           std::span<const uint32_t> token_ids) {
  std::lock_guard lock(mu_);
  rotate_locked(now);
  const size_t n = std::min({matched.size(), source.size(), eps_.size()});
  bool any_fresh = false;
  for (size_t e = 0; e < n; ++e) {
    source[e] = Source::learned;
    any_fresh = any_fresh || fresh_locked(eps_[e], now);
  }
  if (!any_fresh) return 0;
  request_hashes(text, token_ids, lora_name, cache_salt);
  ev_.assign(eps_.size(), 0);
  rc_.assign(eps_.size(), 0);
  rc2_.assign(eps_.size(), 0);
  blocks_.match(hashes_, ev_);
  recent_[0].match(hashes_, rc_);
  recent_[1].match(hashes_, rc2_);
  for (size_t e = 0; e < n; ++e) {
    if (!fresh_locked(eps_[e], now)) continue;
    const uint32_t recent = std::max(rc_[e], rc2_[e]);
    matched[e] = std::max(ev_[e], recent);
    source[e] = recent > ev_[e] ? Source::recent : Source::events;
    // The forecast cuts both: a recent dispatch's blocks are in the engine's LRU like the events'.
    matched[e] = forecast_locked(e, matched[e], now);
  }
  return hashes_.size();
}

void KvEventIndex::note_dispatch(size_t e, std::string_view text, std::string_view lora_name,
                                 std::string_view cache_salt, Time now, std::span<const uint32_t> token_ids) {
  std::lock_guard lock(mu_);
  if (e >= eps_.size()) return;
  rotate_locked(now);
  Endpoint& ep = eps_[e];
  if (!ep.waiting_for_events) {
    ep.waiting_for_events = true;
    ep.dispatch_pending_since = now;
  }
  request_hashes(text, token_ids, lora_name, cache_salt);
  recent_[0].learn(e, hashes_);
  // The engine will touch the blocks it holds of this chain when it schedules the request.
  chain_.clear();
  for (uint64_t h : hashes_) {
    if (!ep.parent_of.contains(h)) break;
    chain_.push_back(h);
  }
  blocks_.learn(e, chain_);
  // The blocks it will allocate: its uncached full blocks, and one for its partial last block.
  ep.unscheduled.emplace_back(now, static_cast<uint32_t>(hashes_.size() - chain_.size() + 1));
  ep.unscheduled_blocks += ep.unscheduled.back().second;
  if (ep.unscheduled.size() > 4096) drop_scheduled_locked(ep, ep.unscheduled[ep.unscheduled.size() - 4096].first);
}

int KvEventIndex::block_size() const {
  std::lock_guard lock(mu_);
  return block_size_;
}

KvEndpointStatus KvEventIndex::status(size_t e, Time now) const {
  std::lock_guard lock(mu_);
  KvEndpointStatus s;
  if (e >= eps_.size()) return s;
  const Endpoint& ep = eps_[e];
  s.counters = ep.counters;
  s.connected = ep.connected;
  s.synced = ep.synced;
  s.fresh = fresh_locked(ep, now);
  s.last_seq = ep.last_seq;
  s.last_lag_s = ep.last_lag_s;
  s.blocks = blocks_.entries(e);
  s.evicting = evicting_locked(ep, now);
  for (const auto& [at, blocks] : ep.unscheduled)  // as forecast_locked counts them (const: not dropped here)
    if (at >= now - kEvictingWindow) s.unscheduled_blocks += blocks;
  return s;
}

size_t KvEventIndex::memory_bytes() const {
  std::lock_guard lock(mu_);
  size_t b = blocks_.memory_bytes() + recent_[0].memory_bytes() + recent_[1].memory_bytes();
  // unordered_map: a node (next pointer, key, value, cached hash) and a bucket pointer per entry.
  for (const auto& ep : eps_)
    b += ep.own_of_engine.size() * (4 * sizeof(void*)) + ep.own_of_engine.bucket_count() * sizeof(void*) +
         ep.parent_of.size() * (4 * sizeof(void*)) + ep.parent_of.bucket_count() * sizeof(void*);
  return b;
}

size_t KvEventIndex::blocks() const {
  std::lock_guard lock(mu_);
  return blocks_.entries();
}

}  // namespace sluice
