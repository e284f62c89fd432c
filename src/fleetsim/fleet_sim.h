// The fleet simulator: N simulated vLLM replicas (core/engine) behind the gateway's own
// PoolRouter and policies, on a virtual clock, with no sockets. Deterministic for a seed.
//
// One event queue, ordered by (time, sequence):
//   arrival     the next workload request: rank + dispatch through the PoolRouter (the policy
//               learns from the dispatch exactly as in the live gateway), then Engine::submit;
//               a replica that was idle begins a step.
//   step end    Engine::end_step on that replica: first tokens, tokens and finishes drive the
//               request's DispatchGuard (on_first_token / on_tokens / release) and its record;
//               the replica begins its next step while it has work.
//   scrape      every scrape interval, each replica's stats are copied into EngineSignals
//               (waiting, running, KV usage, block size, capacity, prefix counters, LoRA, duty
//               cycle) through PoolRouter::update_signals, as the live scraper does.
// Gateway queue (optional, --max-in-flight): when the pool is saturated (PoolRouter::saturated, the
// live gateway's rule: every replica at the in-flight cap or, by fresh signals, at the engine queue /
// KV limits), a request waits at the gateway and is dispatched when a request finishes (late
// binding). Each gateway's queue is the live gateway's own AdmissionQueue and Dispatcher
// (core/admission): without `fair_queue` its implicit gate (every request one tenant's: first
// come, first placed; 4096 requests at most; `queue_ttl` -> 503 queue_timeout); with it, VTC
// fairness between tenants (output charged as it streams) and the live gateway's FairShare of the
// slots (unless `fair_share` is off).
// The `oracle` policy is OraclePolicy with its callback wired to the replicas' true KV caches.
// Whole answers (`whole_answers` > 0): that share of the requests is not streamed; the gateway
// learns of such a request only when its whole answer comes (the live proxy's relay_buffered).
// Client retries (`client_retries` > 0): a refused request (429 over_slo / queue_full, 503
// no_endpoint / queue_timeout: anything the gateway answers with a Retry-After) comes back after that
// Retry-After, jittered by the gateway's own rule (core/admission/outcome.h), up to `client_retries`
// times, as the OpenAI SDKs do (max_retries 2 by default; they honour retry-after-ms up to 60 s).
// Its times count from the first attempt, so a served retry carries the wait in its TTFT; only its
// last outcome is recorded. Without it a refused request is simply gone, which flatters a policy
// that refuses (its shed load never returns).
//
// Gateway replicas (`gateways` > 1, issue 15): arrivals are split round robin between N gateways,
// each with its own PoolRouter and policy (its own learned prefix index and in-flight accounting;
// all of them see the same scraped engine signals). With `kv_events` every replica's engine logs
// vLLM's KV events (BlockStored / BlockRemoved / AllBlocksCleared, engine/block_manager.h); after
// each step (and each step start, where evictions happen) the step's events are one batch, delivered
// `kv_event_delay` later to every gateway's own KvEventIndex (core/prefix/kv_event_index.h, the
// live gateway's index, with its recent-dispatch window), in order, one sequence number per
// batch: the live subscriber's job without the sockets. Per request, the predicted cached tokens
// (the chosen candidate's) are summed beside the engine's own cached tokens at admission.
// With `share_load` the gateways share their in-flight load (core/picker/peer_load.h): every
// `share_load_interval` each gateway builds its report (PeerReporter / PeerSender, encoded as on the
// wire), delivered `share_load_delay` later to every other gateway's PoolRouter (apply_peer): the
// live gateways' Redis channel without the sockets.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "model/engine/engine.h"
#include "model/workload/stats.h"
#include "model/workload/workload.h"
#include "fleetsim/hot_prefix_probe.h"

