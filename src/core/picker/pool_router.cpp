#include "core/picker/pool_router.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <utility>

#include "core/json_escape.h"
#include "core/picker/peer_report.h"
#include "core/picker/prefix_tracker.h"
#include "core/picker/scorers/load_estimate.h"

namespace sluice {

DispatchGuard& DispatchGuard::operator=(DispatchGuard&& o) noexcept {
  if (this != &o) {
    release();
    router_ = std::exchange(o.router_, nullptr);
    endpoint_ = o.endpoint_;
    prefill_ = o.prefill_;
    pairs_ = o.pairs_;
    seq_ = o.seq_;
    decode_ = o.decode_;
    context_ = o.context_;
    live_ = o.live_;
    decoding_ = o.decoding_;
    decode_since_ = o.decode_since_;
    stream_end_ = o.stream_end_;
    prefilled_at_ = o.prefilled_at_;
    streamed_ = o.streamed_;
  }
  return *this;
}

void DispatchGuard::on_first_token(Time now) { move_to_decode(now, now != Time::min(), -1); }

void DispatchGuard::on_whole_answer(Time now, int64_t tokens) {
  move_to_decode(now, false, std::max<int64_t>(0, tokens));
  on_tokens(tokens);
}

void DispatchGuard::move_to_decode(Time now, bool sample, int64_t whole_tokens) {
  if (!router_ || decoding_) return;
  decoding_ = true;
  prefilled_at_ = router_->move_to_decode(endpoint_, prefill_, pairs_, seq_, now, sample, whole_tokens);
  if (whole_tokens < 0 && now != Time::min()) decode_since_ = now;
  prefill_ = 0;
  pairs_ = 0;
}

void DispatchGuard::on_tokens(int64_t n) {
  if (!router_ || n <= 0) return;
  if (!decoding_) on_first_token(Time::min());
  n = std::min(n, decode_);
  if (n <= 0) return;
  decode_ -= n;
  live_ += n;
  streamed_ += n;
  router_->consume_decode(endpoint_, n);
}

void DispatchGuard::release() {
  if (!router_) return;
  router_->release(*this);
  router_ = nullptr;
}

PoolRouter::PoolRouter(const PoolConfig& config, std::unique_ptr<Policy> policy)
    : config_(config), policy_(std::move(policy)) {
  endpoints_.reserve(config_.endpoints.size());
  for (const auto& e : config_.endpoints) endpoints_.emplace_back().config = e;
  policy_->on_endpoints_reset(endpoints_.size());
}

PoolRouter::~PoolRouter() = default;

bool PoolRouter::is_stale(const Endpoint& ep, Time now) const {
  return !ep.signals.present || now - ep.signals.scraped_at > config_.scrape.stale_after;
}

void PoolRouter::build_views(Time now) {
  views_.clear();
  if (peer_) {
    peer_->expire(now);
    merged_.resize(endpoints_.size());
  }
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    auto& ep = endpoints_[i];
    if (!ep.healthy) continue;
    advance_whole_answers(ep, now);
    count_whole_tokens(ep, now);
    const EndpointLoad* load = &ep.load;
    if (peer_) {  // merge: own + the live peers' (peer_load.h)
      merged_[i] = ep.load;
      peer_->add_to(i, merged_[i]);
      load = &merged_[i];
    }
    views_.push_back(EndpointView{i, ep.config.name, is_stale(ep, now), &ep.signals, load});
  }
}

std::vector<Candidate> PoolRouter::rank(const PickRequest& req, Time now) {
  std::vector<Candidate> out;
  std::lock_guard lock(mu_);
  last_now_ = std::max(last_now_, now);
  build_views(now);
  if (views_.empty()) return out;
  out.reserve(views_.size());  // one allocation, not one per doubling
  if (PrefixTracker* t = policy_->prefix_tracker()) t->at(now);
  if (peer_)
    if (const double w = peer_->take_shed_work_ms(); w > 0) policy_->on_peer_shed(w, now);
  policy_->rank(req, views_, now, out);
  // The hard in-flight cap is the gateway's own: an endpoint at it comes after every endpoint below
  // it, even those the policy found saturated (a tier of its own: were the two one tier, the
  // policy's order inside it could put an endpoint at the cap first), and is marked saturated.
  bool capped = false, saturated = false;
  for (auto& c : out) {
    saturated |= c.saturated;
    if (at_cap(c.endpoint)) c.saturated = capped = true;
  }
  if (saturated || capped) {
    const auto below = std::stable_partition(out.begin(), out.end(), [](const Candidate& c) { return !c.saturated; });
    if (capped) std::stable_partition(below, out.end(), [this](const Candidate& c) { return !at_cap(c.endpoint); });
  }
  return out;
}

