// PoolRouter: the runtime state of one pool shared by every driver (live gateway, fleet
// simulator): its endpoints' signals and the gateway's own accounting, the pool's policy, and the
// dispatch guard that keeps the accounting exact. One mutex guards the pool: ranking and the
// policy's learned state (a prefix index) must see every dispatch, and a per-thread copy would
// fragment the index the way independent gateway replicas do (see routing-anchors.md).
#pragma once
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/picker/peer_load.h"
#include "core/picker/policy.h"
#include "core/prefix/kv_event_index.h"

namespace sluice {

class PoolRouter;
class PeerReporter;

// The integral over time of an endpoint's own decoders and of the KV they read (PoolRouter's
// accounting, piecewise constant between its events): the difference of two snapshots over their
// time apart is the batch's mean between them.
struct BatchArea {
  Time at{};
  double decoding_ms = 0, kv_read_ms = 0;
};

// Holds one request's share of an endpoint's accounting; releasing it (destructor) removes the
// request's in-flight count and tokens whatever way the request ended.
class DispatchGuard {
 public:
  DispatchGuard() = default;
  DispatchGuard(DispatchGuard&& o) noexcept { *this = std::move(o); }
  DispatchGuard& operator=(DispatchGuard&& o) noexcept;
  DispatchGuard(const DispatchGuard&) = delete;
  DispatchGuard& operator=(const DispatchGuard&) = delete;
  ~DispatchGuard() { release(); }

  explicit operator bool() const { return router_ != nullptr; }
  size_t endpoint() const { return endpoint_; }
  // First output token arrived at `now`: the request's prefill is done, its decode begins.
  void on_first_token(Time now);
  // A whole (not streamed) answer of `tokens` output tokens came at `now`: its first token and
  // tokens at once. The accounting moves on as for a first token, but the time says nothing of the
  // prefill's pace; for a request the router had moved on at its expected first token it is a
  // sample of the endpoint's decode pace instead (Policy::on_decode_done).
  void on_whole_answer(Time now, int64_t tokens);
  // n output tokens arrived: the remaining decode bound shrinks.
  // (Before the first token: that is the first token, at the last time the router was told.)
  void on_tokens(int64_t n);
  // The streamed answer ended complete at `now` (its last token): with a first token at a known
  // time and more tokens after it, its decode is a sample of the endpoint's pace, taken at the
  // release (Policy::on_decode_done, DecodeSample::streamed). Not for errors or cancellations.
  void on_stream_end(Time now) { stream_end_ = now; }
  void release();

 private:
  friend class PoolRouter;
  // Past the prefill, once: a sample of its pace (`sample`) or, with `whole_tokens` >= 0, a whole
  // answer of that many tokens (PoolRouter::move_to_decode).
  void move_to_decode(Time now, bool sample, int64_t whole_tokens);
  PoolRouter* router_ = nullptr;
  size_t endpoint_ = 0;
  int64_t prefill_ = 0;
  double pairs_ = 0;  // prefill attention pairs (EndpointLoad::prefill_pairs share)
  uint64_t seq_ = 0;  // its place in the endpoint's prefill queue (PoolRouter::Endpoint::prefill_fifo)
  int64_t decode_ = 0;
  int64_t context_ = 0;
  int64_t live_ = 0;  // input + output so far (EndpointLoad::live_context_tokens share)
  bool decoding_ = false;
  // The streamed decode's sample (on_stream_end): its first token's time, the endpoint's own
  // prefill tokens done by then (PoolRouter::Endpoint::prefilled), the tokens since, its end.
  Time decode_since_ = Time::min(), stream_end_ = Time::min();
  double prefilled_at_ = 0;
  int64_t streamed_ = 0;
};

struct EndpointSnapshot {
  std::string name;
  std::string address;
  bool stale = true;
  bool healthy = true;
  EngineSignals signals;
  EndpointLoad load;
  // The policy's learned speed of the endpoint (Policy::endpoint_speed); negative: none learned.
  double pace = -1, itl_calibration = -1;
};

class PoolRouter {
 public:
  PoolRouter(const PoolConfig& config, std::unique_ptr<Policy> policy);
  ~PoolRouter();

  const PoolConfig& config() const { return config_; }
  std::string_view policy_name() const { return policy_->name(); }
  size_t size() const { return endpoints_.size(); }

