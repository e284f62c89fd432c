#include "core/picker/sluice_policy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>

#include "core/cpu_clones.h"
#include "core/picker/ranking.h"
#include "core/picker/scorers/adapter_locality.h"
#include "core/picker/scorers/load_estimate.h"

namespace sluice {

SluiceParams SluiceParams::from(PolicyParams& p) {
  SluiceParams s;
  s.c0_ms = p.get("c0_ms", s.c0_ms);
  s.w_ms = p.get("w_ms", s.w_ms);
  s.beta_ms = p.get("beta_ms", s.beta_ms);
  s.delta_ms = p.get("delta_ms", s.delta_ms);
  s.gamma_ms = p.get("gamma_ms", s.gamma_ms);
  s.eps_ms = p.get("eps_ms", s.eps_ms);
  s.chunk_tokens = std::max(1.0, p.get("chunk_tokens", s.chunk_tokens));
  s.kv_risk_start = std::clamp(p.get("kv_risk_start", s.kv_risk_start), 0.0, 0.99);
  s.ttft_slo_ms = p.get("ttft_slo_ms", s.ttft_slo_ms);
  s.itl_slo_ms = p.get("itl_slo_ms", s.itl_slo_ms);
  s.decode_price = p.get("decode_price", s.decode_price);
  s.queue_limit = p.get("queue_limit", s.queue_limit);
  s.eviction_price = p.get("eviction_price", s.eviction_price);
  s.decode_bound_price = p.get("decode_bound_price", s.decode_bound_price);
  s.miss_price = std::max(0.0, p.get("miss_price", s.miss_price));
  s.adapter_load_ms = p.get("adapter_load_ms", s.adapter_load_ms);
  s.adapter_wait_ms = p.get("adapter_wait_ms", s.adapter_wait_ms);
  s.max_output_tokens = std::max(0.0, p.get("max_output_tokens", s.max_output_tokens));
  s.default_output_tokens = std::max(0.0, p.get("default_output_tokens", s.default_output_tokens));
  s.mean_prompt_tokens = p.get("mean_prompt_tokens", s.mean_prompt_tokens);
  s.max_prefix_blocks = std::max(1.0, p.get("max_prefix_blocks", s.max_prefix_blocks));
  s.itl_calibration = p.get("itl_calibration", s.itl_calibration);
  s.lost_causes = p.get("lost_causes", s.lost_causes);
  s.engine_itl = p.get("engine_itl", s.engine_itl);
  s.pool_pace = p.get("pool_pace", s.pool_pace);
  s.shed = p.get("shed", s.shed);
  s.frontend_ms = p.get("frontend_ms", s.frontend_ms);
  return s;
}

namespace {

// The cost terms and the ITL share one body, inlined into SluicePolicy::evaluate's loop (the public
// functions below call it too). Every expression is the one the separate functions computed, in the
// same order of operations, so the results are bit-identical; what is shared is only computed once:
// the duty's stretch (per decision), the step time's part that depends on the batch size alone,
// step_base(b) = c0 + max(W, beta b) + delta b (step(b, k) = step_base(b) + gamma k), and the
// prefill's stall (the ITL's own_prefill numerator is the same expression). sluice_batch_itl and
// sluice_itl_ms are this same code (batch_itl, cost_and_itl), not copies of it.
[[gnu::always_inline]] inline double expected_excess(double mean, double sd, double limit) {
  if (!(sd > 0)) return std::max(0.0, mean - limit);
  // Below -8 sd (an excess under 1e-16 sd) it is 0: most endpoints at light load skip exp and erfc,
  // and the test needs no division (-8 sd is exact).
  if (mean - limit < -8 * sd) [[likely]] return 0.0;
  const double z = (mean - limit) / sd;
  const double pdf = 0.3989422804014327 * std::exp(-0.5 * z * z);
  const double cdf = 0.5 * std::erfc(-z * 0.7071067811865476);
  return std::max(0.0, (mean - limit) * cdf + sd * pdf);
}

// The step time's part that depends on the batch size alone: step(b, k) = step_base(b) + gamma k.
[[gnu::always_inline]] inline double step_base(const SluiceParams& p, double b) {
  return p.c0_ms + std::max(p.w_ms, p.beta_ms * b) + p.delta_ms * b;
}
// step(b, k): one decode step of b sequences reading k KV tokens.
[[gnu::always_inline]] inline double step_ms(const SluiceParams& p, double b, double k) { return step_base(p, b) + p.gamma_ms * k; }

// sluice_batch_itl with the batch parts of the step given: s_b = step_base(b), s_b1 = step_base(b + 1).
[[gnu::always_inline]] inline SluiceItl batch_itl(const SluiceParams& p, double b, double k, double s_b, double s_b1,
                                                  double stretch) {
  SluiceItl r;
  const double step = s_b + p.gamma_ms * k;
  r.mean_ms = step * stretch;
  // One sequence more or less, at the batch's mean context; the count varies like a Poisson count.
  if (b > 0) r.sd_ms = std::sqrt(b) * ((s_b1 + p.gamma_ms * (k + k / b)) - step) * stretch;
  return r;
}

// The pool's factors, the same for every endpoint of a decision: the duty's, and the work price's
// (header): price x min(1, phi^2), 0 when it is off.
struct Duty {
  double keep;     // 1 - clamp(rho, 0, 0.9)
  double stretch;  // 1 / keep
  double work;     // decode_bound_price x min(1, phi^2)
  Duty(const SluiceParams& p, double prefill_duty, double pace_share)
      : keep(1.0 - std::clamp(prefill_duty, 0.0, 0.9)),
        stretch(1.0 / keep),
        work(p.decode_bound_price > 0 && pace_share > 0 ? p.decode_bound_price * std::min(1.0, pace_share * pace_share) : 0.0) {}
};

// The steps until the queue ahead (queue_tokens, queue_pairs) and U uncached tokens of `in` are
// prefilled, from the start of the first of them.
[[gnu::always_inline]] inline double prefill_steps_ms(const SluiceParams& p, const SluiceInputs& in, double U, double queue_tokens,
                                                      double queue_pairs) {
  const double D = in.decoding;
  const double attention = p.eps_ms * U * (in.cached + U / 2);
  const double tokens = queue_tokens + U;
  const double n = std::max(1.0, std::ceil(tokens / p.chunk_tokens));
  return std::max(n * p.w_ms, p.beta_ms * (tokens + n * D)) + n * (p.c0_ms + p.delta_ms * D + p.gamma_ms * in.kv_read) +
         p.eps_ms * queue_pairs + attention;
}

// The time to first token of inputs `in` with U uncached tokens: the rest of the step in progress,
// then the steps until the queue ahead and its own uncached prefill are done. An engine schedules a
// request that arrives during a step from the next step on; with decoders running (D > 0) one is in
// progress, and a request arriving at a random time waits out half of it on average,
// step(D, K) / 2 (header, ttft_ms). Without it the TTFT of requests that joined a decoding batch
// came 1.1-1.4x the estimate (fleetsim traces, seed 70: hot prefix +5 ms, agent sessions +17-25 ms;
// 1.00 on idle endpoints).
// In the engine's scheduler: from the end of its front end (F, header) on.
[[gnu::always_inline]] inline double scheduled_ttft_of(const SluiceParams& p, const SluiceInputs& in, double U,
                                                       double queue_tokens, double queue_pairs) {
  const double D = in.decoding;
  const double in_progress = D > 0 ? 0.5 * step_ms(p, D, in.kv_read) : 0.0;
  return in_progress + prefill_steps_ms(p, in, U, queue_tokens, queue_pairs);
}
// A doubling of a duration's ms: floor(log2 ms) for ms >= 1 (0 below), at most kDoublings - 1, from
// its exponent's bits (no log2 on the picker's path). The pace's bins (SluicePolicy::pace_bin) and
// k's (ttft_of) are these.
constexpr size_t kDoublings = 16;
[[gnu::always_inline]] inline size_t ms_doubling(double ms) {
  if (!(ms >= 1.0)) return 0;
  const auto e = static_cast<int64_t>((std::bit_cast<uint64_t>(ms) >> 52) & 0x7ff) - 1023;
  return static_cast<size_t>(std::min<int64_t>(e, kDoublings - 1));
}
// From its dispatch: the engine's front end first, then its scheduled part at the pool's own
// prefill pace for its size (k, header).
[[gnu::always_inline]] inline double ttft_of(const SluiceParams& p, const SluiceInputs& in, double U, double queue_tokens,
                                             double queue_pairs) {
  const double scheduled = scheduled_ttft_of(p, in, U, queue_tokens, queue_pairs);
  return p.front_end_ms + (p.ttft_factors ? scheduled * p.ttft_factors[ms_doubling(scheduled)] : scheduled);
}

}  // namespace

double sluice_head_progress(const SluiceParams& p, double head_tokens, double head_pairs, double decoding, double kv_read,
                            double elapsed_ms) {
  if (!(head_tokens > 0) || !(elapsed_ms > 0)) return 0.0;
  SluiceInputs alone;
  alone.decoding = std::max(0.0, decoding);
  alone.kv_read = std::max(0.0, kv_read);
  const double ms = prefill_steps_ms(p, alone, 0.0, head_tokens, std::max(0.0, head_pairs));
  return ms > 0 ? std::min(1.0, elapsed_ms / ms) : 1.0;
}

namespace {

// The batch this request would join, without it (decode_price 2): its ITL and expected lag,
// computed once per endpoint (lag < 0: not yet) and shared by the decode and the prefill terms.
struct BatchLag {
  SluiceItl itl;
  double lag = -1;
  double work = -1;  // the work price's weight w (< 0: not yet)
  bool itl_known = false;
};
// w = price x min(1, phi^2) x e, e = the share of the step of the batch (B, K) that grows with it
// (header, the work price). 0 when the price is off or the pool is idle.
[[gnu::always_inline]] inline double batch_work(const SluiceParams& p, const SluiceInputs& in, const Duty& duty, BatchLag& b) {
  if (!(duty.work > 0)) return 0.0;
  if (b.work < 0) {
    const double B = in.decoding + in.queued;
    const double grows = (p.beta_ms * B > p.w_ms ? p.beta_ms * B : 0.0) + p.delta_ms * B + p.gamma_ms * in.kv_read;
    const double step = step_ms(p, B, in.kv_read);
    b.work = duty.work * (grows / step);
  }
  return b.work;
}
[[gnu::always_inline]] inline void batch_lag(const SluiceParams& p, const SluiceInputs& in, const Duty& duty, BatchLag& b,
                                             bool with_lag) {
  const double B = in.decoding + in.queued;
  if (!b.itl_known) {
    b.itl = batch_itl(p, B, in.kv_read, step_base(p, B), step_base(p, B + 1), duty.stretch);
    b.itl_known = true;
  }
  if (with_lag && b.lag < 0) b.lag = expected_excess(b.itl.mean_ms, b.itl.sd_ms, p.itl_slo_ms);
}

// The terms that depend on how much of the input is cached (U = I - C): the TTFT, the prefill's
// price to the others, the KV risk and the evictions. `batch`: as batch_lag's (the same batch for
// any C).
struct PrefillTerms {
  double ttft_ms = 0, prefill_imposed_ms = 0, kv_ms = 0, eviction_ms = 0;
  double stall = 0;  // the time the prefill adds to the steps it shares
};
[[gnu::always_inline]] inline PrefillTerms prefill_terms(const SluiceParams& p, const SluiceInputs& in, const Duty& duty,
                                                         BatchLag& batch) {
  PrefillTerms t;
  const double U = std::max(0.0, in.input - in.cached);
  const double D = in.decoding, B = in.decoding + in.queued, O = in.output;
  const double attention = p.eps_ms * U * (in.cached + U / 2);
  t.ttft_ms = ttft_of(p, in, U, in.queue_tokens, in.queue_pairs);
  // The time our prefill adds to the steps it shares (free under the weight-read floor).
  t.stall = std::max(p.w_ms, p.beta_ms * (U + D)) - std::max(p.w_ms, p.beta_ms * D) + attention;
  const double stall = t.stall;
  // Our prefill's share of the steps the others run in. An idle endpoint (B = 0) is priced 0, the
  // requests that will arrive during the stall too: pricing those (lambda x stall^2 / 2, as below)
  // fixed 3 of the committed hard suite's losing rates and broke 13 (agent sessions at 32 replicas:
  // busy holders then looked relatively cheaper; bench/results/README.md round 34,
  // bench/results/experiments/round34-idle-arrivals.diff).
  if (U > 0 && B > 0) {
    if (p.decode_price == 2) {
      // The queue's TTFT in ms; the decoders' tokens only by the lag it adds: a stall spread over
      // their tokens (about 2 R / B each) raises their mean ITL by stall / that.
      const double each = std::max(1.0, 2 * in.remaining / std::max(1.0, B));
      batch_lag(p, in, duty, batch, true);
      const double shift = expected_excess(batch.itl.mean_ms + stall / each, batch.itl.sd_ms, p.itl_slo_ms) - batch.lag;
      // The queue, and the requests arriving during the stall (lambda x stall of them, waiting
      // stall / 2 on average), wait for it in TTFT.
      t.prefill_imposed_ms = (in.queued + in.arrivals_per_ms * stall / 2) * stall + D * each * std::max(0.0, shift);
      // KV residency: the stall holds the batch's KV that much longer. While the KV has room that
      // costs nobody; when it is full, every ms of it is taken from the requests waiting for KV,
      // whose TTFT it delays one for one: all B pay the stall (the plain-ms price). Between, that
      // price is weighted by u^3 (u = KV usage), the chance that the KV is what binds: negligible
      // below half full (0.1 at 0.5), most of it near full (0.6 at 0.85).
      const double u = std::clamp(in.kv_usage, 0.0, 1.0);
      t.prefill_imposed_ms = std::max(t.prefill_imposed_ms, u * u * u * B * stall);
      // Work: as the pool nears the pace, a ms of prefill on a replica near its decode capacity is a
      // ms of every decoder's progress (w x B x stall; header, the work price).
      t.prefill_imposed_ms = std::max(t.prefill_imposed_ms, batch_work(p, in, duty, batch) * B * stall);
    } else {
      t.prefill_imposed_ms = B * stall;
    }
  }
  // KV pressure: a preemption's recompute stalls the batch.
  const double after = in.kv_usage + (U + O) / std::max(1.0, in.capacity_tokens);
  const double risk = std::clamp((after - p.kv_risk_start) / (1.0 - p.kv_risk_start), 0.0, 1.0);
  t.kv_ms = risk * risk * (1 + B) * p.beta_ms * (in.input + O);
  // Eviction: the blocks this request allocates beyond the cache's free room evict other prefixes
  // (least recently used first), each of whose tokens is found again by a later request about as
  // often as the pool's input tokens are found cached (h), and then costs its prefill again.
  if (p.eviction_price > 0) t.eviction_ms = p.eviction_price * p.beta_ms * std::max(0.0, U + O - in.cache_free_tokens) * in.reuse;
  return t;
}

// sluice_cost, and (when itl is not null) sluice_itl_ms, for inputs whose prefill_duty is `duty`'s.
// batch: as prefill_terms'.
template <bool kItl>
[[gnu::always_inline]] inline SluiceCost cost_and_itl(const SluiceParams& p, const SluiceInputs& in, const Duty& duty,
                                                      double* itl, BatchLag& batch) {
  SluiceCost c;
  const double B = in.decoding + in.queued, K = in.kv_read, O = in.output;
  const double gK = p.gamma_ms * K;
  const double B1 = B + 1;
  const double s0 = step_base(p, B), s1 = step_base(p, B1);
  // Decode: our own tokens at the batch we join, and the slowdown of the batch while we are in it.
  if (O > 0) {
    const double ctx = in.input + O / 2;
    const double k1 = K + ctx;
    const double with = s1 + p.gamma_ms * k1;  // step(B + 1, K + ctx)
    const double step0 = s0 + gK;              // the batch's step without us
    if (p.decode_price >= 2) {
      // The expected lag behind the ITL SLO's pace, the ITL being uncertain (the batch we would join).
      const SluiceItl w = batch_itl(p, B1, k1, s1, step_base(p, B1 + 1), duty.stretch);
      const double lag1 = expected_excess(w.mean_ms, w.sd_ms, p.itl_slo_ms);
      batch_lag(p, in, duty, batch, true);
      c.decode_ms = O * lag1;
      c.interference_ms = std::min(in.remaining, B * O) * std::max(0.0, lag1 - batch.lag);
      // The requests that arrive while we decode (lambda x O x itl of them) each wait a step of the
      // batch for their prefill, longer by what we add to it: their TTFT in plain ms, which the lag
      // (0 below the SLO's pace) does not see.
      c.interference_ms += in.arrivals_per_ms * O * w.mean_ms * (with - step0);
      // Work: the others' tokens it slows, in plain ms, at the work price's weight (header).
      c.interference_ms = std::max(c.interference_ms, batch_work(p, in, duty, batch) * std::min(in.remaining, B * O) * (with - step0));
    } else if (p.decode_price == 1) {
      // The lag behind the ITL SLO's pace: tokens that stream at least that fast cost nobody.
      const double lag1 = std::max(0.0, with * duty.stretch - p.itl_slo_ms);
      const double lag_before = std::max(0.0, step0 * duty.stretch - p.itl_slo_ms);
      c.decode_ms = O * lag1;
      c.interference_ms = std::min(in.remaining, B * O) * (lag1 - lag_before);
    } else {
      c.decode_ms = O * with;
      c.interference_ms = std::min(in.remaining, B * O) * (with - step0);
    }
  }
  const PrefillTerms t = prefill_terms(p, in, duty, batch);
  c.ttft_ms = t.ttft_ms;
  c.prefill_imposed_ms = t.prefill_imposed_ms;
  c.kv_ms = t.kv_ms;
  c.eviction_ms = t.eviction_ms;
  c.adapter_ms = in.adapter_ms;
  // The later turns that will extend this context where it goes: each at this endpoint's decode and
  // one step of its batch before its first token (its prefill warm, no queue ahead).
  if (in.followups > 0 && O > 0) c.followup_ms = in.followups * (c.decode_ms + c.interference_ms + ttft_of(p, in, 0.0, 0.0, 0.0));
  if constexpr (kItl) {
    // sluice_itl_ms: the step it joins, stretched, plus its own prefill spread over its O tokens.
    const double step = s1 + p.gamma_ms * (in.kv_read + in.input + in.output / 2);
    *itl = step / duty.keep + t.stall / std::max(1.0, in.output);
  }
  return c;
}

}  // namespace

double sluice_followups(double continuation) {
  const double c = std::clamp(continuation, 0.0, 0.95);
  return c * c / (1.0 - c * c);
}

double sluice_expected_excess(double mean, double sd, double limit) { return expected_excess(mean, sd, limit); }

double sluice_excess_probability(double mean, double sd, double limit) {
  if (!(sd > 0)) return mean > limit ? 1.0 : 0.0;
  if (mean + 8 * sd < limit) return 0.0;
  return 0.5 * std::erfc(-(mean - limit) / sd * 0.7071067811865476);
}

SluiceItl sluice_batch_itl(const SluiceParams& p, double b, double k, double prefill_duty) {
  return batch_itl(p, b, k, step_base(p, b), step_base(p, b + 1), Duty(p, prefill_duty, 0).stretch);
}

SluiceCost sluice_cost(const SluiceParams& p, const SluiceInputs& in) {
  BatchLag batch;
  return cost_and_itl<false>(p, in, Duty(p, in.prefill_duty, in.pace_share), nullptr, batch);
}

double sluice_itl_ms(const SluiceParams& p, const SluiceInputs& in) {
  double itl = 0.0;
  BatchLag batch;
  cost_and_itl<true>(p, in, Duty(p, in.prefill_duty, in.pace_share), &itl, batch);
  return itl;
}

bool sluice_meets_slo(const SluiceParams& p, const SluiceInputs& in, const SluiceCost& c) {
  return c.ttft_ms <= p.ttft_slo_ms && (in.output <= 1 || sluice_itl_ms(p, in) <= p.itl_slo_ms);
}

// Smoothing of the measured prefill rate: an exponential average with a 2 s time constant,
// sampled at most every 100 ms (so a burst inside one sample does not swing it). The pool's total,
// per endpoint (see rho in the header: per-endpoint rates are too noisy to take a minimum over).
double SluicePolicy::prefill_duty(std::span<const EndpointView> endpoints, Time now) {
  if (endpoints.empty()) return 0.0;
  PrefillRate& r = rate_;
  int64_t total = 0, input = 0;
  for (const EndpointView& v : endpoints) {
    total += v.load->input_tokens_total - v.load->predicted_cached_tokens_total;
    input += v.load->input_tokens_total;
  }
  if (r.last_total < 0 || total < r.last_total || input < r.last_input || endpoint_input_.size() != endpoints.size()) {
    r = PrefillRate{total, input, now, 0.0, 0.0, 0.0};
    endpoint_input_.assign(endpoints.size(), EndpointInput{});
    for (size_t i = 0; i < endpoints.size(); ++i) endpoint_input_[i].last = endpoints[i].load->input_tokens_total;
  } else if (const double dt = to_millis(now - r.last); dt >= 100.0) {
    const double a = dt / (dt + 2000.0);
    for (size_t i = 0; i < endpoints.size(); ++i) {
      EndpointInput& e = endpoint_input_[i];
      const int64_t x = endpoints[i].load->input_tokens_total;
      e.per_ms += a * (static_cast<double>(std::max<int64_t>(0, x - e.last)) / dt - e.per_ms);
      e.last = x;
    }
    r.per_ms += a * (static_cast<double>(total - r.last_total) / dt - r.per_ms);
    r.input_per_ms += a * (static_cast<double>(input - r.last_input) / dt - r.input_per_ms);
    if (input > r.last_input) {
      const double in = static_cast<double>(input - r.last_input);
      r.hit += a * (std::clamp(1.0 - static_cast<double>(total - r.last_total) / in, 0.0, 1.0) - r.hit);
    }
    r.last_total = total;
    r.last_input = input;
    r.last = now;
  }
  return std::min(0.9, params_.beta_ms * r.per_ms / static_cast<double>(endpoints.size()));
}

// Requests dispatched per ms to endpoint i: its own smoothed rate shrunk toward the pool's mean by
// its sample size (n = the requests its 2 s average holds; the pool's mean counts as one request),
// so an endpoint with few requests in its window is not taken at its noise.
double SluicePolicy::pool_arrivals(size_t endpoints) const {
  return rate_.input_per_ms / std::max(1.0, mean_prompt_) / static_cast<double>(std::max<size_t>(1, endpoints));
}

double SluicePolicy::arrivals_of(size_t i, double pool, double per_prompt) const {
  if (i >= endpoint_input_.size()) return pool;
  const double own = endpoint_input_[i].per_ms * per_prompt;
  const double n = own * 2000.0;
  return (n * own + pool) / (n + 1.0);
}

SluicePolicy::SluicePolicy(SluiceParams params, PoolKind kind)
    : params_(params),
      kind_(kind),
      prefix_(PrefixTrackerOptions{static_cast<size_t>(params.max_prefix_blocks), PrefixIndex::kDefaultCapacityBlocks, true}),
      mean_prompt_(params.mean_prompt_tokens),
      mean_output_(params.default_output_tokens) {
  params_.front_end_ms = std::max(0.0, params_.frontend_ms);  // learned from 0 when < 0 (header, F)
}

double SluicePolicy::output_of(const PickRequest& req) const {
  if (embedding(req)) return 0.0;
  const double o = req.max_output_tokens > 0 ? static_cast<double>(req.max_output_tokens) : params_.default_output_tokens;
  return std::min(o, params_.max_output_tokens);
}

// miss_price 0: an endpoint where the request would miss its SLO scores below every endpoint where
// it would not (the hard tier).
constexpr double kMissesSlo = 1e12;
// p's step-time terms (c0, W, beta, delta, gamma, eps) times `pace`, into `out` (its other fields p's).
static void scale_step_terms(const SluiceParams& p, double pace, SluiceParams& out) {
  out.c0_ms = p.c0_ms * pace;
  out.w_ms = p.w_ms * pace;
  out.beta_ms = p.beta_ms * pace;
  out.delta_ms = p.delta_ms * pace;
  out.gamma_ms = p.gamma_ms * pace;
  out.eps_ms = p.eps_ms * pace;
}

// The copy credit's horizon: the demand for a prefix is forecast 2 tau ahead (header, copy_credit_ms).
constexpr double kCopyHorizonMs = 2 * PrefixDemand::kTauMs;

// kFull: every field of evals_ (explain()); otherwise only what rank() reads (cached, saturated,
// score), the inputs and cost terms staying local.
template <bool kFull>
SLUICE_CPU_CLONES void SluicePolicy::evaluate(const PickRequest& req, std::span<const EndpointView> endpoints, Time now) {
  const SluiceParams& p = params_;
  const bool embed = embedding(req);
  const bool oracle = static_cast<bool>(oracle_);
  std::span<const uint32_t> matched;
  if (!embed && !oracle) {
    prefix_.sync(endpoints);
    matched = prefix_.match(req);
  }
  const double input = static_cast<double>(std::max<int64_t>(0, req.input_tokens));
  const double output = output_of(req);
  const double mean_context = mean_prompt_ + mean_output_ / 2;
  evals_.resize(endpoints.size());
  const double duty = embed ? 0.0 : prefill_duty(endpoints, now);
  if (!embed) duty_ = duty;
  refresh_pace(now);
  const Duty factors(p, duty, pace_share_);
  const double pool_arrivals_per_ms = pool_arrivals(endpoints.size());
  // 1 / the mean prompt, once per decision (arrivals_of divided by it for every endpoint).
  const double per_prompt = 1.0 / std::max(1.0, mean_prompt_);
  const bool adapter = !req.adapter.empty();
  const uint64_t adapter_hash = adapter ? adapter_key(req.adapter) : 0;
  const PrefixIndex& ix = prefix_.index();
  // The prefix cache's free room is known for the index's endpoints (not for embeddings or the oracle).
  const size_t indexed = !embed && !oracle ? ix.endpoints() : 0;
  const double block_tokens = prefix_.block_tokens();
  const double reuse = rate_.hit;
  // The copy credit's inputs: the longest cached prefix (its depth, its holders, the demand for it).
  uint32_t deepest = 0;
  size_t holders = 0;
  double demand = 0;  // lambda_p, requests per ms
  last_key_ = 0;
  last_continues_ = false;
  last_text_ = req.text.data();
  last_text_size_ = req.text.size();
  if (!matched.empty()) {
    for (const EndpointView& v : endpoints) {
      const uint32_t m = v.index < matched.size() ? matched[v.index] : 0;
      if (m > deepest) deepest = m, holders = 0;
      holders += m == deepest;
    }
    last_key_ = prefix_.deepest_hash();
    // With engine KV events the deepest match can lie past the learned index's (deepest_hash names
    // the learned one); the tail is then looked for at the wrong offset and the continuation is
    // missed (c a little low), never invented.
    last_continues_ = ends_.extends(last_key_, req.text, deepest, prefix_.block_chars());
    if (deepest > 0 && holders < endpoints.size() && last_key_ != 0 && output > 0) demand = demand_.rate(last_key_, now);
  }
  // The request alone (no queue, no batch) on the endpoint holding its longest cached prefix, at the
  // fastest pace: its first token's time, which shedding and lost causes test. The oracle's cached
  // tokens are asked for once per endpoint, here.
  SluiceInputs alone;
  double alone_ttft_ms = 0;
  if (!embed) {
    double most_cached = 0;
    if (oracle) {
      for (size_t i = 0; i < endpoints.size(); ++i) {
        evals_[i].cached = std::clamp<int64_t>(oracle_(endpoints[i].index, req), 0, req.input_tokens);
        most_cached = std::max(most_cached, static_cast<double>(evals_[i].cached));
      }
    } else if (deepest > 0) {
      most_cached = static_cast<double>(prefix_.cached_tokens(deepest, req.input_tokens));
    }
    alone.input = input;
    alone.output = output;
    alone.cached = most_cached;
    alone_ttft_ms = ttft_of(p, alone, std::max(0.0, input - most_cached), 0.0, 0.0);
  }
  // A lost cause (header, the SLO): alone its first token would come after the TTFT SLO; its TTFT and
  // ITL are then tested against its own alone plus the SLO's (the load may delay it by as much as the
  // SLO), not against the SLO it never meets.
  const bool lost = !embed && p.lost_causes > 0 && alone_ttft_ms > p.ttft_slo_ms;
  const double followups = sluice_followups(continuation_);
  const double warm_cached = demand > 0 ? alone.cached : 0.0;  // (the deepest match's: demand needs a match)
  // A miss's price (header, the SLO): miss_price x the request's latency budget.
  const double miss = p.miss_price > 0 ? p.miss_price * (p.ttft_slo_ms + output * p.itl_slo_ms) : kMissesSlo;
  double pace_sum = 0;  // the endpoints' batch ITLs (ms), phi's numerator
  bool any_meets = false;
  std::optional<SluiceParams> scaled;  // p with an endpoint's pace (made only on a fleet that has one)
  double least_calib = 4.0;  // the lowest ITL calibration of the endpoints (shedding)
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const EndpointView& v = endpoints[i];
    const EndpointLoad& l = *v.load;
    const LoadEstimate est = estimate_load(v);
    // The endpoint's pace (header): its step times' terms scaled by the factor learned from its prefills.
    const double pace = pace_of(v.index);
    // And the ITL it tests against the SLO, as its streams showed it (header, the SLO): the same as
    // the SLO over the factor.
    const double calib = itl_calibration_of(v.index);
    least_calib = std::min(least_calib, calib);
    const bool own = pace != 1.0 || calib != 1.0;
    if (own) {
      if (!scaled) scaled.emplace(p);
      scale_step_terms(p, pace, *scaled);
      scaled->itl_slo_ms = p.itl_slo_ms / calib;
    }
    const SluiceParams& pe = own ? *scaled : p;
    // Every field of e that is read is written below (no zero-initialisation first).
    Eval& e = evals_[i];
    if constexpr (kFull) e.fresh = est.fresh;
    e.saturated = est.waiting >= p.queue_limit;
    if (!oracle || embed) {  // (the oracle's: above)
      e.cached = 0;
      if (!embed && v.index < matched.size()) e.cached = prefix_.cached_tokens(matched[v.index], req.input_tokens);
    }
    const double own_queued = nonneg(l.prefill_requests);
    const double own_decoding = nonneg(l.in_flight - l.prefill_requests);
    // Other clients' requests, from a fresh scrape (external_load: what it saw less what was the
    // gateways' when it was taken).
    const ExternalLoad ext = est.fresh ? external_load(*v.signals, l) : ExternalLoad{};
    const double ext_waiting = ext.waiting, ext_running = ext.running;
    SluiceInputs local;
    SluiceInputs& in = kFull ? e.in : local;
    in.input = input;
    in.output = output;
    in.cached = static_cast<double>(e.cached);
    in.decoding = own_decoding + ext_running;
    in.queued = own_queued + ext_waiting;
    in.kv_read = nonneg(l.live_context_tokens) + (ext_running + ext_waiting) * mean_context;
    in.remaining = nonneg(l.decode_tokens) + (ext_running + ext_waiting) * mean_output_ / 2;
    in.queue_tokens = nonneg(l.prefill_tokens) + ext_waiting * mean_prompt_;
    in.queue_pairs = std::max(0.0, l.prefill_pairs) + ext_waiting * mean_prompt_ * mean_prompt_ / 2;
    if (l.prefill_head_tokens > 0 && now > l.prefill_head_since) {
      const double head = static_cast<double>(l.prefill_head_tokens);
      const double done = sluice_head_progress(pe, head, l.prefill_head_pairs, in.decoding, in.kv_read,
                                               to_millis(now - l.prefill_head_since));
      in.queue_tokens = std::max(0.0, in.queue_tokens - done * head);
      in.queue_pairs = std::max(0.0, in.queue_pairs - done * l.prefill_head_pairs);
    }
    in.kv_usage = est.kv_usage;
    in.capacity_tokens = est.capacity_tokens;
    in.adapter_ms = 0;
    double adapter_load = 0;  // a load into a free slot: paid once, like a cold prefill (the copy credit)
    if (adapter) {
      double a = adapter_locality_score(v, req.adapter);
      // A free slot, and the adapter among the last max_lora this gateway sent there: still loaded
      // (header, adapter_ms). Known signals only: max_lora comes from them.
      if (a == kAdapterFreeSlot && lora_signals_known(v) && v.index < recent_adapters_.size() &&
          recent_adapters_[v.index].loaded(adapter_hash, v.signals->max_lora))
        a = 1.0;
      if (a < 1.0) {
        const bool loads = a >= 0.6;  // into a free slot, or it is waiting: else every slot holds another
        in.adapter_ms = loads ? p.adapter_load_ms : p.adapter_wait_ms;
        if (loads) adapter_load = in.adapter_ms;
      }
    }
    in.prefill_duty = duty;
    in.reuse = reuse;
    in.arrivals_per_ms = arrivals_of(i, pool_arrivals_per_ms, per_prompt);
    in.followups = followups;
    in.cache_free_tokens = SluiceInputs{}.cache_free_tokens;
    if (v.index < indexed)
      in.cache_free_tokens = static_cast<double>(std::max<int64_t>(0, ix.capacity(v.index) - static_cast<int64_t>(ix.entries(v.index)))) *
                             block_tokens;
    in.pace_share = pace_share_;
    // sluice_cost and sluice_itl_ms (embeddings: no ITL) in one pass.
    double itl = 0.0;
    BatchLag batch;
    SluiceCost cost = embed ? cost_and_itl<false>(pe, in, factors, nullptr, batch)
                            : cost_and_itl<true>(pe, in, factors, &itl, batch);
    // A lost cause's targets here: its TTFT and ITL alone at this endpoint's pace, plus the SLO's.
    double ttft_target_ms = p.ttft_slo_ms, itl_target_ms = pe.itl_slo_ms;
    if (lost) [[unlikely]] {
      ttft_target_ms += ttft_of(pe, alone, std::max(0.0, input - alone.cached), 0.0, 0.0);
      itl_target_ms += sluice_itl_ms(pe, alone);  // (never an embedding: no lost cause there)
    }
    const bool meets_slo = cost.ttft_ms <= ttft_target_ms && (in.output <= 1 || itl <= itl_target_ms);
    // Where it misses, the miss price stands for the request: its own decode lag, and its later
    // turns' (which follow it here), are not charged on top (header, the SLO).
    if (!meets_slo && p.miss_price > 0 && p.decode_price >= 1) [[unlikely]] {
      cost.followup_ms = std::max(0.0, cost.followup_ms - in.followups * cost.decode_ms);
      cost.decode_ms = 0;
    }
    // This endpoint's batch ITL (without this request), for phi after the dispatch (the decode
    // terms have computed it already unless the request has no output).
    if (!embed) {
      batch_lag(pe, in, factors, batch, false);
      pace_sum += batch.itl.mean_ms;
    }
    // shed 2 (header, shedding): it serves the request here only where admitting it gains more
    // goodput than it costs the batch it joins.
    bool serves = meets_slo;
    if (p.shed >= 2 && meets_slo && !embed && in.output > 1) {
      const double sd = batch.itl.sd_ms;
      const double after = sluice_excess_probability(itl, sd, pe.itl_slo_ms);
      const double before = sluice_excess_probability(batch.itl.mean_ms, sd, pe.itl_slo_ms);
      const double own = lost ? sluice_excess_probability(itl, sd, itl_target_ms) : after;
      serves = 1.0 - own > (in.decoding + in.queued) * std::max(0.0, after - before);
    }
    any_meets |= serves;
    if (!serves) [[unlikely]] {
      // When it would meet the SLO here (the Retry-After of a shed request, header): the TTFT excess
      // drains with the queue ahead; an ITL over the pace falls as that share of the batch leaves,
      // its decoders' remaining outputs spread over [0, 2 R / B] tokens of itl ms each. (Met but not
      // served, shed 2: as soon as the batch moves.) Read below only when no endpoint serves it, so
      // every endpoint's is then fresh.
      double wait = std::max(0.0, cost.ttft_ms - ttft_target_ms);
      if (!embed && in.output > 1 && itl > itl_target_ms)
        wait = std::max(wait, (1.0 - itl_target_ms / itl) * 2.0 * in.remaining / std::max(1.0, in.decoding + in.queued) * itl);
      e.meets_in_ms = meets_slo ? 0.0 : wait;
    }
    e.total = cost.total();
    e.ttft_ms = cost.ttft_ms;
    e.score = -e.total - (meets_slo ? 0.0 : miss);
    e.premium = -1;
    if (demand > 0) {
      // The copy credit's inputs (only the terms that depend on the cached tokens or the queue
      // change): the steady cost (the prefill ahead removed) for the holders; for the others the
      // premium of the cold copy and the steady cost had they held the prefix.
      if (in.cached < warm_cached) {
        SluiceInputs w = in;
        w.cached = warm_cached;
        const PrefillTerms t = prefill_terms(pe, w, factors, batch);
        e.premium = std::max(0.0, cost.ttft_ms + cost.prefill_imposed_ms - (t.ttft_ms + t.prefill_imposed_ms)) + adapter_load;
        e.steady = e.total - (cost.ttft_ms + cost.prefill_imposed_ms + cost.kv_ms + cost.eviction_ms) +
                   ttft_of(pe, w, std::max(0.0, w.input - w.cached), 0.0, 0.0) + t.prefill_imposed_ms + t.kv_ms + t.eviction_ms -
                   adapter_load;
        e.free = in.cache_free_tokens;
        e.copy_tokens = warm_cached - in.cached + in.output;
      } else {
        e.steady = e.total - cost.ttft_ms + ttft_of(pe, in, std::max(0.0, in.input - in.cached), 0.0, 0.0) - adapter_load;
      }
    }
    if constexpr (kFull) {
      e.cost = cost;
      e.itl_ms = itl;
      e.meets_slo = meets_slo;
      e.serves = serves;
      e.ttft_target_ms = ttft_target_ms;
      e.itl_target_ms = itl_target_ms;  // as itl_ms is: the SLO over itl_calibration (+ a lost cause's ITL alone)
    }
  }
  // Shedding (header): no endpoint meets the SLO, and alone the request would (the load is why).
  shed_advice_ = false;
  if (p.shed > 0 && !any_meets && !embed && !endpoints.empty()) {
    double soonest_meets = std::numeric_limits<double>::infinity();  // ms until it would meet the SLO somewhere
    for (size_t i = 0; i < endpoints.size(); ++i) soonest_meets = std::min(soonest_meets, evals_[i].meets_in_ms);
    // One engine step (its floor, c0 + W): no engine state changes sooner.
    shed_wait_ms_ = std::clamp(soonest_meets, p.c0_ms + p.w_ms, kShedRetryMaxMs);
    // Its ITL alone too: an ITL SLO under one engine step is never met, and sheds nothing; nor one
    // that the streams' calibration puts past the SLO alone on the least calibrated endpoint (after
    // a burst whose streams ran slow, an idle pool is not the load that makes it miss).
    shed_alone_ms_ = alone_ttft_ms;
    // A lost cause alone meets its own targets, which are its times alone plus the SLO's.
    shed_advice_ = lost || (shed_alone_ms_ <= p.ttft_slo_ms && (output <= 1 || sluice_itl_ms(p, alone) * least_calib <= p.itl_slo_ms));
  }
  // phi for the decisions after this request's dispatch (on_dispatch): the pool's mean batch ITL over
  // the ITL SLO. However often a request is ranked (explain_json ranks it once more), every ranking
  // of it sees the same phi.
  if (!embed && !endpoints.empty() && p.itl_slo_ms > 0)
    next_pace_share_ = pace_sum / static_cast<double>(endpoints.size()) / p.itl_slo_ms;
  if (demand > 0) {
    // The copy credit (see the header): a cold copy's premium, repaid by the requests for this
    // prefix forecast over the demand's horizon, which will share the copy.
    double best_holder = std::numeric_limits<double>::infinity();
    for (const Eval& e : evals_)
      if (e.premium < 0) best_holder = std::min(best_holder, e.steady);
    // The requests forecast over the demand's horizon, 2 tau: the count its estimate holds (lambda_p
    // x tau) less the count's standard deviation, over twice that time (header).
    const double seen = demand * PrefixDemand::kTauMs;
    const double users = std::max(0.0, seen - std::sqrt(seen)) * (kCopyHorizonMs / PrefixDemand::kTauMs);
    for (size_t i = 0; i < endpoints.size(); ++i) {
      Eval& e = evals_[i];
      if (e.premium <= 0 || !std::isfinite(best_holder)) continue;
      const double saving = std::max(0.0, best_holder - e.steady);
      // Only the part of the copy the prefix cache has free room for: what must evict displaces
      // prefixes whose own demand is not known here (the eviction term prices the current request's).
      const double fit = std::clamp(e.free / std::max(1.0, e.copy_tokens), 0.0, 1.0);
      const double credit = fit * std::min(e.premium, users * saving / static_cast<double>(holders + 1));
      e.score += credit;
      if constexpr (kFull) {
        e.cost.copy_credit_ms = credit;
        e.copy_users = users;
      }
    }
  }
}

