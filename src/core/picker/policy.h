// The picker interface. A policy ranks the eligible endpoints of a pool for one request, best
// first, so a retry can take the next one. Policies keep their own learned state (prefix index,
// round-robin cursor) and are told about dispatches; they never see sockets or clocks.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/picker/endpoint_state.h"
#include "core/openai/request.h"
#include "core/time.h"

namespace sluice {

class PrefixTracker;  // prefix_tracker.h

struct PickRequest {
  ApiKind kind = ApiKind::chat;
  std::string_view model;        // the target model forwarded upstream
  std::string_view adapter;      // LoRA adapter name, empty for the base model
  std::string_view text;         // rendered prompt (chat template applied) for prefix hashing
  std::string_view cache_salt;
  // The prompt's token ids as the engine makes them (its render endpoint, gateway/render_client.h),
  // when known: the engine-event index (kv_event_index.h) looks them up instead of estimating ids
  // from `text`. Empty: estimated. Must outlive the pick.
  std::span<const uint32_t> token_ids;
  int64_t input_tokens = 0;      // estimated (the engine's count when token_ids are known)
  int64_t max_output_tokens = 0; // output bound used for accounting
  // The client asked for a whole answer (not streamed): the gateway hears of its first token and
  // tokens only when the answer is complete, so PoolRouter moves it on to its decode when the
  // policy expects its first token (Policy::expected_prefill) and counts its tokens at the
  // policy's expected ITL (Policy::expected_itl_ms) until then.
  bool whole_answer = false;
};

struct Candidate {
  size_t endpoint = 0;
  double score = 0;                    // higher is better; meaning is the policy's own
  int32_t predicted_cached_tokens = 0;  // (a prompt's tokens fit: contexts are < 2^31)
  bool saturated = false;              // beyond queue / KV limits: only a last resort
  // Set on the first candidate only: the policy advises refusing the request (sluice's shedding:
  // it would miss its latency SLO on every endpoint because of their load). See shed_advised.
  bool shed = false;
  // With shed, in whole ms (rounded up): when the policy expects the request to meet its SLO (the
  // Retry-After base of the refusal; 0: no estimate, see shed_retry_base), and its prefill alone
  // (what its return will cost; Policy::on_shed). 16 bits each, in what was the flags' padding: a
  // candidate list is built and sorted per decision, and 8 more bytes a candidate cost ~1% of it
  // (sluice_microbench, 64 endpoints).
  uint16_t retry_after_ms = 0;
  uint16_t shed_work_ms = 0;
  // The policy's expected time to first token there, in ms from the ranking (0: the policy has no
  // estimate). Drivers compare it with the TTFT the request got (ttft_estimate_ratio): the picker's
  // calibration, sluice_ttft_estimate_ratio.
  float expected_ttft_ms = 0;
};
static_assert(sizeof(Candidate) == 32);

// The TTFT a request got over the one its candidate expected (Candidate::expected_ttft_ms; 1: the
// picker's model was right), or < 0 without an estimate (expected_ms <= 0). Every driver's
// sluice_ttft_estimate_ratio (gateway, Endpoint Picker) and fleetsim's ttft_estimate.
inline double ttft_estimate_ratio(double expected_ms, double measured_ms) {
  return expected_ms > 0 ? measured_ms / expected_ms : -1.0;
}

// `tokens` as a Candidate's predicted_cached_tokens (clamped to its 32 bits).
inline int32_t candidate_tokens(int64_t tokens) {
  return static_cast<int32_t>(std::clamp<int64_t>(tokens, 0, std::numeric_limits<int32_t>::max()));
}

// `ms` as a Candidate's 16-bit ms field: rounded up, at most 65,535.
inline uint16_t candidate_ms(double ms) {
  return ms > 0 ? static_cast<uint16_t>(std::min(65535.0, std::ceil(ms))) : uint16_t{0};
}

// Every driver (the gateway, the Endpoint Picker, fleetsim) sheds by this one rule: the policy
// advised it and the request's priority is not positive (critical requests are served late instead).
inline bool shed_advised(std::span<const Candidate> ranked, int priority) {
  return !ranked.empty() && ranked.front().shed && priority <= 0;
}

// The Retry-After base of a request shed on the policy's advice (before the refusal's jitter): the
// policy's estimate of when it would meet its SLO, or 1 s where the policy gave none.
inline Duration shed_retry_base(std::span<const Candidate> ranked) {
  if (ranked.empty() || ranked.front().retry_after_ms == 0) return std::chrono::seconds(1);
  return std::chrono::milliseconds(ranked.front().retry_after_ms);
}

// One named term of a policy's judgement of one endpoint, for explanations (/debug/pick).
struct ScoreTerm {
  std::string_view name;  // a static string
  double value = 0;
};
struct Explanation {
  size_t endpoint = 0;
  std::vector<ScoreTerm> terms;
};

// One of the prefixes a policy sees most asked for (Policy::hot_prefixes): its key (the chained hash
// of its deepest block some endpoint holds), the dispatches for it per second (decayed over ~2 s),
// and how many endpoints its index says hold it.
struct HotPrefix {
  uint64_t key = 0;
  double requests_per_s = 0;
  size_t holders = 0;
};

// One prefill as the gateway saw it (PoolRouter::move_to_decode): the request was the head of the
// endpoint's own prefill queue for `elapsed_ms` (from its dispatch, or the first token of the request
// before it, to its own first token) with `tokens` uncached tokens and `pairs` attention pairs, while
// `decoding` of the own requests decoded there, reading `kv_read` context tokens, and `behind`
// uncached tokens of the own requests queued behind it (which the engine schedules into the same
// steps, up to its token budget), and the KV usage last scraped. `mid_step`: it became the head at
// its dispatch while own requests decoded there, so a step was in progress and it waited for the
// next (an engine schedules an arrival from its next step on); a head after another's first token
// starts at a step's end. `at_dispatch`: it became the head at its dispatch.
struct PrefillSample {
  double tokens = 0, pairs = 0, elapsed_ms = 0, decoding = 0, kv_read = 0, behind = 0;
  double kv_usage = 0;  // the endpoint's KV usage as last scraped (0 when unknown)
  bool mid_step = false;
  // It became the head at its own dispatch (onto an empty own queue), so its time includes the
  // engine's front end (sluice_policy.h, F); a head after another's first token was in the engine
  // meanwhile.
  bool at_dispatch = false;
};

// One whole answer's decode as the gateway modelled it (PoolRouter::settle_whole): from its
// expected first token to its answer, `elapsed_ms`, for `tokens` output tokens, beside `decoding`
// of the own requests decoding there reading `kv_read` KV tokens when it came, and the KV usage
// last scraped.
// A streamed answer's decode is one too (`streamed`, DispatchGuard::on_stream_end): from its first
// token to its last for the `tokens` after the first, with `prefilled` uncached tokens of the own
// requests' prefills done at the endpoint meanwhile (which its steps carried).
struct DecodeSample {
  double tokens = 0, elapsed_ms = 0, decoding = 0, kv_read = 0;
  double kv_usage = 0;
  double prefilled = 0;
  double prefilled_pairs = 0;  // their attention pairs (the engine's samples)
  bool streamed = false;
  // Requests decoding there besides this gateway's own at the sample (its peers', and other
  // clients': the fresh scrape's less what was the gateways'), as a ranking counts them: the batch
  // the decode shared is decoding + others (SluicePolicy's ITL calibration).
  double others = 0;
  // A whole answer's: the ms from its dispatch to the first token it was expected at (its decode is
  // timed from there, so that estimate's error is in elapsed_ms).
  double expected_first_ms = 0;
  // The engine's own: its ITL histogram over a span of at least a quarter second
  // (EngineSignals::itl_sum_s, itl_count): `tokens` gaps of `elapsed_ms` in all, every request's,
  // beside its mean batch over the span (the own decoders' mean, and the others running at its
  // end) and the own prefill done there meanwhile (`prefilled`, `prefilled_pairs`).
  bool engine = false;
};

// A queue head's expected first token: `ms` after it became the head (< 0: the policy has no
// model), its steps carrying `carried` uncached tokens of the prefills queued behind it, which the
// engine schedules into the same steps up to its token budget (done with it).
struct ExpectedPrefill {
  double ms = -1;
  double carried = 0;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Fills `out` with every endpoint in `endpoints`, ranked best first.
  virtual void rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
                    std::vector<Candidate>& out) = 0;
  // The request was dispatched to `endpoint` (an index into the pool's endpoints).
  virtual void on_dispatch(const PickRequest& req, size_t endpoint, Time now) {}
  // The head of `endpoint`'s own prefill queue passed its first token at `now`: how long it was the
  // head, and what it prefilled beside what (PrefillSample). A policy may learn the endpoint's pace.
  virtual void on_prefill_done(size_t endpoint, const PrefillSample& sample, Time now) {}
  // A whole answer came for a request the router had moved on to its decode (DecodeSample): the
  // samples of an endpoint's pace where the clients do not stream.
  virtual void on_decode_done(size_t endpoint, const DecodeSample& sample, Time now) {}
  // How long the head of `endpoint`'s own prefill queue is expected to take as the head (`head`: as
  // a sample, elapsed_ms unused; ExpectedPrefill). PoolRouter moves a whole-answer request
  // (PickRequest::whole_answer), whose first token it never sees, on to its decode when that time
  // has passed, with the whole answers behind it its steps carry.
  virtual ExpectedPrefill expected_prefill(size_t endpoint, const PrefillSample& head) const { return {}; }
  // The ms between two tokens of the decoders at `endpoint` (`batch`: its decoding and kv_read as
  // in a sample), or < 0 without a model: PoolRouter counts a moved-on whole answer's tokens by it.
  virtual double expected_itl_ms(size_t endpoint, const PrefillSample& batch) const { return -1; }
  // The request was refused on the policy's advice (shed_advised; `advised`: its first candidate):
  // told to come back later.
  virtual void on_shed(const Candidate& advised, Time now) {}
  // Other gateway replicas refused `work_ms` of work (their shed_work_ms summed) in this pool since
  // the last call (peer_load.h); called before a ranking that follows it.
  virtual void on_peer_shed(double work_ms, Time now) {}
  // The pool's endpoint list was replaced (reload): learned state for the old indices is void.
  virtual void on_endpoints_reset(size_t count) {}
  // A reload replaced the pool (PoolRouter::adopt_learned): what `old` learned of each endpoint it
  // still has (old_of_new[i]: endpoint i's index in `old`, or -1) besides the prefix index below,
  // carried over. Default: nothing.
  virtual void adopt_endpoints(const Policy& old, std::span<const int> old_of_new) {}
  // The policy's prefix index, if it keeps one (a reload carries it over to the new pool).
  virtual PrefixTracker* prefix_tracker() { return nullptr; }
  virtual const PrefixTracker* prefix_tracker() const { return nullptr; }
  // The n prefixes most asked for at `now`, most first (operators' view of how a hot prefix is
  // spread). Default: none (the policy does not track demand).
  virtual std::vector<HotPrefix> hot_prefixes(Time now, size_t n) const { return {}; }
  // What the policy has learned of endpoint `index`'s speed, for the metrics scrape: its step times
  // over the fastest endpoint's (pace) and the ITL its decodes showed over the policy's model of their
  // batches (itl_calibration), as of its last refresh. Default: nothing learned (false).
  virtual bool endpoint_speed(size_t index, double& pace, double& itl_calibration) const { return false; }
  // The terms behind rank()'s scores, one Explanation per endpoint (any order). Default: none.
  virtual void explain(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
                       std::vector<Explanation>& out) {
    out.clear();
  }
};

}  // namespace sluice