size_t PoolRouter::first_below_cap(std::span<const Candidate> ranked, size_t i) const {
  while (i < ranked.size() && at_cap(ranked[i].endpoint)) ++i;
  return i;
}

DispatchGuard PoolRouter::place(const PickRequest& req, std::span<const Candidate> ranked, size_t& i, Time now,
                                AtCap all_at_cap) {
  std::lock_guard lock(mu_);
  if (const size_t j = first_below_cap(ranked, i); j < ranked.size()) i = j;
  else if (all_at_cap == AtCap::refuse) return {};
  return dispatch_locked(req, ranked[i], now);
}

bool PoolRouter::any_below_cap(std::span<const Candidate> ranked, size_t i) const {
  std::lock_guard lock(mu_);
  return first_below_cap(ranked, i) < ranked.size();
}

void PoolRouter::on_shed(std::span<const Candidate> ranked, Time now) {
  if (ranked.empty()) return;
  std::lock_guard lock(mu_);
  policy_->on_shed(ranked.front(), now);
  if (ranked.front().shed) shed_work_total_ms_ += ranked.front().shed_work_ms;
}

DispatchGuard PoolRouter::dispatch(const PickRequest& req, const Candidate& chosen, Time now) {
  std::lock_guard lock(mu_);
  return dispatch_locked(req, chosen, now);
}

DispatchGuard PoolRouter::dispatch_locked(const PickRequest& req, const Candidate& chosen, Time now) {
  DispatchGuard g;
  Endpoint& ep = endpoints_.at(chosen.endpoint);
  advance_batch_area(ep, now);
  auto& load = ep.load;
  g.router_ = this;
  g.endpoint_ = chosen.endpoint;
  g.prefill_ = std::max<int64_t>(0, req.input_tokens - chosen.predicted_cached_tokens);
  g.pairs_ = static_cast<double>(g.prefill_) *
             (static_cast<double>(std::max<int64_t>(0, chosen.predicted_cached_tokens)) + static_cast<double>(g.prefill_) / 2);
  load.prefill_pairs += g.pairs_;
  g.decode_ = std::max<int64_t>(0, req.max_output_tokens);
  g.context_ = std::max<int64_t>(0, req.input_tokens) + g.decode_;
  g.live_ = std::max<int64_t>(0, req.input_tokens);
  load.live_context_tokens += g.live_;
  load.in_flight += 1;
  load.prefill_requests += 1;
  if (ep.scrape_window.open) {
    auto& w = ep.scrape_window;
    w.own_in_flight_max = std::max(w.own_in_flight_max, load.in_flight);
    w.own_prefill_max = std::max(w.own_prefill_max, load.prefill_requests);
  }
  load.context_tokens += g.context_;
  load.input_tokens_total += std::max<int64_t>(0, req.input_tokens);
  load.predicted_cached_tokens_total += std::max<int64_t>(0, chosen.predicted_cached_tokens);
  load.prefill_tokens += g.prefill_;
  g.seq_ = next_seq_++;
  const bool head = ep.prefill_fifo.empty();
  // Own requests decoding there (this one is counted in flight and prefilling both).
  const bool mid_step = head && own_batch(ep).decoding > 0;
  // A whole answer's first token is never seen; an embedding's answer is its prefill.
  ep.prefill_fifo.push_back({g.seq_, g.prefill_, g.pairs_, req.whole_answer && req.kind != ApiKind::embedding, g.decode_, now});
  if (head) set_head(ep, now, true, mid_step, true);
  last_now_ = std::max(last_now_, now);
  load.decode_tokens += g.decode_;
  load.assigned_since_scrape += 1;
  load.picks_total += 1;
  if (PrefixTracker* t = policy_->prefix_tracker()) {
    t->at(now);
    if (t->events() && chosen.endpoint < t->sources().size()) {
      // The source of this request's prediction: the last match(), normally this request's rank.
      const auto src = static_cast<size_t>(t->sources()[chosen.endpoint]);
      t->events()->count(chosen.endpoint, [&](KvEndpointCounters& c) {
        c.prompt_tokens[src] += static_cast<uint64_t>(std::max<int64_t>(0, req.input_tokens));
        c.predicted_tokens[src] += static_cast<uint64_t>(std::max<int64_t>(0, chosen.predicted_cached_tokens));
      });
    }
  }
  policy_->on_dispatch(req, chosen.endpoint, now);
  return g;
}