void SluicePolicy::rank(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
                        std::vector<Candidate>& out) {
  // Peers' refusals join the backlog at once, shedding or not, so that they drain from now.
  if (peer_shed_ms_ > 0 && !endpoints.empty()) [[unlikely]]
    drain_shed_backlog(now, static_cast<double>(endpoints.size()));
  evaluate<false>(req, endpoints, now);
  // sort_candidates' order (saturated last), its keys built straight from the evaluations.
  thread_local RankOrder order;
  order.reset(endpoints.size());
  const RankRotation rotation(cursor_, pool_size_of(endpoints));
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const Eval& e = evals_[i];
    order.add(e.score, rank_tie(e.saturated, endpoints[i], rotation), static_cast<uint32_t>(i));
  }
  out.clear();
  for (const RankOrder::Item& item : order.sort()) {
    const Eval& e = evals_[item.pos];
    out.push_back({endpoints[item.pos].index, e.score, candidate_tokens(e.cached), e.saturated});
    out.back().expected_ttft_ms = static_cast<float>(e.ttft_ms);
  }
  if (shed_advice_ && !out.empty()) {  // shedding (header, evaluate())
    // The requests shed before this one come back first: their prefill (alone), less what the
    // endpoints have served since (each a ms of work per ms), spread over the endpoints.
    // (on_shed adds a refused request's; ranking alone, as /debug/pick does, adds nothing.)
    const double n = static_cast<double>(endpoints.size());
    drain_shed_backlog(now, n);
    out.front().shed = true;
    out.front().retry_after_ms = candidate_ms(std::min(kShedRetryMaxMs, shed_wait_ms_ + shed_backlog_ms_ / n));
    out.front().shed_work_ms = candidate_ms(shed_alone_ms_);
  }
}

