// One simulated vLLM (v1) replica: continuous batching over a paged, prefix-cached KV store,
// timed by the calibrated cost model. Pure: no I/O, no clock; every call takes the driver's time.
//
// Scheduling (each step):
//   1. Running requests first, in admission order: each gets its remaining prefill (chunked) or
//      one decode token, within max_num_batched_tokens. When no KV block is free, the newest
//      running request (priority mode: the worst (priority, arrival)) not yet scheduled this step
//      is preempted: its blocks are freed, it goes back to the head of the waiting queue and
//      recomputes later (usually hitting its own cached blocks).
//   With long_prefill_token_threshold > 0, a prefill's share of a step (1. and 2.) is capped at it:
//   a long prompt's chunks leave budget for the short prefills queued behind it.
//   2. If nothing was preempted, waiting requests in queue order (FCFS, or lowest `priority` then
//      arrival in priority mode), while running < max_num_seqs and budget remains. A request whose
//      LoRA adapter cannot get a slot is skipped (later ones may pass); one whose blocks cannot be
//      allocated stops admission. The prefix cache is matched in whole blocks, capped so that the
//      last prompt token is always recomputed.
//   A request's full blocks enter the prefix cache when the step that computes them is scheduled,
//   not when it ends, as vLLM v1's KVCacheManager.allocate_slots caches them (and publishes their
//   BlockStored events): a request scheduled later in the same step, or while it runs, finds them
//   cached (the forward pass writes a layer's KV before that layer's attention reads it). Caching
//   them only at the step's end made a burst of one prompt compute the prefix twice in one step,
//   doubling that step (fan-out TTFT p90 ~2x, bench/results/README.md round 6).
//   The step's duration comes from CostModel (plus LoRA load latency for adapters loaded by it).
//   When it ends, every request whose known tokens are all computed emits one token.
//
// Driving it:
//   Live server (real timers):               Virtual-time simulator:
//     submit(req, now)                          submit(req, t)
//     if (auto d = begin_step(now))             auto r = step(t);   // r.end = t + duration
//       timer(d) -> end_step(now2) -> outputs   t = r.end; ... handle r.outputs
//   abort(id, now) may be called at any time, also while a step is in flight: the request's blocks
//   are freed at once and end_step() emits nothing for it. submit() during a step is fine (it is
//   scheduled by the next step). Call begin_step() again after end_step() while has_work().
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/engine/block_manager.h"
#include "core/engine/cost_model.h"
#include "core/metrics/histogram.h"
#include "model/engine/lora_slots.h"
#include "model/engine/tokenizer.h"
#include "core/time.h"

namespace sluice::engine {

using RequestId = uint64_t;
enum class FinishReason { stop, length, abort };
std::string_view to_string(FinishReason r);
enum class SchedulingPolicy { fcfs, priority };

// Validated once (validate()), then immutable for the engine's life.
struct EngineConfig {
  CostParams cost;
  int64_t num_blocks = 27000;
  int block_size = kDefaultBlockSize;
  int64_t max_num_seqs = 1024;
  int64_t max_num_batched_tokens = 8192;
  // vLLM's long_prefill_token_threshold: a prefill takes at most this many tokens of a step (running
  // and waiting requests alike), so a long one leaves budget for the requests behind it. 0 = no cap
  // (vLLM's default unless max_num_partial_prefills > 1, which sets 4% of max_model_len).
  int64_t long_prefill_token_threshold = 0;
  int64_t max_model_len = 131072;
  bool prefix_caching = true;
  bool embedding = false;  // pooling model: every request is prefill-only, no KV reuse
  SchedulingPolicy policy = SchedulingPolicy::fcfs;
  int max_loras = 4;
  double lora_load_ms = 30.0;
  uint64_t seed = 1;  // jitter generator