PrefillSample PoolRouter::own_batch(const Endpoint& ep) {
  PrefillSample b;
  b.decoding = static_cast<double>(std::max<int64_t>(0, ep.load.in_flight - ep.load.prefill_requests));
  b.kv_read = static_cast<double>(std::max<int64_t>(0, ep.load.live_context_tokens));
  if (ep.signals.present) b.kv_usage = ep.signals.kv_usage;
  return b;
}

void PoolRouter::advance_batch_area(Endpoint& ep, Time now) {
  BatchArea& a = ep.area;
  if (now > a.at) {
    const PrefillSample b = own_batch(ep);
    const double ms = to_millis(now - a.at);
    a.decoding_ms += b.decoding * ms;
    a.kv_read_ms += b.kv_read * ms;
  }
  a.at = std::max(a.at, now);
}

DecodeSample PoolRouter::decode_sample(Endpoint& ep, double tokens, double elapsed_ms, Time now, const BatchArea* from) {
  advance_batch_area(ep, now);
  const PrefillSample b = own_batch(ep);
  DecodeSample d;
  d.tokens = tokens;
  d.elapsed_ms = elapsed_ms;
  d.decoding = b.decoding;
  d.kv_read = b.kv_read;
  if (const double span = from ? to_millis(ep.area.at - from->at) : 0.0; span > 0) {
    d.decoding = std::max(0.0, (ep.area.decoding_ms - from->decoding_ms) / span);
    d.kv_read = std::max(0.0, (ep.area.kv_read_ms - from->kv_read_ms) / span);
  }
  d.kv_usage = b.kv_usage;
  // The others: the peers' decoders (peer_load) and the fresh scrape's running requests no gateway sent.
  const EndpointLoad all = with_peers(ep);
  d.others = std::max(0.0, nonneg(all.in_flight - all.prefill_requests) - b.decoding);
  if (!is_stale(ep, now)) d.others += external_load(ep.signals, ep.load).running;
  return d;
}

void PoolRouter::off_prefill_load(Endpoint& ep, int64_t tokens, double pairs, bool done) {
  ep.load.prefill_requests -= 1;
  ep.load.prefill_tokens -= tokens;
  ep.load.prefill_pairs = std::max(0.0, ep.load.prefill_pairs - pairs);
  if (done) {
    ep.prefilled += static_cast<double>(std::max<int64_t>(0, tokens));
    ep.prefilled_pairs += std::max(0.0, pairs);
  }
}

std::deque<PoolRouter::Endpoint::Pending>::iterator PoolRouter::pending(Endpoint& ep, uint64_t seq) {
  auto& fifo = ep.prefill_fifo;
  auto it = std::lower_bound(fifo.begin(), fifo.end(), seq, [](const Endpoint::Pending& p, uint64_t s) { return p.seq < s; });
  return it != fifo.end() && it->seq == seq ? it : fifo.end();
}

void PoolRouter::leave_prefill_queue(Endpoint& ep, std::deque<Endpoint::Pending>::iterator it, Time now, bool known) {
  auto& fifo = ep.prefill_fifo;
  const bool whole = it->whole;
  it->tokens = -1;
  if (it != fifo.begin()) return;  // ended out of order: the head is unchanged
  while (!fifo.empty() && fifo.front().tokens < 0) fifo.pop_front();
  // After a whole answer the next head's start is not known (it began when the answer's prefill
  // did, long before the answer).
  set_head(ep, now, known && !whole);
}