void SluicePolicy::drain_shed_backlog(Time now, double endpoints) {
  shed_backlog_ms_ = std::max(0.0, shed_backlog_ms_ - std::max(0.0, to_millis(now - shed_backlog_at_)) * endpoints);
  shed_backlog_at_ = std::max(shed_backlog_at_, now);
  // The peers' refusals (on_peer_shed) join from now: drained only from here on.
  shed_backlog_ms_ += peer_shed_ms_;
  peer_shed_ms_ = 0;
}

void SluicePolicy::on_peer_shed(double work_ms, Time) {
  if (std::isfinite(work_ms) && work_ms > 0) peer_shed_ms_ += work_ms;
}

void SluicePolicy::on_shed(const Candidate& advised, Time) {
  // Its prefill alone joins the backlog (drained to the time of the latest ranking).
  if (advised.shed) shed_backlog_ms_ += advised.shed_work_ms;
}

uint64_t SluicePolicy::adapter_key(std::string_view adapter) { return std::hash<std::string_view>{}(adapter); }

void SluicePolicy::RecentAdapters::note(uint64_t name) {
  size_t at = 0;
  while (at < count && names[at] != name) ++at;
  if (at == count) at = count < kRecentAdapters ? count++ : kRecentAdapters - 1;  // new: the oldest drops out
  for (; at > 0; --at) names[at] = names[at - 1];
  names[0] = name;
}