  static EngineConfig from_profile(const EngineProfile& p);
  // Empty when valid, else what is wrong.
  std::string validate() const;
};

struct EngineRequest {
  RequestId id = 0;
  std::vector<TokenId> prompt;
  int64_t max_output_tokens = 16;                // tokens to generate (ignored for embeddings)
  FinishReason finish_reason = FinishReason::length;  // reported when max_output_tokens is reached
  int64_t priority = 0;                          // lower runs earlier (priority policy only)
  std::string adapter;                           // LoRA adapter name; empty = base model
  std::string cache_salt;
  bool embedding = false;                        // one forward pass, no decode, no KV
  std::optional<Time> arrival;                   // front-end arrival (TTFT, E2E); default: submit time.
                                                 // Queue time is measured from submit().
};

enum class SubmitError { none, duplicate_id, empty_prompt, too_long, exceeds_kv_capacity, lora_disabled };
std::string_view to_string(SubmitError e);

// What one step produced for one request.
struct RequestOutput {
  RequestId id = 0;
  int new_tokens = 0;          // 0 or 1
  TokenId token = 0;           // the generated token when new_tokens == 1
  bool first_token = false;
  std::optional<FinishReason> finished;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;   // prefix-cache hit at first admission, a multiple of the block size
  int64_t output_tokens = 0;   // generated so far, including this step's
};

struct StepResult {
  Time start{}, end{};
  StepShape shape;
  int preemptions = 0;
  std::vector<RequestOutput> outputs;
};

struct EngineCounters {
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t prefix_queries = 0;  // tokens looked up in the prefix cache
  int64_t prefix_hits = 0;     // tokens found
  int64_t preemptions = 0;
  int64_t finished_stop = 0, finished_length = 0, finished_abort = 0;
  int64_t steps = 0;
  int64_t lora_loads = 0;
};

struct EngineHistograms {
  HistogramData ttft{ttft_buckets()}, itl{itl_buckets()}, e2e{e2e_buckets()}, queue{e2e_buckets()};
};

struct EngineStats {
  int64_t num_waiting = 0, num_running = 0;
  double kv_usage = 0.0;       // 1 - free/total, vLLM's kv_cache_usage_perc
  int64_t num_blocks = 0, num_free_blocks = 0;
  EngineCounters counters;
  EngineHistograms histograms;
  Duration busy_time{};        // time spent in steps up to `now`
  std::vector<std::string> running_adapters, waiting_adapters;
};

class Engine {
 public:
  explicit Engine(const EngineConfig& cfg);  // cfg must validate()
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  SubmitError submit(EngineRequest req, Time now);
  // Removes the request at once (frees its blocks); false if unknown or already finished.
  bool abort(RequestId id, Time now);

  // Schedules the next step; its duration, or nullopt when there is nothing to run.
  std::optional<Duration> begin_step(Time now);
  // Completes the step begun last: advances requests, returns their outputs.
  StepResult end_step(Time now);
  // Both at once, ending at now + duration (virtual time). Empty result when nothing to run.
  StepResult step(Time now);

  bool has_work() const { return !running_.empty() || !waiting_.empty(); }
  bool step_in_flight() const { return in_flight_; }
  bool contains(RequestId id) const { return requests_.count(id) != 0; }

  // Adapter management (the server's registry decides which names are valid).
  bool unload_adapter(std::string_view name);

  EngineStats stats(Time now) const;  // a full snapshot (copies histograms): for scrapes
  Duration busy_time(Time now) const;  // time spent in steps up to `now` (cheap)
  const EngineCounters& counters() const { return counters_; }
  const EngineHistograms& histograms() const { return hist_; }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  const BlockManager& blocks() const { return blocks_; }
  // KV-cache events (BlockManager): on for a publisher; take them after every step.
  void enable_kv_events(bool on) { blocks_.enable_events(on); }
  std::vector<kv::Event> take_kv_events() { return blocks_.take_events(); }
  void reset_prefix_cache() { blocks_.reset_prefix_cache(); }
  const EngineConfig& config() const { return cfg_; }
  const CostModel& cost_model() const { return cost_; }

 private:
  struct Request;
  using QueueKey = std::pair<int64_t, int64_t>;  // (priority, sequence)

  void preempt(Request* r);
  void finish(Request* r, FinishReason why, Time now);
  // Caches the full blocks of r's first `computed` tokens not cached yet (called when a step is
  // scheduled: the blocks it computes are cached from then on).
  void register_full_blocks(Request* r, int64_t computed);
  size_t pick_victim(size_t first_unscheduled) const;
  bool adapter_in_use(std::string_view name) const;
  void enqueue_waiting(Request* r, bool at_head);

  EngineConfig cfg_;
  CostModel cost_;
  BlockManager blocks_;
  LoraSlots lora_;
  std::mt19937_64 rng_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::set<std::pair<QueueKey, RequestId>> waiting_;
  std::vector<Request*> running_;
  std::unordered_map<std::string, int> running_adapters_;  // adapter -> running requests using it
  int64_t next_seq_ = 0;
  int64_t head_seq_ = 0;  // decreasing: FCFS re-queue at the head

  struct Scheduled {
    RequestId id;
    int64_t tokens;
  };
  std::vector<Scheduled> scheduled_;
  bool in_flight_ = false;
  Time step_start_{};
  Duration step_duration_{};
  StepShape step_shape_;
  int step_preemptions_ = 0;
  Duration busy_done_{};
  uint64_t lora_tick_ = 0;

  EngineCounters counters_;
  EngineHistograms hist_;
};

}  // namespace sluice::engine