  // Ranks the healthy endpoints for `req`, best first, in three tiers whatever the scores: below
  // max_in_flight_per_endpoint and not saturated, saturated by the policy (its queue or KV limits),
  // then at the cap (marked saturated too). Empty when no endpoint is healthy.
  std::vector<Candidate> rank(const PickRequest& req, Time now);
  // Records a dispatch to `endpoint` (own accounting + the policy's learning).
  DispatchGuard dispatch(const PickRequest& req, const Candidate& chosen, Time now);
  // Places a ranked request, keeping the hard cap across workers: the ranking was taken under an
  // earlier hold of the pool's lock, and another worker may have filled an endpoint since.
  // Dispatches, under one hold, to the first of ranked[i..] whose endpoint is below
  // max_in_flight_per_endpoint (in rank order) and sets i to it; when every one of them is at the
  // cap (admission promised the request a slot, so only a retry's race gets here), to ranked[i];
  // with AtCap::refuse, to none (an empty guard, i unchanged): the candidates are a subset of the
  // pool (an Endpoint Picker's subset hint), whose room admission did not count.
  enum class AtCap { place, refuse };
  DispatchGuard place(const PickRequest& req, std::span<const Candidate> ranked, size_t& i, Time now,
                      AtCap all_at_cap = AtCap::place);
  // Whether one of ranked[i..] is below the cap now (a retry only moves to such an endpoint).
  bool any_below_cap(std::span<const Candidate> ranked, size_t i) const;
  // Records that the driver refused a request on the policy's advice (shed_advised; `ranked`: its
  // candidates): the policy counts it in the Retry-After of those shed after it (sluice_policy.h).
  void on_shed(std::span<const Candidate> ranked, Time now);

  // Scraper and health checker inputs.
  // A scrape of `endpoint` is about to be sent. The engine takes its snapshot at some moment between
  // this and update_signals; the own (and peers') requests it may count are those in flight at any
  // time in between, so the counts subtracted from its waiting and running to find other clients'
  // requests (EndpointLoad::in_flight_at_scrape) are the window's highest: a request of ours that
  // ended (or passed its first token) while the scrape was on its way is not taken for another
  // client's (a phantom decoder, or a phantom prefill ahead, until the next scrape). Without this
  // call (fleetsim's scrapes take no time) the counts at update_signals stand. The own dispatches
  // made while it was on its way stay in assigned_since_scrape (the engine's gauges had not seen them).
  void on_scrape_start(size_t endpoint);
  void update_signals(size_t endpoint, EngineSignals signals);
  void record_scrape_error(size_t endpoint);
  void set_healthy(size_t endpoint, bool healthy);
  bool healthy(size_t endpoint) const;
  // Dispatches to the endpoint so far (the scraper uses it to tell frozen metrics from idle ones).
  int64_t picks_total(size_t endpoint) const;

  // The healthy endpoints' slots under the hard cap and how many are taken (an endpoint's
  // in-flight count above the cap counts as the cap). For fair sharing (admission/fair_share.h).
  struct Occupancy {
    int64_t capacity = 0;
    int64_t in_flight = 0;
  };
  Occupancy occupancy() const;
  // A reload replaced this pool's config: take over what `old` learned for the endpoints both
  // have (same address): the prefix index (when both policies keep one). Called before use.
  // Returns the number of endpoints carried over.
  size_t adopt_learned(const PoolRouter& old);
  // A reload replaced this pool's runtime: requests still running on `old` count against this
  // router's hard cap (occupancy, saturated) on the endpoints both have (same address), until they
  // end or `old` is gone, so a reload never lets the engines run more than the cap.
  void inherit_in_flight(std::weak_ptr<const PoolRouter> old);
  // Requests in flight on endpoint `e`, those still running on a replaced runtime included.
  int64_t in_flight_total(size_t e) const;
  // True when every healthy endpoint is at the hard cap or, by fresh engine signals, at the pool's
  // saturation limits (engine waiting >= saturation_max_waiting or KV usage >=
  // saturation_max_kv_usage). Stale signals never saturate an endpoint by themselves. The
  // admission layer queues and sheds on this.
  bool saturated(Time now) const;
  std::vector<EndpointSnapshot> snapshot(Time now) const;
  // The policy's n most asked-for prefixes (Policy::hot_prefixes), for the metrics scrape.
  std::vector<HotPrefix> hot_prefixes(Time now, size_t n) const;
  // Feeds the policy's prefix predictions from the engines' KV events (kv_event_index.h); false
  // when the policy keeps no prefix index. Called before use.
  bool attach_kv_events(std::shared_ptr<KvEventIndex> events);

  // Load sharing between gateway replicas (peer_load.h): from now on the other replicas' reported
  // in-flight load is merged into what the policy sees (rank, explain). `self` = this replica's
  // gateway id (its own reports are ignored). Called before use.
  void share_load(std::string self, PeerLoad::Options options);
  bool shares_load() const { return peer_ != nullptr; }
  // A peer's report of this pool (false when not sharing).
  PeerLoad::Applied apply_peer(std::string_view gateway, uint64_t instance, uint64_t seq, const PeerPoolReport& report,
                               Time now);
  // This replica's own section for its next report; true when it differs from the last one.
  bool peer_report(Time now, PeerPoolReport& out);
  struct PeerStats {
    size_t peers = 0;
    PeerLoad::Counters counters;
    std::vector<int64_t> in_flight;  // per endpoint: the live peers' requests
  };
  PeerStats peer_stats(Time now);

