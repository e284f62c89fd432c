// KvEventIndex: a pool's prefix index fed by its engines' KV events (kv_events.h), shared by the
// pool's picker and the per-endpoint event subscribers. Pure: no sockets, time passed in.
//
// Keys. Blocks are keyed by the gateway's own chained hash of the events' token ids
// (token_blocks.h: root = lora_name + cache salt), so a request's own token ids find them; the
// engine's hash is kept only as the key of removals and as the parent link of the next store:
// per endpoint a map engine hash -> own hash. A BlockStored whose parent the map does not know (its
// store was missed) cannot be chained: it is counted as an orphan and dropped, as llm-d does.
//
// Sequencing (KvSequence, one per endpoint): seq == last + 1 applies; seq <= last is a duplicate
// (at-least-once delivery, a replay overlapping the stream) and is dropped; seq > last + 1 is a gap:
// the driver asks the replay socket for last + 1 onwards, and when the replay cannot fill the gap
// (no replay socket, timeout, the buffer no longer holds it) the endpoint is resynced: its blocks
// are cleared and the stream taken from the current batch on. A (re)connection to the publisher
// (and a disconnection) clears the endpoint (an engine restart invalidates every block) and asks for a replay from 0 (a
// new gateway replica starts warm from the engine's replay buffer, vLLM's buffer_steps).
//
// Freshness. An endpoint's events are fresh while its subscriber is connected and synced and no
// dispatch to it has gone unanswered by any event for `stale_after` (default 2 s): a publisher
// that went silent falls back to the gateway's learned index instead of stalling routing.
//
// Recent dispatches. What the engine has not reported yet (a request dispatched 50 ms ago is still
// prefilling) comes from the gateway's own dispatches of the last `recent_window` (default 2 s):
// two generations of a small PrefixIndex over the same token-block keys, rotated every window; a
// BlockRemoved or a clear drops the block from them too (under KV pressure the engine evicts a
// block within the window, and the recent entry would otherwise over-predict).
// A fresh endpoint's prediction is max(events, recent); a stale one's is the learned index's
// (PrefixTracker), and the source of each is reported (Source).
//
// Eviction forecast. Under KV pressure an engine's cache turns over in a fraction of a second
// (the KV-pressure bench: 200 blocks per engine, ~120 ms), and a block the events show at the pick
// can be evicted before the request is scheduled: the requests sent there just before it allocate
// their blocks first, and an engine that is out of free blocks takes them from its least recently
// used cached ones (vLLM's free-block queue). So the block set's LRU is kept in the engine's order:
// a BlockStored makes its blocks the most recent (head most recent: a finished request frees its
// blocks tail first), and so does a touch, which the events show for every gateway's requests: a
// request scheduled on cached blocks stores its new blocks with parent = its last cached block, so
// the chain through that parent was just used (this gateway's own dispatches touch their chain at
// once). Per endpoint, the dispatches the engine has not scheduled yet are those sent after the
// batch before the last (each batch ends an engine step), with the blocks each will allocate (its
// uncached full blocks + 1 partial). While the endpoint is evicting (a BlockRemoved within the last
// second), a match stops at the first block among the endpoint's `pending` least recent ones.
// The picker prices that forecast, and it is what the gateway predicts the engine will report.
// Measured (bench/kv_replicas.py --kv-blocks 200, 3 runs each): predicted / engine-reported cached
// tokens 1.05-1.08 without it, 0.99 (1 gateway) and 1.03-1.06 (3 gateways) with it; hit rates
// within a point or two either way. Other gateway replicas' unscheduled dispatches are not counted
// (they are not in the events until scheduled).
//
// Bounds. Per endpoint the block set is an LRU PrefixIndex bounded by 2x the endpoint's KV
// capacity (the engine removes blocks explicitly; the bound only contains missed removals), and
// the hash map by 4x: past it the endpoint is resynced (counted). memory_bytes() reports both.
// Thread safety: one mutex inside; the subscribers apply whole decoded batches under it and the
// picker takes it once per pick (never on the per-token path).
#pragma once
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/prefix/kv_events.h"
#include "core/prefix/prefix_index.h"
#include "core/time.h"

namespace sluice {

// Sequence bookkeeping of one publisher.
class KvSequence {
 public:
  enum class Verdict { apply, duplicate, gap };
  // A PUB batch with this seq arrived.
  Verdict on_batch(int64_t seq);
  // The batch was applied (in order): it is the last one seen.
  void applied(int64_t seq) { last_ = seq; }
  // Reconnected or resynced: the next batch is taken as it comes.
  void reset() { last_ = -1; }
  int64_t last() const { return last_; }
  int64_t next() const { return last_ + 1; }

 private:
  int64_t last_ = -1;
};

struct KvEndpointCounters {
  uint64_t batches = 0;          // applied
  uint64_t events = 0;           // applied
  uint64_t decode_errors = 0;    // batches (or frames) that could not be decoded
  uint64_t skipped_events = 0;   // malformed events inside decodable batches
  uint64_t duplicates = 0;
  uint64_t gaps = 0;
  uint64_t replays = 0;          // replay requests sent
  uint64_t replay_failures = 0;  // replays that did not fill the gap
  uint64_t resyncs = 0;          // the endpoint's blocks cleared to take the stream as it is
  uint64_t reconnects = 0;       // (re)connections: cleared, as an engine restart
  uint64_t cleared = 0;          // AllBlocksCleared events
  uint64_t orphans = 0;          // stored blocks whose parent was unknown
  uint64_t stored_blocks = 0, removed_blocks = 0;
  // Dispatches by the source of their prediction (index = KvEventIndex::Source): prompt tokens
  // and predicted cached tokens, beside the engine-reported hits (scraped) for the hit-rate panels.
  uint64_t prompt_tokens[3] = {0, 0, 0};
  uint64_t predicted_tokens[3] = {0, 0, 0};
};

struct KvEndpointStatus {
  KvEndpointCounters counters;
  bool connected = false;
  bool synced = false;
  bool fresh = false;
  int64_t last_seq = -1;
  double last_lag_s = 0;  // publisher ts -> applied, of the last batch
  size_t blocks = 0;
  bool evicting = false;            // a BlockRemoved within the last second: the forecast acts
  uint64_t unscheduled_blocks = 0;  // what this gateway's dispatches not yet scheduled will allocate
};

class KvEventIndex {
 public:
  enum class Source : uint8_t { learned, events, recent };
  static std::string_view to_string(Source s);