void PoolRouter::set_head(Endpoint& ep, Time since, bool known, bool mid_step, bool at_dispatch) {
  const auto& fifo = ep.prefill_fifo;
  ep.load.prefill_head_tokens = fifo.empty() ? 0 : fifo.front().tokens;
  ep.load.prefill_head_pairs = fifo.empty() ? 0.0 : fifo.front().pairs;
  ep.load.prefill_head_since = since;
  ep.head_known = known;
  ep.head_mid_step = mid_step;
  ep.head_at_dispatch = at_dispatch;
  ep.head_done_at = Time::max();
  if (fifo.empty() || !fifo.front().whole) return;
  PrefillSample head = own_batch(ep);
  head.mid_step = mid_step;
  head.at_dispatch = at_dispatch;
  head.tokens = static_cast<double>(std::max<int64_t>(0, fifo.front().tokens));
  head.pairs = std::max(0.0, fifo.front().pairs);
  head.behind = static_cast<double>(std::max<int64_t>(0, ep.load.prefill_tokens - fifo.front().tokens));
  const size_t index = static_cast<size_t>(&ep - endpoints_.data());
  const ExpectedPrefill e = policy_->expected_prefill(index, head);
  if (!(e.ms >= 0 && e.ms < 1e9)) return;
  ep.head_done_at = since + std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(e.ms));
  ep.head_carried = std::max(0.0, e.carried);
}

void PoolRouter::advance_whole_answers(Endpoint& ep, Time now) {
  auto& fifo = ep.prefill_fifo;
  while (!fifo.empty() && fifo.front().whole && ep.head_done_at <= now) {
    const Time at = ep.head_done_at;
    double carried = ep.head_carried;
    move_on_whole(ep, fifo.front(), at);
    fifo.pop_front();  // gone from the queue: its guard's ending finds it moved on (pending)
    // The whole answers its steps carried are done with it (FCFS into the step's token budget);
    // a streamed request, or one only partly carried, is the next head.
    while (!fifo.empty()) {
      const Endpoint::Pending& next = fifo.front();
      if (next.tokens >= 0) {
        if (!next.whole || static_cast<double>(next.tokens) > carried) break;
        carried -= static_cast<double>(next.tokens);
        move_on_whole(ep, next, at);
      }
      fifo.pop_front();
    }
    set_head(ep, at, false);
  }
}

void PoolRouter::move_on_whole(Endpoint& ep, const Endpoint::Pending& done, Time at) {
  advance_batch_area(ep, at);
  off_prefill_load(ep, done.tokens, done.pairs, true);
  if (ep.whole_decoding.empty()) {
    ep.whole_counted_at = at;
    ep.whole_steps = 0;
  }
  ep.whole_decoding.push_back(
      {done.seq, std::max<int64_t>(0, done.decode), 0, at, std::max(0.0, to_millis(at - done.dispatched)), ep.area});
}

void PoolRouter::count_whole_tokens(Endpoint& ep, Time now) {
  // At most every 2 ms: a decode step is ~10 ms, and the count is a sum over the decoders.
  if (ep.whole_decoding.empty() || now - ep.whole_counted_at < std::chrono::milliseconds(2)) return;
  advance_batch_area(ep, now);
  const double itl = policy_->expected_itl_ms(static_cast<size_t>(&ep - endpoints_.data()), own_batch(ep));
  if (itl > 0) ep.whole_steps += to_millis(now - ep.whole_counted_at) / itl;
  ep.whole_counted_at = now;
  const auto steps = static_cast<int64_t>(std::min(ep.whole_steps, 1e9));
  if (steps <= 0) return;
  ep.whole_steps -= static_cast<double>(steps);
  for (auto& d : ep.whole_decoding) {
    const int64_t n = std::min(steps, d.bound - d.counted);
    if (n <= 0) continue;
    d.counted += n;
    ep.load.decode_tokens -= n;
    ep.load.live_context_tokens += n;
  }
}

void PoolRouter::settle_whole(Endpoint& ep, uint64_t seq, Time now, int64_t tokens) {
  advance_batch_area(ep, std::max(now, last_now_));
  auto& v = ep.whole_decoding;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].seq != seq) continue;
    if (tokens >= 1 && now > v[i].since) {
      DecodeSample d = decode_sample(ep, static_cast<double>(tokens), to_millis(now - v[i].since), now, &v[i].from);
      d.expected_first_ms = v[i].first_ms;
      policy_->on_decode_done(static_cast<size_t>(&ep - endpoints_.data()), d, now);
    }
    ep.load.decode_tokens += v[i].counted;
    ep.load.live_context_tokens -= v[i].counted;
    v[i] = v.back();
    v.pop_back();
    return;
  }
}