bool SluicePolicy::RecentAdapters::loaded(uint64_t name, int max_lora) const {
  const size_t n = std::min(count, static_cast<size_t>(std::max(0, max_lora)));
  for (size_t i = 0; i < n; ++i)
    if (names[i] == name) return true;
  return false;
}

std::vector<HotPrefix> SluicePolicy::hot_prefixes(Time now, size_t n) const {
  std::vector<HotPrefix> out;
  for (const auto& [key, per_ms] : demand_.top(now, n)) out.push_back({key, per_ms * 1000.0, prefix_.index().holder_count(key)});
  return out;
}

void SluicePolicy::on_prefill_done(size_t endpoint, const PrefillSample& s, Time now) {
  // Under KV pressure a prefill waits for blocks or is recomputed after a preemption: that is the
  // KV's (the KV terms price it), not the GPU's pace.
  if (!(s.elapsed_ms >= 0) || s.kv_usage >= params_.kv_risk_start) return;
  const double model = prefill_model(s).first;
  if (!(model > 0)) return;
  double elapsed = s.elapsed_ms;
  if (s.at_dispatch) {  // its time includes the engine's front end (header, F)
    // Only a head that came to an idle endpoint (no decoder: no step in progress whose rest it
    // waited for, and none queued behind it). Beside decoders the model's wait for the step in
    // progress (half a step) ran ~10 ms short at the median on fleetsim's engines, which have no
    // front end (hot prefix, 64 replicas past capacity, batches of 30-90: that would be learned as
    // F); prefills queued behind are carried in its steps by the model, not by an engine that had
    // started its step as the head came (live, arrivals a millisecond apart read 40-140 ms under).
    // And only at an endpoint known to run at the pool's fastest pace: a pace read short adds its
    // error times the model's ms to the residual (a half-slow fleet's slow replicas, idle first and
    // priced as fast until their pace is learned, read F at 80-800 ms in fleetsim: cost mix, KV
    // pressure, agent sessions, tool agent at 8 and 32 replicas).
    // (At the profile's times, not k's: k is read off the same short prefills, and would take the
    // front end for a slower pool.)
    if (s.decoding == 0 && !s.mid_step && s.behind == 0 && at_fastest_pace(endpoint))
      note_frontend(endpoint, elapsed - model * pace_of(endpoint));
    elapsed -= params_.front_end_ms;
    if (!(elapsed > 0)) return;
  }
  note_pace(endpoint, pace_bin(model), elapsed, model, now);
}

