#include "core/picker/prefix_tracker.h"

#include <algorithm>

namespace sluice {

PrefixTracker::PrefixTracker(PrefixTrackerOptions opts)
    : opts_(opts), index_(0, opts.default_capacity_blocks) {}

void PrefixTracker::reset(size_t endpoints) {
  index_.reset(endpoints);
  matched_.assign(endpoints, 0);
}

void PrefixTracker::adopt(const PrefixTracker& old, std::span<const int> old_of_new) {
  block_tokens_ = old.block_tokens_;
  reset(std::max(index_.endpoints(), old_of_new.size()));
  for (size_t e = 0; e < old_of_new.size(); ++e) {
    const int o = old_of_new[e];
    if (o < 0 || static_cast<size_t>(o) >= old.index_.endpoints()) continue;
    index_.set_capacity(e, old.index_.capacity(static_cast<size_t>(o)));
    index_.learn(e, old.index_.blocks_of(static_cast<size_t>(o)));
  }
}

void PrefixTracker::sync(std::span<const EndpointView> endpoints) {
  size_t n = index_.endpoints();
  for (const auto& v : endpoints) n = std::max(n, v.index + 1);
  if (n > index_.endpoints()) index_.grow(n);
  bool block_size_seen = false;
  for (const auto& v : endpoints) {
    const EngineSignals* s = v.signals;
    if (!s || !s->present) continue;
    // The pool's block size is the first scraped endpoint's (a mixed pool gets one approximation
    // instead of an index cleared on every pick).
    if (!block_size_seen) {
      block_size_seen = true;
      if (s->block_size > 0 && s->block_size != block_tokens_ && s->block_size <= 4096) {
        block_tokens_ = s->block_size;
        reset(index_.endpoints());  // every hash was cut at the old block size
      }
    }
    if (opts_.capacity_from_engine && s->kv_capacity_blocks > 0 && index_.capacity(v.index) != s->kv_capacity_blocks) {
      index_.set_capacity(v.index, s->kv_capacity_blocks);
      if (events_) events_->set_capacity(v.index, 2 * s->kv_capacity_blocks);
    }
  }
}

void PrefixTracker::hash(const PickRequest& req) {
  PrefixIndex::hash_blocks(req.text, block_chars(), PrefixIndex::seed(req.model, req.adapter, req.cache_salt),
                           opts_.max_blocks, blocks_);
}

std::span<const uint32_t> PrefixTracker::match(const PickRequest& req) {
  matched_.resize(index_.endpoints());
  deepest_ = index_.match_text(req.text, block_chars(), PrefixIndex::seed(req.model, req.adapter, req.cache_salt),
                    opts_.max_blocks, matched_);
  request_blocks_ = std::min(req.text.size() / block_chars(), opts_.max_blocks);
  sources_.assign(matched_.size(), KvEventIndex::Source::learned);
  if (events_) events_->match(req.text, req.adapter, req.cache_salt, now_, matched_, sources_, req.token_ids);
  return matched_;
}

void PrefixTracker::learn(const PickRequest& req, size_t endpoint) {
  if (endpoint >= index_.endpoints()) index_.grow(endpoint + 1);
  hash(req);
  index_.learn(endpoint, blocks_);
  if (events_) events_->note_dispatch(endpoint, req.text, req.adapter, req.cache_salt, now_, req.token_ids);
}

}  // namespace sluice