void PoolRouter::release(const DispatchGuard& g) {
  const int64_t prefill = g.prefill_, decode = g.decode_, context = g.context_, live = g.live_;
  const double pairs = g.pairs_;
  const bool decoding = g.decoding_;
  const uint64_t seq = g.seq_;
  std::lock_guard lock(mu_);
  Endpoint& ep = endpoints_[g.endpoint_];
  settle_whole(ep, seq);  // (the batch area advanced to last_now_ first)
  // A streamed decode that ended complete: from its first token to its last, its tokens after the
  // first (one per step) beside the batch as it is now, and the own prefill its steps carried.
  if (decoding && g.decode_since_ != Time::min() && g.stream_end_ > g.decode_since_ && g.streamed_ >= 2) {
    DecodeSample d =
        decode_sample(ep, static_cast<double>(g.streamed_ - 1), to_millis(g.stream_end_ - g.decode_since_), g.stream_end_, nullptr);
    d.prefilled = std::max(0.0, ep.prefilled - g.prefilled_at_);
    d.streamed = true;
    policy_->on_decode_done(g.endpoint_, d, g.stream_end_);
  }
  auto& load = ep.load;
  load.in_flight -= 1;
  // Not in the queue any more: a whole answer the model moved on (its prefill already off the load).
  const auto it = decoding ? ep.prefill_fifo.end() : pending(ep, seq);
  const bool queued = it != ep.prefill_fifo.end();
  if (queued) off_prefill_load(ep, prefill, pairs, false);
  load.context_tokens -= context;
  load.live_context_tokens -= live;
  load.decode_tokens -= decode;
  if (queued) leave_prefill_queue(ep, it, last_now_, true);
}

double PoolRouter::move_to_decode(size_t endpoint, int64_t prefill, double pairs, uint64_t seq, Time now, bool sample,
                                  int64_t whole_tokens) {
  std::lock_guard lock(mu_);
  last_now_ = std::max(last_now_, now);
  Endpoint& ep = endpoints_[endpoint];
  settle_whole(ep, seq, now, whole_tokens);  // its own tokens follow (DispatchGuard::on_tokens)
  // The head's first token, at a known time: how long it was the head is its prefill's pace here.
  if (sample && ep.head_known && !ep.prefill_fifo.empty() && ep.prefill_fifo.front().seq == seq &&
      now > ep.load.prefill_head_since) {
    PrefillSample s = own_batch(ep);
    s.mid_step = ep.head_mid_step;
    s.at_dispatch = ep.head_at_dispatch;
    s.tokens = static_cast<double>(std::max<int64_t>(0, prefill));
    s.pairs = std::max(0.0, pairs);
    s.elapsed_ms = to_millis(now - ep.load.prefill_head_since);
    s.behind = static_cast<double>(std::max<int64_t>(0, ep.load.prefill_tokens - prefill));
    policy_->on_prefill_done(endpoint, s, now);
  }
  const auto it = pending(ep, seq);
  if (it == ep.prefill_fifo.end()) return ep.prefilled;  // a whole answer the model moved on already
  off_prefill_load(ep, prefill, pairs, true);
  leave_prefill_queue(ep, it, last_now_, sample);
  return ep.prefilled;
}

void PoolRouter::consume_decode(size_t endpoint, int64_t n) {
  std::lock_guard lock(mu_);
  advance_batch_area(endpoints_[endpoint], last_now_);
  endpoints_[endpoint].load.decode_tokens -= n;
  endpoints_[endpoint].load.live_context_tokens += n;
}

EndpointLoad PoolRouter::with_peers(const Endpoint& ep) const {
  EndpointLoad all = ep.load;
  if (peer_) peer_->add_to(static_cast<size_t>(&ep - endpoints_.data()), all);
  return all;
}

void PoolRouter::on_scrape_start(size_t endpoint) {
  std::lock_guard lock(mu_);
  auto& ep = endpoints_.at(endpoint);
  const EndpointLoad all = with_peers(ep);
  ep.scrape_window = {true, all.in_flight, all.prefill_requests, ep.load.in_flight, ep.load.prefill_requests,
                      ep.load.assigned_since_scrape};
}