// F (header): each endpoint's running median of its residuals (from its first), each moving it
// toward itself by a tenth of their spread (their mean distance from it, over ~8 samples) plus C0.
// What counts: the configured frontend_ms, or, once at least half the endpoints at the fastest pace
// have 8 samples each, the lowest of their medians, each where it stands past C0 plus its spread
// (else 0): the median's own wander on fleetsim's engines, which have no front end, crossed C0 or
// the spread alone (cost-mix-8, agent32).
void SluicePolicy::note_frontend(size_t endpoint, double residual_ms) {
  if (params_.frontend_ms >= 0 || !std::isfinite(residual_ms)) return;
  if (frontend_.size() <= endpoint) frontend_.resize(endpoint + 1);
  FrontEnd& q = frontend_[endpoint];
  const double r = std::clamp(residual_ms, -params_.ttft_slo_ms, params_.ttft_slo_ms);
  if (q.samples++ == 0) q.median = r;
  q.spread += (std::abs(r - q.median) - q.spread) / 8.0;
  const double step = 0.1 * (q.spread + params_.c0_ms);
  q.median += r > q.median ? step : -step;
  refresh_frontend();
}

// An endpoint whose pace is known (8 samples) to be the pool's fastest (within 10%).
bool SluicePolicy::at_fastest_pace(size_t endpoint) const {
  return endpoint < pace_.size() && pace_[endpoint].samples >= 8 && pace_[endpoint].factor <= 1.1;
}