  // Explains the ranking of `req` (without dispatching): the policy, and per healthy endpoint in
  // rank order its score, predicted cached tokens, saturation, staleness, the signals and load it
  // was judged on, and the policy's own score terms (Policy::explain). A JSON object:
  //   {"pool":..,"policy":..,"input_tokens":..,"candidates":[{"endpoint":..,"rank":..,"score":..,
  //    "predicted_cached_tokens":..,"saturated":..,"stale":..,"in_flight":..,"prefill_tokens":..,
  //    "assigned_since_scrape":..,"waiting":..,"running":..,"kv_usage":..,"terms":{..}}, ...]}
  // Note: a policy with a random generator advances it, as a real pick would.
  std::string explain_json(const PickRequest& req, Time now);

 private:
  friend class DispatchGuard;
  struct Endpoint {
    EndpointConfig config;
    EngineSignals signals;
    EndpointLoad load;
    bool healthy = true;
    // The own requests not yet past first token, in dispatch order (seq ascending); an entry whose
    // request passed first token or ended out of order is marked done (tokens < 0) and dropped when
    // it reaches the front. The front is EndpointLoad::prefill_head_*.
    struct Pending {
      uint64_t seq;
      int64_t tokens;
      double pairs;
      bool whole;  // PickRequest::whole_answer: its first token is never seen (advance_whole_answers)
      int64_t decode;  // its output bound (a whole answer's tokens are counted up to it)
      Time dispatched;  // (a whole answer's expected first token is counted from it: DecodeSample::expected_first_ms)
    };
    std::deque<Pending> prefill_fifo;
    // The own prefill tokens done here so far (queue heads past their first token, whole answers
    // moved on): a streamed decode's sample counts the prefill its steps carried (DecodeSample).
    double prefilled = 0;
    double prefilled_pairs = 0;  // and their attention pairs (the engine's ITL samples)
    // The front's time as the head is known (it became the head at a dispatch onto an empty queue,
    // or at a streamed request's first token or ending): only then is its own first token a sample
    // of the endpoint's pace.
    bool head_known = true;
    // The front became the head at its dispatch with own requests decoding (PrefillSample::mid_step).
    bool head_mid_step = false;
    bool head_at_dispatch = false;  // it became the head at its dispatch (PrefillSample::at_dispatch)
    // A whole-answer front: when the policy expects its first token (Time::max(): no model), and
    // the uncached tokens behind it its steps carry (whole answers within them are done with it).
    Time head_done_at = Time::max();
    double head_carried = 0;
    // Whole answers moved on to their decode: the tokens counted for each at the policy's expected
    // ITL (count_whole_tokens), taken back when its answer or ending comes (settle_whole).
    struct WholeDecoder {
      uint64_t seq;
      int64_t bound;    // its output bound
      int64_t counted;  // tokens moved from EndpointLoad::decode_tokens to live_context_tokens
      Time since;       // its expected first token
      double first_ms;  // since its dispatch (DecodeSample::expected_first_ms)
      BatchArea from;   // the endpoint's batch area when it moved on
    };
    std::vector<WholeDecoder> whole_decoding;
    Time whole_counted_at{};
    double whole_steps = 0;  // a step's fraction not yet counted
    // The own batch's decoders and the KV they read, integrated over time (advance_batch_area): a
    // decode's sample is taken beside the batch's mean over its span, not the batch at its end.
    BatchArea area;
    // The engine's ITL counters and the batch area at the start of the span a sample is taken over
    // (update_signals; count < 0: none yet).
    struct EngineItl {
      double sum_s = -1, count = -1;
      BatchArea area;
      double prefilled = 0, prefilled_pairs = 0;  // Endpoint::prefilled, prefilled_pairs then
    } engine_itl;
    // A scrape on its way (on_scrape_start): the in-flight and prefill counts (own + peers') at its
    // start, the own counts' highest since (raised at each dispatch), and the own dispatches counted
    // in assigned_since_scrape at its start.
    struct ScrapeWindow {
      bool open = false;
      int64_t all_in_flight = 0, all_prefill = 0;
      int64_t own_in_flight_max = 0, own_prefill_max = 0;
      int64_t assigned_at_start = 0;
    } scrape_window;
  };
  // The guard's share off its endpoint's accounting; its streamed decode's sample first (on_stream_end).
  void release(const DispatchGuard& g);
  // `whole_tokens` >= 0: a whole answer of that many tokens came at `now`. Returns the endpoint's
  // own prefill tokens done (Endpoint::prefilled), this request's included.
  double move_to_decode(size_t endpoint, int64_t prefill, double pairs, uint64_t seq, Time now, bool sample,
                        int64_t whole_tokens = -1);
  // `seq`'s entry in its endpoint's prefill queue, or the queue's end when it is no longer there
  // (passed first token, or a whole answer the model moved on: its prefill already off the load).
  std::deque<Endpoint::Pending>::iterator pending(Endpoint& ep, uint64_t seq);  // mu_ held
  // Marks the entry `it` (pending(), not the end) done in its endpoint's prefill queue (its load
  // already taken off); `known`: the next head starts now (a streamed first token or an ending).
  // mu_ held.
  void leave_prefill_queue(Endpoint& ep, std::deque<Endpoint::Pending>::iterator it, Time now, bool known);
  // The endpoint's own load as a sample's batch: its own decoders, the KV they read, and the KV
  // usage last scraped (mu_ held).
  static PrefillSample own_batch(const Endpoint& ep);
  // The endpoint's load with the live peers' added, as the policy sees it (mu_ held).
  EndpointLoad with_peers(const Endpoint& ep) const;
  // A decode of `tokens` tokens that took `elapsed_ms`, ending at `now`, beside the endpoint's own
  // batch: its mean since `from` (the batch area then), or as it is now (nullptr, or no time since),
  // and the others decoding there (DecodeSample::others; mu_ held).
  DecodeSample decode_sample(Endpoint& ep, double tokens, double elapsed_ms, Time now, const BatchArea* from);
  // The engine's ITL over the span since the last sample, once it spans kEngineItlSpan (mu_ held,
  // the new signals in place).
  void engine_itl_sample(Endpoint& ep, size_t endpoint, Time now);
  // The endpoint's batch area integrated up to `now` (mu_ held; a time before its last is ignored).
  static void advance_batch_area(Endpoint& ep, Time now);
  // A request's prefill off its endpoint's load: `done` (past its first token, or a whole answer
  // moved on: Endpoint::prefilled counts it) or not (it ended while queued). mu_ held.
  static void off_prefill_load(Endpoint& ep, int64_t tokens, double pairs, bool done);
  // The front of the queue became the head at `since` (mu_ held).
  void set_head(Endpoint& ep, Time since, bool known, bool mid_step = false, bool at_dispatch = false);
  // Whole-answer heads whose expected first token (Policy::expected_prefill) has passed by
  // `now` leave the prefill queue, one after the other (mu_ held).
  void advance_whole_answers(Endpoint& ep, Time now);
  void move_on_whole(Endpoint& ep, const Endpoint::Pending& done, Time at);  // mu_ held
  // The moved-on whole answers' tokens since the last count: one per expected step (mu_ held).
  void count_whole_tokens(Endpoint& ep, Time now);
  // `seq`'s counted tokens handed back, before its guard's own accounting takes over; with its
  // answer's `tokens` (>= 1) at `now`, a DecodeSample for the policy (mu_ held).
  void settle_whole(Endpoint& ep, uint64_t seq, Time now = Time::min(), int64_t tokens = -1);
  DispatchGuard dispatch_locked(const PickRequest& req, const Candidate& chosen, Time now);  // mu_ held
  bool at_cap(size_t endpoint) const {  // mu_ held
    return endpoints_[endpoint].load.in_flight >= config_.max_in_flight_per_endpoint;
  }
  // The first of ranked[i..] below the cap, or ranked.size() (mu_ held).
  size_t first_below_cap(std::span<const Candidate> ranked, size_t i) const;
  void consume_decode(size_t endpoint, int64_t n);
  bool is_stale(const Endpoint& ep, Time now) const;
  void build_views(Time now);  // mu_ held: views_ over the healthy endpoints, peers' load merged
  int64_t in_flight_locked(size_t e) const;  // mu_ held: own + the predecessor's

  const PoolConfig config_;
  mutable std::mutex mu_;
  std::vector<Endpoint> endpoints_;
  std::unique_ptr<Policy> policy_;
  std::vector<EndpointView> views_;  // scratch, guarded by mu_
  std::unique_ptr<PeerLoad> peer_;   // share_load(): the other replicas' load
  std::unique_ptr<PeerReporter> reporter_;
  int64_t shed_work_total_ms_ = 0;  // guarded by mu_: the work this replica refused (peer reports)
  std::vector<EndpointLoad> merged_;  // scratch, guarded by mu_: own + peers, what views_ point to
  std::weak_ptr<const PoolRouter> predecessor_;  // set before use (inherit_in_flight)
  uint64_t next_seq_ = 1;  // guarded by mu_: the next dispatch's place in its prefill queue
  Time last_now_{};        // guarded by mu_: the latest time a caller passed (for an ending without one)
  std::vector<int> predecessor_of_;              // endpoint -> the predecessor's index, -1: none
};

}  // namespace sluice