void PoolRouter::update_signals(size_t endpoint, EngineSignals signals) {
  std::lock_guard lock(mu_);
  auto& ep = endpoints_.at(endpoint);
  signals.present = true;
  ep.signals = std::move(signals);
  // The dispatches since the scrape was sent stay counted (on_scrape_start): an engine's gauges move
  // at its next step after a request has reached it, so a snapshot taken while the scrape was on its
  // way has not seen them. (Other clients' requests are found with the window's highest own counts,
  // below: the two err on the same side, the own load counted, none of it taken for another's.)
  auto& w = ep.scrape_window;
  ep.load.assigned_since_scrape = w.open ? std::max<int64_t>(0, ep.load.assigned_since_scrape - w.assigned_at_start) : 0;
  ep.load.scrape_failures_in_row = 0;
  const EndpointLoad all = with_peers(ep);  // own + the live peers', as the policy will see it
  ep.load.in_flight_at_scrape = all.in_flight;
  ep.load.prefill_requests_at_scrape = all.prefill_requests;
  if (w.open) {  // the window's highest (on_scrape_start)
    const int64_t peers_in_flight = all.in_flight - ep.load.in_flight, peers_prefill = all.prefill_requests - ep.load.prefill_requests;
    ep.load.in_flight_at_scrape = std::max({all.in_flight, w.all_in_flight, w.own_in_flight_max + peers_in_flight});
    ep.load.prefill_requests_at_scrape = std::max({all.prefill_requests, w.all_prefill, w.own_prefill_max + peers_prefill});
    w.open = false;
  }
  if (peer_) peer_->on_scrape(endpoint);
  engine_itl_sample(ep, endpoint, ep.signals.scraped_at);
}

// A few scrapes at the default interval (50 ms), a few dozen decode steps: a sample per quarter
// second. Spans of a second learned a half-slow fleet's pace too slowly to matter in its first 20 s
// (fleetsim, whole answers, hot prefix at 200 req/s: 44 req/s of goodput, as without; 60 with these).
constexpr Duration kEngineItlSpan = std::chrono::milliseconds(250);

void PoolRouter::engine_itl_sample(Endpoint& ep, size_t endpoint, Time now) {
  auto& e = ep.engine_itl;
  const double sum_s = ep.signals.itl_sum_s, count = ep.signals.itl_count;
  if (!(sum_s >= 0 && count >= 0 && std::isfinite(sum_s) && std::isfinite(count))) return;
  advance_batch_area(ep, now);
  // The first reading, or counters that went back (the engine restarted): a span starts here.
  if (e.count < 0 || count < e.count || sum_s < e.sum_s || now < e.area.at) {
    e = {sum_s, count, ep.area, ep.prefilled, ep.prefilled_pairs};
    return;
  }
  if (now - e.area.at < kEngineItlSpan) return;
  if (count - e.count >= 1 && sum_s > e.sum_s) {
    DecodeSample d = decode_sample(ep, count - e.count, (sum_s - e.sum_s) * 1000.0, now, &e.area);
    // A span in which the own decoders (their mean over it) made fewer than two tokens each holds
    // mostly the steps before they began (a replica filling up: its prefills ran beside no
    // decoders, and read as a fast pace): no sample.
    if (d.tokens >= 2 * d.decoding) {
      d.engine = true;
      d.prefilled = std::max(0.0, ep.prefilled - e.prefilled);
      d.prefilled_pairs = std::max(0.0, ep.prefilled_pairs - e.prefilled_pairs);
      policy_->on_decode_done(endpoint, d, now);
    }
  }
  e = {sum_s, count, ep.area, ep.prefilled, ep.prefilled_pairs};
}

void PoolRouter::record_scrape_error(size_t endpoint) {
  std::lock_guard lock(mu_);
  endpoints_.at(endpoint).load.scrape_errors_total += 1;
  endpoints_.at(endpoint).load.scrape_failures_in_row += 1;
}

void PoolRouter::set_healthy(size_t endpoint, bool healthy) {
  std::lock_guard lock(mu_);
  endpoints_.at(endpoint).healthy = healthy;
}

int64_t PoolRouter::picks_total(size_t endpoint) const {
  std::lock_guard lock(mu_);
  return endpoints_.at(endpoint).load.picks_total;
}

bool PoolRouter::healthy(size_t endpoint) const {
  std::lock_guard lock(mu_);
  return endpoints_.at(endpoint).healthy;
}