void SluicePolicy::refresh_frontend() {
  if (params_.frontend_ms >= 0) return;
  double f = std::numeric_limits<double>::infinity();
  size_t fastest = 0, known = 0;
  for (size_t i = 0; i < pace_.size(); ++i) {
    if (!at_fastest_pace(i)) continue;
    ++fastest;
    if (i >= frontend_.size() || frontend_[i].samples < 8) continue;
    const FrontEnd& e = frontend_[i];
    f = std::min(f, e.median > params_.c0_ms + e.spread ? e.median : 0.0);
    ++known;
  }
  params_.front_end_ms = known > 0 && 2 * known >= fastest ? f : 0.0;
}

// A decode (header, pace): a whole answer's (header, whole answers) is its tokens at the profile's
// ITL for the batch it came to, counted from its expected first token, so what the model's prefill
// missed is in it too; a streamed one's, from its first token to its last, is its tokens at the
// batch's step time plus the own prefill its steps carried (beta a token). Each kind in bins of its
// own (the model's misses differ from a prefill's and from each other's): the bins take what is
// common.
void SluicePolicy::on_decode_done(size_t endpoint, const DecodeSample& s, Time now) {
  // The ITL calibration's sample (header, the SLO): every complete stream, and a whole answer whose
  // decode outlasts its first token's estimate, its own ITL against the model's for the batch it
  // ended in (at the endpoint's pace), KV pressure included (its waits and preemptions are what the
  // SLO test must see).
  // The batch as a ranking counts it: the others' contexts at the mean context (evaluate()).
  PrefillSample batch;
  batch.decoding = s.decoding + std::max(0.0, s.others);
  batch.kv_read = s.kv_read + std::max(0.0, s.others) * (mean_prompt_ + mean_output_ / 2);
  if (params_.itl_calibration > 0 && !s.engine && s.tokens >= 1 && s.elapsed_ms > 0 && std::isfinite(s.elapsed_ms)) {
    const double model = expected_itl_ms(endpoint, batch);
    // A whole answer only where its decode is expected to last at least as long as the span its
    // first token was estimated over (that estimate's error is in its elapsed_ms).
    if (model > 0 && (s.streamed || s.tokens * model >= s.expected_first_ms))
      note_itl(endpoint, std::log(s.elapsed_ms / s.tokens / model), now);
  }
  if (!(s.elapsed_ms >= 0) || !(s.tokens >= 1) || s.kv_usage >= params_.kv_risk_start) return;
  if (s.engine) {
    // The engine's tokens (header, pace): their steps at the batch, plus the span's prefill, which
    // delays every decoder there. Where that prefill outweighs the steps, the sample is mostly the
    // assumption that every decoder waited for all of it (a long prefill that ran beside few
    // decoders, or before they came: read as a pace of ~0.4), not the pace: none. A ratio past e^+-2
    // is taken as e^+-2 (as the ITL calibration's): a garbled histogram is not a pace.
    const double steps = s.tokens * step_ms(params_, batch.decoding, batch.kv_read);
    const double prefill = batch.decoding * (params_.beta_ms * s.prefilled + params_.eps_ms * s.prefilled_pairs);
    if (params_.engine_itl > 0 && steps > 0 && prefill <= steps) {
      const double model = steps + prefill;
      note_pace(endpoint, 3 * kPaceBins, std::clamp(s.elapsed_ms, model * std::exp(-2.0), model * std::exp(2.0)), model, now);
    }
    return;
  }
  const double model = s.streamed ? s.tokens * step_ms(params_, s.decoding, s.kv_read) + params_.beta_ms * s.prefilled
                                  : s.tokens * sluice_batch_itl(params_, s.decoding, s.kv_read, duty_).mean_ms;
  if (!(model > 0)) return;
  note_pace(endpoint, (s.streamed ? 2 : 1) * kPaceBins + pace_bin(model), s.elapsed_ms, model, now);
}

// One sample: the endpoint's cells decay by one sample, the sample's bin is refitted given every
// endpoint's effect (so a bin's first samples set its m_b, not the endpoint's pace), then the
// endpoint's effect given the bins'. The other endpoints follow at the next refresh.
void SluicePolicy::note_pace(size_t endpoint, size_t cell, double observed, double model, Time now) {
  if (pace_.size() <= endpoint) pace_.resize(endpoint + 1);
  Pace& q = pace_[endpoint];
  const double x = std::log(std::max(observed, 1e-3) / model);
  for (uint64_t m = pace_bins_used_; m != 0; m &= m - 1) {
    PaceCell& k = q.cells[static_cast<size_t>(std::countr_zero(m))];
    k.n *= kPaceKeep, k.s *= kPaceKeep, k.q *= kPaceKeep;
  }
  pace_bins_used_ |= uint64_t{1} << cell;
  PaceCell& k = q.cells[cell];
  k.n += 1;
  k.s += x;
  k.q += x * x;
  q.samples = q.samples * kPaceKeep + 1;
  q.last = now;
  fit_bin(cell);
  fit_endpoint(q);
  pace_bounds(q, now);
  // (The fastest is chosen again at the next refresh; until then a faster one only takes its place.)
  pace_fastest_.offer(q);
  q.factor = pace_factor(q);
}