  struct Options {
    int64_t default_capacity_blocks = 2 * PrefixIndex::kDefaultCapacityBlocks;
    int64_t recent_capacity_blocks = 8192;
    Duration recent_window = std::chrono::seconds(2);
    Duration stale_after = std::chrono::seconds(2);
    size_t max_blocks = 8192;  // per request
    bool eviction_forecast = true;  // see "Eviction forecast" above
  };

  explicit KvEventIndex(size_t endpoints, Options opts);
  explicit KvEventIndex(size_t endpoints) : KvEventIndex(endpoints, Options{}) {}

  size_t endpoints() const { return eps_.size(); }

  // ---- the subscribers' side ----
  // Connected or lost: both clear the endpoint (a restart is indistinguishable from a reconnect).
  void set_connected(size_t e, bool connected, Time now);
  // The endpoint's stream is in order again (first batch after connect, or a replay finished).
  void set_synced(size_t e, bool synced);
  // Applies one decoded, in-order batch with sequence number `seq`; `lag_s` = publisher ts to
  // now, for the lag gauge.
  void apply(size_t e, const kv::EventBatch& batch, int64_t seq, double lag_s, Time now);
  // Forgets the endpoint's blocks (resync).
  void resync(size_t e);
  // Counters the driver keeps (decode errors, gaps, replays...), under the index's lock.
  template <class F>
  void count(size_t e, F&& f) {
    std::lock_guard lock(mu_);
    f(eps_[e].counters);
  }
  // Bounds endpoint e's block set (blocks <= 0: the default); the hash map gets 2x this.
  void set_capacity(size_t e, int64_t blocks);

  // ---- the picker's side ----
  // matched[e] = leading blocks of the request endpoint e holds by its events (and recent
  // dispatches), source[e] where that came from; for an endpoint whose events are not fresh,
  // matched[e] is left as the caller set it (the learned index) and source[e] = learned.
  // `token_ids` are the request's ids as the engine makes them (its render endpoint, issue 15
  // item 3); when empty they are estimated from `text`, the rendered prompt (token_blocks.h).
  // Returns the request's full blocks at the index's block size.
  size_t match(std::string_view text, std::string_view lora_name, std::string_view cache_salt, Time now,
               std::span<uint32_t> matched, std::span<Source> source, std::span<const uint32_t> token_ids = {});
  // The request went to endpoint e: its blocks count as held for the recent window.
  void note_dispatch(size_t e, std::string_view text, std::string_view lora_name, std::string_view cache_salt,
                     Time now, std::span<const uint32_t> token_ids = {});

  int block_size() const;
  bool fresh(size_t e, Time now) const;
  KvEndpointStatus status(size_t e, Time now) const;
  size_t memory_bytes() const;
  size_t blocks() const;  // (block, endpoint) entries held by events

 private:
  struct Endpoint {
    std::unordered_map<uint64_t, uint64_t> own_of_engine;  // engine hash -> own hash
    // own hash -> the own hash of the chain's previous block (0 at the root), to touch a chain; the
    // batch (counters.batches) that stored it and the last that touched it
    struct Link {
      uint64_t parent = 0;
      uint64_t stored = 0, touched = 0;
    };
    std::unordered_map<uint64_t, Link> parent_of;
    Time last_eviction{std::chrono::hours(-1)};
    // This gateway's dispatches the engine has not scheduled yet (sent after the batch before the
    // last: a step has not ended since), with the blocks each will allocate.
    std::deque<std::pair<Time, uint32_t>> unscheduled;
    uint64_t unscheduled_blocks = 0;
    Time last_batch{};
    KvEndpointCounters counters;
    bool connected = false, synced = false;
    bool waiting_for_events = false;  // a dispatch has not been followed by any batch
    Time dispatch_pending_since{};
    int64_t capacity = 0;
    double last_lag_s = 0;
    int64_t last_seq = -1;
  };
  bool fresh_locked(const Endpoint& ep, Time now) const;
  void clear_locked(size_t e);
  void rotate_locked(Time now);
  void touch_chain_locked(size_t e, uint64_t own);
  // How many of the first `n` request blocks (hashes_) survive until the request is scheduled.
  uint32_t forecast_locked(size_t e, uint32_t n, Time now);
  static bool evicting_locked(const Endpoint& ep, Time now);
  void drop_scheduled_locked(Endpoint& ep, Time before);
  void request_hashes(std::string_view text, std::span<const uint32_t> token_ids, std::string_view lora_name,
                      std::string_view cache_salt);

  const Options opts_;
  mutable std::mutex mu_;
  std::vector<Endpoint> eps_;
  PrefixIndex blocks_;                 // own hash -> endpoints, from events
  PrefixIndex recent_[2];              // [0] current, [1] previous window
  Time recent_since_{};
  int block_size_ = 16;
  // Scratch for one pick (mu_ held).
  std::vector<uint32_t> tokens_;
  std::vector<uint64_t> hashes_;
  std::vector<uint32_t> ev_, rc_, rc2_;
  std::vector<uint64_t> chain_, tail_;
};

}  // namespace sluice