bool PoolRouter::saturated(Time now) const {
  std::lock_guard lock(mu_);
  for (const auto& ep : endpoints_) {
    if (!ep.healthy || in_flight_locked(static_cast<size_t>(&ep - endpoints_.data())) >= config_.max_in_flight_per_endpoint)
      continue;
    if (is_stale(ep, now)) return false;  // unknown load: trust the hard cap only
    if (ep.signals.waiting < config_.saturation_max_waiting && ep.signals.kv_usage < config_.saturation_max_kv_usage)
      return false;
  }
  return true;
}

size_t PoolRouter::adopt_learned(const PoolRouter& old) {
  std::scoped_lock lock(mu_, old.mu_);
  std::vector<int> old_of_new(endpoints_.size(), -1);
  size_t mapped = 0;
  for (size_t e = 0; e < endpoints_.size(); ++e)
    for (size_t o = 0; o < old.endpoints_.size(); ++o)
      if (old.endpoints_[o].config.address.str() == endpoints_[e].config.address.str()) {
        old_of_new[e] = static_cast<int>(o);
        ++mapped;
        break;
      }
  if (mapped == 0) return 0;
  policy_->adopt_endpoints(*old.policy_, old_of_new);
  PrefixTracker* mine = policy_->prefix_tracker();
  const PrefixTracker* theirs = old.policy_->prefix_tracker();
  if (mine == nullptr || theirs == nullptr) return 0;
  mine->adopt(*theirs, old_of_new);
  return mapped;
}

bool PoolRouter::attach_kv_events(std::shared_ptr<KvEventIndex> events) {
  std::lock_guard lock(mu_);
  PrefixTracker* t = policy_->prefix_tracker();
  if (t == nullptr) return false;
  t->attach_events(std::move(events));
  return true;
}

void PoolRouter::share_load(std::string self, PeerLoad::Options options) {
  std::lock_guard lock(mu_);
  std::vector<uint64_t> keys;
  for (const auto& ep : endpoints_) keys.push_back(peer_endpoint_key(ep.config.address.str()));
  reporter_ = std::make_unique<PeerReporter>(keys);
  peer_ = std::make_unique<PeerLoad>(std::move(keys), std::move(self), options);
}

PeerLoad::Applied PoolRouter::apply_peer(std::string_view gateway, uint64_t instance, uint64_t seq,
                                         const PeerPoolReport& report, Time now) {
  std::lock_guard lock(mu_);
  if (!peer_) return PeerLoad::Applied::own;
  return peer_->apply(gateway, instance, seq, report, now);
}

bool PoolRouter::peer_report(Time now, PeerPoolReport& out) {
  std::lock_guard lock(mu_);
  out.pool = config_.name;
  if (!reporter_) {
    out.endpoints.clear();
    return false;
  }
  merged_.resize(endpoints_.size());
  for (size_t e = 0; e < endpoints_.size(); ++e) merged_[e] = endpoints_[e].load;  // own only
  return reporter_->build(merged_, shed_work_total_ms_, now, out);
}

PoolRouter::PeerStats PoolRouter::peer_stats(Time now) {
  std::lock_guard lock(mu_);
  PeerStats s;
  if (!peer_) return s;
  peer_->expire(now);
  s.peers = peer_->peers();
  s.counters = peer_->counters();
  for (size_t e = 0; e < endpoints_.size(); ++e) s.in_flight.push_back(peer_->in_flight(e));
  return s;
}

PoolRouter::Occupancy PoolRouter::occupancy() const {
  std::lock_guard lock(mu_);
  Occupancy o;
  const int64_t cap = config_.max_in_flight_per_endpoint;
  for (size_t e = 0; e < endpoints_.size(); ++e) {
    if (!endpoints_[e].healthy) continue;
    o.capacity += cap;
    o.in_flight += std::min<int64_t>(in_flight_locked(e), cap);
  }
  return o;
}

void PoolRouter::inherit_in_flight(std::weak_ptr<const PoolRouter> old) {
  auto p = old.lock();
  if (!p) return;
  std::scoped_lock lock(mu_, p->mu_);
  predecessor_of_.assign(endpoints_.size(), -1);
  for (size_t e = 0; e < endpoints_.size(); ++e)
    for (size_t o = 0; o < p->endpoints_.size(); ++o)
      if (p->endpoints_[o].config.address.str() == endpoints_[e].config.address.str()) {
        predecessor_of_[e] = static_cast<int>(o);
        break;
      }
  predecessor_ = std::move(old);
}

int64_t PoolRouter::in_flight_total(size_t e) const {
  std::lock_guard lock(mu_);
  return in_flight_locked(e);
}