// a_e = sum over its bins of (s - n m_b) / (its count + 1): the least-squares effect given the bins',
// shrunk toward 0 by one sample's worth (so an endpoint whose bins no other endpoint shares, whose
// effect the samples cannot tell from its bins', is priced as the others).
void SluicePolicy::fit_endpoint(Pace& q) const {
  double num = 0, den = 1;
  for (uint64_t m = pace_bins_used_; m != 0; m &= m - 1) {  // an empty cell adds 0 to both
    const size_t b = static_cast<size_t>(std::countr_zero(m));
    num += q.cells[b].s - q.cells[b].n * bin_effect_[b];
    den += q.cells[b].n;
  }
  q.log_r = num / den;
}

// m_b = sum over the endpoints of (s - n a_e) / their count in the bin (0 while it has none).
void SluicePolicy::fit_bin(size_t b) {
  double num = 0, den = 0;
  for (const Pace& q : pace_) {
    const PaceCell& k = q.cells[b];
    if (!(k.n > 0)) continue;
    num += k.s - k.n * q.log_r;
    den += k.n;
  }
  bin_effect_[b] = den > 0 ? num / den : 0.0;
}

// The profile's ms for the prefill of a queue's head (as the TTFT formula with no queue ahead): its
// steps (as many as its own tokens need) also carry the prefills queued behind it, up to the step's
// budget.
std::pair<double, double> SluicePolicy::prefill_model(const PrefillSample& s) const {
  SluiceInputs alone;
  alone.decoding = s.decoding;
  alone.kv_read = s.kv_read;
  const double steps = std::max(1.0, std::ceil(s.tokens / params_.chunk_tokens));
  const double shared = std::max(0.0, std::min(s.behind, steps * params_.chunk_tokens - s.tokens));
  // A head that came while a step was in progress waited for its end first, as an arrival does
  // (ttft_of); one after another's first token starts at a step's end.
  // (The engine's front end is not the model's: F, header.)
  const double ms = s.mid_step ? scheduled_ttft_of(params_, alone, 0.0, s.tokens + shared, s.pairs)
                               : prefill_steps_ms(params_, alone, 0.0, s.tokens + shared, s.pairs);
  return {ms, shared};
}

// A bin per doubling of the modelled ms.
size_t SluicePolicy::pace_bin(double model_ms) {
  static_assert(kPaceBins == kDoublings);
  return ms_doubling(model_ms);
}

// A whole answer's expected first token (PoolRouter): the profile's ms, times what prefills of that
// size take over it (exp m_b, 1 before any sample), times the fastest endpoint's R and the
// endpoint's factor; the tokens behind it in its steps are done with it.
ExpectedPrefill SluicePolicy::expected_prefill(size_t endpoint, const PrefillSample& head) const {
  const auto [model, carried] = prefill_model(head);
  if (!(model >= 0)) return {};
  const double fastest = pace_fastest_.known ? pace_fastest_.log_r : 0.0;
  // A head that came at its dispatch spends the engine's front end first (header, F).
  return {(head.at_dispatch ? params_.front_end_ms : 0.0) + model * std::exp(bin_effect_[pace_bin(model)] + fastest) * pace_of(endpoint),
          carried};
}

// A whole answer's tokens (PoolRouter): one per step of the endpoint's batch, at its pace.
double SluicePolicy::expected_itl_ms(size_t endpoint, const PrefillSample& batch) const {
  const double pace = pace_of(endpoint);
  if (pace == 1.0) return sluice_batch_itl(params_, batch.decoding, batch.kv_read, duty_).mean_ms;
  SluiceParams scaled = params_;
  scale_step_terms(params_, pace, scaled);
  return sluice_batch_itl(scaled, batch.decoding, batch.kv_read, duty_).mean_ms;
}

void SluicePolicy::note_itl(size_t endpoint, double x, Time now) {
  x = std::clamp(x, -2.0, 2.0);  // a stream 7x off its expectation is not the model's miss
  if (itl_calib_.size() <= endpoint) itl_calib_.resize(endpoint + 1);
  itl_calib_[endpoint].add(x, kPaceKeep, now);
  itl_calib_pool_.add(x, kItlPoolKeep, now);
}

// Every endpoint's factor (at most every 100 ms, with the pace's refresh): its mean shrunk toward
// the pool's, which is shrunk toward 0 by one sample, each weighed by its count faded since its last
// sample (kItlFadeMs: a stale calibration is the model's again), less two standard errors (the
// samples' spread over the weight): only what the streams tell apart from the model's noise.
void SluicePolicy::refresh_itl_calibration(Time now) {
  if (itl_calib_.empty()) return;
  const auto faded = [&](const ItlCalibration& c) { return c.w * std::exp(-std::max(0.0, to_millis(now - c.last)) / kItlFadeMs); };
  // The samples' variance about their mean, with the prior (as the pace's).
  const auto spread = [](const ItlCalibration& c) {
    return with_prior_variance(c.w, c.w > 0 ? std::max(0.0, c.q / c.w - (c.s / c.w) * (c.s / c.w)) : 0.0);
  };
  const ItlCalibration& pool = itl_calib_pool_;
  const double wp = faded(pool);
  const double pool_mean = pool.w > 0 ? pool.s / pool.w * wp / (wp + 1) : 0.0;
  const double pool_var = spread(pool);
  const bool on = params_.itl_calibration > 0;
  const auto factor = [&](double mean, double var, double w) {
    return on ? std::clamp(std::exp(mean - 2.0 * std::sqrt(var / std::max(w, 1.0))), 1.0, 4.0) : 1.0;
  };
  itl_pool_factor_ = factor(pool_mean, pool_var, wp);
  for (ItlCalibration& c : itl_calib_) {
    const double w = faded(c);
    const double k = kItlPriorSamples;
    const double mean = ((c.w > 0 ? w * c.s / c.w : 0.0) + k * pool_mean) / (w + k);
    c.factor = factor(mean, (w * spread(c) + k * pool_var) / (w + k), w + k);
  }
}

// An endpoint's pace (header, pace): log R = a_e (fit_endpoint) and its standard error: the spread
// of its samples about the fit, with a prior 0.25 (a ratio's +-50%) counted as one more sample,
// over w = the decayed sample count faded by the time since the last sample (kPaceFadeMs).
// Evidence that fades widens it: an endpoint priced slow on a few samples and then sent none is
// tried again, not priced on old evidence for ever.
void SluicePolicy::pace_bounds(Pace& q, Time now) const {
  q.se = 1;
  if (!(q.samples > 0)) return;
  double square = 0, n = 0;
  for (uint64_t m = pace_bins_used_; m != 0; m &= m - 1) {
    const size_t b = static_cast<size_t>(std::countr_zero(m));
    const PaceCell& k = q.cells[b];
    if (!(k.n > 0)) continue;
    const double mu = q.log_r + bin_effect_[b];
    square += k.q - 2 * mu * k.s + k.n * mu * mu;
    n += k.n;
  }
  const double w = q.samples * std::exp(-std::max(0.0, to_millis(now - q.last)) / kPaceFadeMs);
  const double var = with_prior_variance(w, std::max(0.0, square / std::max(n, 1e-9)));
  q.se = std::sqrt(var / std::max(w, 1e-9));
}

// The factor: how much slower the endpoint is than the fastest one (the lowest log R + 2 se), by
// the difference of their log R less two standard errors of that difference; 1 when within them,
// never below 1 (header, pace).
double SluicePolicy::pace_factor(const Pace& q) const {
  if (!(q.samples > 0) || !pace_fastest_.known) return 1.0;
  const double d = q.log_r - pace_fastest_.log_r - 2.0 * std::hypot(q.se, pace_fastest_.se);
  return std::clamp(std::exp(std::max(0.0, d)), 1.0, 4.0);
}

// The fit (a few sweeps from the last one's values: it moves little between refreshes), the
// factors' fading and the fastest endpoint, at most every 100 ms (as prefill_duty samples).
void SluicePolicy::refresh_pace(Time now) {
  if ((pace_.empty() && itl_calib_.empty()) || to_millis(now - pace_refreshed_) < 100.0) return;
  pace_refreshed_ = now;
  refresh_itl_calibration(now);
  if (pace_.empty()) return;
  // A few sweeps from the last fit's values (it moves little in 100 ms): every used bin's m_b, then
  // every endpoint's a_e.
  for (int sweep = 0; sweep < 3; ++sweep) {
    for (uint64_t m = pace_bins_used_; m != 0; m &= m - 1) fit_bin(static_cast<size_t>(std::countr_zero(m)));
    for (Pace& q : pace_)
      if (q.samples > 0) fit_endpoint(q);
  }
  for (Pace& q : pace_)
    if (q.samples > 0) pace_bounds(q, now);
  choose_fastest();
  if (!frontend_.empty()) refresh_frontend();  // which endpoints are at the fastest pace moved
}