namespace sluice::fleetsim {

struct FleetConfig {
  size_t replicas = 8;
  engine::EngineConfig engine;           // every replica (seed varied per replica)
  // A mixed fleet: the last `slow_replicas` replicas run every step `slow_factor` times longer (an
  // older GPU generation in the same pool: every term of the step time scaled alike), with the same
  // KV capacity and the same reported cache config, so the gateway learns the difference only from
  // how they serve.
  size_t slow_replicas = 0;
  double slow_factor = 1.0;
  std::string policy = "sluice";         // a policy_factory name, or "oracle"
  std::map<std::string, double> policy_params;
  Duration scrape_interval = std::chrono::milliseconds(50);
  Duration stale_after = std::chrono::milliseconds(500);
  int max_in_flight_per_endpoint = 0;    // 0 = no gateway queue (dispatch at once)
  bool fair_queue = false;               // the gateway queue tells tenants apart (VTC) instead of one tenant
  bool fair_share = true;                // with fair_queue: FairShare of the slots (fair_share.h)
  Duration queue_ttl = std::chrono::seconds(30);  // the gateway queue's time budget (503 past it)
  std::string workload;                  // spec, see core/workload/workload.h
  workload::ArrivalSpec arrivals;
  workload::WorkloadLimits limits;
  workload::SloSpec slo;
  uint64_t seed = 1;
  size_t gateways = 1;                   // gateway replicas, round robin between them
  bool kv_events = false;                // every gateway's index fed by the engines' KV events
  Duration kv_event_delay = std::chrono::milliseconds(10);  // engine step -> applied at the gateways
  Duration kv_recent_window = std::chrono::seconds(2);      // KvEventIndex::Options::recent_window
  bool share_load = false;               // gateways share in-flight load (peer_load.h)
  Duration share_load_interval = std::chrono::milliseconds(5);  // a gateway's reports, at most this often
  Duration share_load_delay = std::chrono::milliseconds(2);     // report sent -> applied at the others
  // Per-request trace (FleetResult::trace): 0 off, 1 one JSON line per request, 2 also the pick's
  // explanation (PoolRouter::explain_json before the pick: the policy ranks twice per request, so a
  // randomised policy, random or power_of_two, draws differently than without it).
  int trace = 0;
  int client_retries = 0;                // a refused request comes back after its Retry-After, this many times
  // This share of the requests (drawn per request from the seed, the same for every policy) asks for
  // a whole answer ("stream": false): the gateway sees no first token and no tokens until the answer
  // is complete (DispatchGuard::on_whole_answer, as the live proxy does), and charges the tenant's
  // output then. Its TTFT is still the engine's first token.
  double whole_answers = 0;
};

// The picker's TTFT estimates against the TTFTs they were for (ttft_estimate_ratio: got / expected,
// from the dispatch), over the requests whose chosen candidate had one (the sluice policy's).
struct TtftEstimate {
  int64_t requests = 0;
  double p10 = 0, p50 = 0, p90 = 0;
};
TtftEstimate ttft_estimate_of(std::vector<double> ratios);

struct FleetResult {
  workload::Figures figures;
  std::string workload_description;
  double prefix_hit_rate = 0;            // engines: hits / queries (tokens)
  int64_t preemptions = 0;
  int64_t picks_min = 0, picks_max = 0;  // requests dispatched per replica
  double mean_kv_usage = 0;              // mean over scrapes and replicas
  double virtual_seconds = 0, wall_seconds = 0;
  int64_t steps = 0;
  // Dispatched requests: predicted cached tokens (the chosen candidate's) vs the engine's own hit at
  // admission, summed.
  int64_t predicted_cached_tokens = 0, engine_cached_tokens = 0;
  int64_t kv_event_batches = 0;          // delivered to each gateway
  int64_t peer_reports = 0;              // load reports sent (each delivered to every other gateway)
  int64_t client_retries = 0;            // refused requests that came back (FleetConfig::client_retries)
  TtftEstimate ttft_estimate;
  // The same per source of the prediction (learned, events, recent: KvEventIndex::Source), with
  // the number of requests: {predicted, engine cached, requests}.
  std::array<std::array<int64_t, 3>, 3> by_source{};
  // The hot prefix (group "hot" or "p0", when the workload has one): replicas holding it over time.
  std::string hot_group;
  int64_t hot_prefix_blocks = 0;
  std::vector<HotPrefixSample> hot_samples;
  // With FleetConfig::trace: one JSON object per request and line, in the order they ended.
  std::string trace;
  double hot_holders_mean() const;
  int hot_holders_max() const;
  double hot_receivers_mean() const;
};

// "hot_prefix":{...}, (with the trailing comma) or "" when the workload has no hot prefix.
std::string hot_prefix_json(const FleetResult& r);

// Runs one configuration to completion (every request finished). Error message on bad config.
std::variant<FleetResult, std::string> run_fleet(const FleetConfig& cfg);

// {"policy":..., "figures":{...}, "fleet":{...}} on one line.
std::string result_json(const FleetConfig& cfg, const FleetResult& r);

}  // namespace sluice::fleetsim