// Lock order: a router locks its predecessor (never the reverse), so the chain cannot deadlock.
int64_t PoolRouter::in_flight_locked(size_t e) const {
  int64_t n = endpoints_[e].load.in_flight;
  if (e < predecessor_of_.size() && predecessor_of_[e] >= 0)
    if (auto p = predecessor_.lock()) n += p->in_flight_total(static_cast<size_t>(predecessor_of_[e]));
  return n;
}

std::vector<HotPrefix> PoolRouter::hot_prefixes(Time now, size_t n) const {
  std::lock_guard lock(mu_);
  return policy_->hot_prefixes(now, n);
}

std::vector<EndpointSnapshot> PoolRouter::snapshot(Time now) const {
  std::lock_guard lock(mu_);
  std::vector<EndpointSnapshot> out;
  out.reserve(endpoints_.size());
  for (size_t e = 0; e < endpoints_.size(); ++e) {
    const auto& ep = endpoints_[e];
    out.push_back({ep.config.name, ep.config.address.str(), is_stale(ep, now), ep.healthy, ep.signals, ep.load});
    out.back().load.in_flight = in_flight_locked(e);  // streams on a replaced runtime included
    if (double pace = 0, calib = 0; policy_->endpoint_speed(e, pace, calib))
      out.back().pace = pace, out.back().itl_calibration = calib;
  }
  return out;
}

namespace {

void append_number(std::string& out, double v) {
  if (!std::isfinite(v)) out += "null";
  else out += fmt::format("{}", v);
}

}  // namespace

std::string PoolRouter::explain_json(const PickRequest& req, Time now) {
  std::vector<Candidate> ranked = rank(req, now);
  std::vector<Explanation> terms;
  std::string out;
  std::lock_guard lock(mu_);
  build_views(now);
  if (!views_.empty()) policy_->explain(req, views_, now, terms);
  out += "{\"pool\":";
  append_json_string(out, config_.name);
  out += ",\"policy\":";
  append_json_string(out, policy_->name());
  // shed: the policy advises refusing the request, as the drivers' rule reads it for priority 0.
  out += fmt::format(",\"input_tokens\":{},\"shed\":{},\"candidates\":[", req.input_tokens,
                     shed_advised(ranked, 0));
  for (size_t r = 0; r < ranked.size(); ++r) {
    const Candidate& c = ranked[r];
    const Endpoint& ep = endpoints_[c.endpoint];
    if (r) out += ',';
    out += "{\"endpoint\":";
    append_json_string(out, ep.config.name);
    out += fmt::format(",\"rank\":{},\"score\":", r);
    append_number(out, c.score);
    out += fmt::format(",\"predicted_cached_tokens\":{},\"saturated\":{},\"stale\":{}", c.predicted_cached_tokens,
                       c.saturated, is_stale(ep, now));
    if (const PrefixTracker* t = policy_->prefix_tracker(); t && c.endpoint < t->sources().size())
      out += fmt::format(",\"prefix_source\":\"{}\"", KvEventIndex::to_string(t->sources()[c.endpoint]));
    out += fmt::format(",\"in_flight\":{},\"prefill_tokens\":{},\"assigned_since_scrape\":{}", ep.load.in_flight,
                       ep.load.prefill_tokens, ep.load.assigned_since_scrape);
    if (peer_) out += fmt::format(",\"peer_in_flight\":{},\"peer_prefill_tokens\":{}", peer_->in_flight(c.endpoint),
                                  merged_[c.endpoint].prefill_tokens - ep.load.prefill_tokens);
    out += ",\"waiting\":";
    append_number(out, ep.signals.present ? ep.signals.waiting : NAN);
    out += ",\"running\":";
    append_number(out, ep.signals.present ? ep.signals.running : NAN);
    out += ",\"kv_usage\":";
    append_number(out, ep.signals.present ? ep.signals.kv_usage : NAN);
    out += ",\"terms\":{";
    for (const auto& e : terms) {
      if (e.endpoint != c.endpoint) continue;
      for (size_t t = 0; t < e.terms.size(); ++t) {
        if (t) out += ',';
        append_json_string(out, e.terms[t].name);
        out += ':';
        append_number(out, e.terms[t].value);
      }
    }
    out += "}}";
  }
  out += "]}";
  return out;
}

}  // namespace sluice