// The fastest endpoint among those with samples, and every factor relative to it.
void SluicePolicy::choose_fastest() {
  pace_fastest_ = FastestPace{};
  for (const Pace& q : pace_)
    if (q.samples > 0) pace_fastest_.offer(q);
  for (Pace& q : pace_) q.factor = pace_factor(q);
  refresh_ttft_factors();
}

// k (header): per prefill bin with 8 samples or more over the endpoints, log k = m_b + the fastest
// endpoint's a_e less two of its standard errors, counted past kPoolPaceTolerance only, in [1, 4]; a
// bin with fewer takes the nearest such bin's (the shorter on a tie); 1 at every size while none is
// past it.
void SluicePolicy::refresh_ttft_factors() {
  params_.ttft_factors = nullptr;
  ttft_factors_.fill(1.0);
  if (!(params_.pool_pace > 0) || !pace_fastest_.known) return;
  const double at_least = std::log(kPoolPaceTolerance) + 2.0 * pace_fastest_.se - pace_fastest_.log_r;
  std::array<double, kPaceBins> own;
  own.fill(-1.0);  // < 0: too few samples
  bool any = false;
  for (uint64_t m = pace_bins_used_ & ((uint64_t{1} << kPaceBins) - 1); m != 0; m &= m - 1) {
    const size_t b = static_cast<size_t>(std::countr_zero(m));
    double n = 0;
    for (const Pace& q : pace_) n += q.cells[b].n;
    if (n < 8) continue;
    own[b] = 1.0;
    if (!(bin_effect_[b] > at_least)) continue;
    own[b] = std::min(4.0, std::exp(bin_effect_[b] + pace_fastest_.log_r - 2.0 * pace_fastest_.se));
    any = true;
  }
  if (!any) return;
  for (size_t b = 0; b < kPaceBins; ++b) {
    double k = own[b];
    for (size_t d = 1; k < 0 && d < kPaceBins; ++d) {
      if (b >= d && own[b - d] >= 0) k = own[b - d];
      else if (b + d < kPaceBins && own[b + d] >= 0) k = own[b + d];
    }
    ttft_factors_[b] = k;
  }
  params_.ttft_factors = ttft_factors_.data();
}

// The k an evaluation's TTFT was priced at (explain): the bin of its scheduled part at its pace.
double SluicePolicy::ttft_factor_of(const Eval& e, double pace) const {
  if (params_.ttft_factors == nullptr) return 1.0;
  SluiceParams pe = params_;
  scale_step_terms(params_, pace, pe);
  const double U = std::max(0.0, e.in.input - e.in.cached);
  return params_.ttft_factors[ms_doubling(scheduled_ttft_of(pe, e.in, U, e.in.queue_tokens, e.in.queue_pairs))];
}

void SluicePolicy::adopt_endpoints(const Policy& old, std::span<const int> old_of_new) {
  const auto* o = dynamic_cast<const SluicePolicy*>(&old);
  if (o == nullptr || (o->pace_.empty() && o->itl_calib_.empty())) return;
  const SluiceParams &a = params_, &b = o->params_;
  if (a.c0_ms != b.c0_ms || a.w_ms != b.w_ms || a.beta_ms != b.beta_ms || a.delta_ms != b.delta_ms ||
      a.gamma_ms != b.gamma_ms || a.eps_ms != b.eps_ms || a.chunk_tokens != b.chunk_tokens)
    return;
  // Each kept endpoint's entry, by its index in the old pool (a new endpoint's: none yet).
  const auto carry = [&](auto& mine, const auto& theirs) {
    mine.assign(old_of_new.size(), {});
    for (size_t i = 0; i < old_of_new.size(); ++i)
      if (old_of_new[i] >= 0 && static_cast<size_t>(old_of_new[i]) < theirs.size()) mine[i] = theirs[static_cast<size_t>(old_of_new[i])];
  };
  carry(pace_, o->pace_);
  carry(itl_calib_, o->itl_calib_);
  itl_calib_pool_ = o->itl_calib_pool_;
  itl_pool_factor_ = o->itl_pool_factor_;
  bin_effect_ = o->bin_effect_;
  pace_bins_used_ = o->pace_bins_used_;
  if (params_.frontend_ms < 0) {  // the engines' front end (header, F), learned
    carry(frontend_, o->frontend_);
  }
  choose_fastest();
  refresh_frontend();
  pace_refreshed_ = o->pace_refreshed_;
}

void SluicePolicy::on_dispatch(const PickRequest& req, size_t endpoint, Time now) {
  cursor_ = endpoint + 1;
  if (!req.adapter.empty()) {
    if (recent_adapters_.size() <= endpoint) recent_adapters_.resize(endpoint + 1);
    recent_adapters_[endpoint].note(adapter_key(req.adapter));
  }
  if (embedding(req)) return;
  // This request is the one evaluate() last saw (its cached prefix and continuation are known).
  const bool evaluated = req.text.data() == last_text_ && req.text.size() == last_text_size_;
  if (last_key_ != 0 && evaluated) demand_.note(last_key_, now);
  if (evaluated) pace_share_ = next_pace_share_;
  if (req.input_tokens > 0) mean_prompt_ = 0.95 * mean_prompt_ + 0.05 * static_cast<double>(req.input_tokens);
  mean_output_ = 0.95 * mean_output_ + 0.05 * output_of(req);
  if (!oracle_) {
    prefix_.learn(req, endpoint);
    continuation_ += ((evaluated && last_continues_ ? 1.0 : 0.0) - continuation_) / 128.0;
    const std::span<const uint64_t> blocks = prefix_.learned_blocks();
    if (!blocks.empty()) ends_.note(blocks.back(), req.text, blocks.size(), prefix_.block_chars(), now);
  }
}

void SluicePolicy::explain(const PickRequest& req, std::span<const EndpointView> endpoints, Time now,
                           std::vector<Explanation>& out) {
  evaluate<true>(req, endpoints, now);
  out.clear();
  const Pace unknown{};
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const Eval& e = evals_[i];
    const Pace& fit = endpoints[i].index < pace_.size() ? pace_[endpoints[i].index] : unknown;
    out.push_back({endpoints[i].index,
                   {{"cost_ms", e.cost.total()},
                    {"ttft_ms", e.cost.ttft_ms},
                    {"frontend_ms", params_.front_end_ms},  // F in ttft_ms (header)
                    {"decode_ms", e.cost.decode_ms},
                    {"interference_ms", e.cost.interference_ms},
                    {"prefill_imposed_ms", e.cost.prefill_imposed_ms},
                    {"kv_risk_ms", e.cost.kv_ms},
                    {"adapter_ms", e.cost.adapter_ms},
                    {"eviction_ms", e.cost.eviction_ms},
                    {"copy_credit_ms", e.cost.copy_credit_ms},
                    {"copy_users", e.copy_users},
                    {"followup_ms", e.cost.followup_ms},
                    {"followups", e.in.followups},
                    {"arrivals_per_s", e.in.arrivals_per_ms * 1000},
                    {"itl_ms", e.itl_ms},
                    {"prefill_duty", e.in.prefill_duty},
                    {"pace_share", e.in.pace_share},
                    // the endpoint's step times relative to the pool's (header, pace; 1 = as the profile)
                    {"pace", pace_of(endpoints[i].index)},
                    // k: its TTFT's scheduled part at the pool's own prefill pace for its size (header; 1: as the profile)
                    {"ttft_factor", ttft_factor_of(e, pace_of(endpoints[i].index))},
                    // its fit: log R (a_e), its standard error and its decayed sample count
                    {"pace_log_r", fit.log_r},
                    {"pace_se", fit.se},
                    {"pace_samples", fit.samples},
                    // its streams' ITL over the ITL expected at their dispatch (header, the SLO; 1: as the model)
                    {"itl_calibration", itl_calibration_of(endpoints[i].index)},
                    {"meets_slo", e.meets_slo ? 1.0 : 0.0},
                    {"ttft_target_ms", e.ttft_target_ms},
                    {"itl_target_ms", e.itl_target_ms},
                    // 0 where it meets the SLO: shed 2 found the batch's expected new misses outweigh it.
                    {"serves", e.serves ? 1.0 : 0.0},
                    {"queue_tokens", e.in.queue_tokens},
                    {"queue_pairs", e.in.queue_pairs},
                    {"decoding", e.in.decoding},
                    {"queued", e.in.queued},
                    {"kv_read_tokens", e.in.kv_read},
                    {"remaining_tokens", e.in.remaining},
                    {"cached_tokens", e.in.cached},
                    {"uncached_tokens", e.in.input - e.in.cached},
                    {"kv_usage", e.in.kv_usage},
                    {"fresh", e.fresh ? 1.0 : 0.0}}});
  }
}

}  // namespace sluice
