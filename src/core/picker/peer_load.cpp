#include "core/picker/peer_load.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>

namespace sluice {

PeerEndpointLoad PeerEndpointLoad::of(const EndpointLoad& l) {
  PeerEndpointLoad p;
  p.in_flight = l.in_flight;
  p.prefill_requests = l.prefill_requests;
  p.prefill_tokens = l.prefill_tokens;
  p.prefill_pairs = l.prefill_pairs;
  p.decode_tokens = l.decode_tokens;
  p.live_context_tokens = l.live_context_tokens;
  p.context_tokens = l.context_tokens;
  p.input_tokens_total = l.input_tokens_total;
  p.predicted_cached_tokens_total = l.predicted_cached_tokens_total;
  p.picks_total = l.picks_total;
  return p;
}

uint64_t peer_endpoint_key(std::string_view address) { return XXH3_64bits(address.data(), address.size()); }

PeerLoad::PeerLoad(std::vector<uint64_t> keys, std::string self, Options options)
    : keys_(std::move(keys)), self_(std::move(self)), options_(options), sum_(keys_.size()),
      picks_at_scrape_(keys_.size(), 0) {
  peers_.reserve(std::min<size_t>(options_.max_peers, 64));
  for (size_t e = 0; e < keys_.size(); ++e) index_.emplace(keys_[e], e);
}

namespace {
constexpr int64_t kMaxPeerTotal = int64_t{1} << 60;

bool valid(const PeerEndpointLoad& l) {
  const auto ok = [](int64_t v) { return v >= 0 && static_cast<uint64_t>(v) <= kMaxPeerValue; };
  return ok(l.in_flight) && ok(l.prefill_requests) && ok(l.prefill_tokens) && ok(l.decode_tokens) &&
         ok(l.live_context_tokens) && ok(l.context_tokens) && ok(l.input_tokens_total) &&
         ok(l.predicted_cached_tokens_total) && ok(l.picks_total) && l.prefill_requests <= l.in_flight &&
         std::isfinite(l.prefill_pairs) && l.prefill_pairs >= 0 && l.prefill_pairs <= 1e24;
}
}  // namespace

void PeerLoad::add(size_t e, const PeerEndpointLoad& l, int sign) {
  PeerEndpointLoad& s = sum_[e];
  s.in_flight += sign * l.in_flight;
  s.prefill_requests += sign * l.prefill_requests;
  s.prefill_tokens += sign * l.prefill_tokens;
  s.prefill_pairs = std::max(0.0, s.prefill_pairs + sign * l.prefill_pairs);
  s.decode_tokens += sign * l.decode_tokens;
  s.live_context_tokens += sign * l.live_context_tokens;
  s.context_tokens += sign * l.context_tokens;
}

PeerLoad::Applied PeerLoad::apply(std::string_view gateway, uint64_t instance, uint64_t seq, const PeerPoolReport& report,
                                  Time now) {
  if (gateway == self_) {
    ++counters_.own;
    return Applied::own;
  }
  if (report.shed_work_total_ms < 0 || static_cast<uint64_t>(report.shed_work_total_ms) > kMaxPeerValue) {
    ++counters_.bad_values;
    return Applied::bad_value;
  }
  // The report as a full per-endpoint vector (omitted endpoints: nothing in flight, totals unchanged).
  scratch_.assign(keys_.size(), PeerEndpointLoad{});
  listed_.assign(keys_.size(), 0);
  auto& listed = listed_;
  for (const auto& r : report.endpoints) {
    if (!valid(r.load)) {
      ++counters_.bad_values;
      return Applied::bad_value;
    }
    const auto it = index_.find(r.key);
    if (it == index_.end()) {
      ++counters_.unknown_endpoints;
      continue;
    }
    const size_t e = it->second;
    scratch_[e] = r.load;
    listed[e] = true;
  }
  auto p = std::find_if(peers_.begin(), peers_.end(), [&](const Peer& x) { return x.gateway == gateway; });
  if (p != peers_.end() && p->instance == instance && seq <= p->seq) {
    ++counters_.duplicates;
    return Applied::duplicate;
  }
  if (p == peers_.end()) {
    expire(now);
    if (peers_.size() >= options_.max_peers) {
      ++counters_.refused_peers;
      return Applied::too_many_peers;
    }
    Peer fresh;
    fresh.gateway = std::string(gateway);
    fresh.instance = instance;
    fresh.load.assign(keys_.size(), PeerEndpointLoad{});
    // First heard: its totals so far are its history, not new dispatches (nor new refusals).
    fresh.shed_total = report.shed_work_total_ms;
    for (size_t e = 0; e < keys_.size(); ++e)
      if (listed[e]) {
        fresh.load[e].input_tokens_total = scratch_[e].input_tokens_total;
        fresh.load[e].predicted_cached_tokens_total = scratch_[e].predicted_cached_tokens_total;
        fresh.load[e].picks_total = scratch_[e].picks_total;
      }
    peers_.push_back(std::move(fresh));
    p = peers_.end() - 1;
  } else if (p->instance != instance) {
    // The peer restarted: its old in-flight load is gone, its totals start again from 0.
    for (size_t e = 0; e < keys_.size(); ++e) {
      add(e, p->load[e], -1);
      p->load[e] = PeerEndpointLoad{};
    }
    p->shed_total = 0;
    p->instance = instance;
  }
  // Cumulative increments; a total that went down restarted from 0.
  // Saturating at kMaxPeerTotal: a hostile publisher alternating totals must not overflow them.
  const auto inc = [](int64_t& sum, int64_t now_v, int64_t last) {
    sum = std::min(kMaxPeerTotal, sum + (now_v >= last ? now_v - last : now_v));
  };
  for (size_t e = 0; e < keys_.size(); ++e) {
    PeerEndpointLoad& old = p->load[e];
    PeerEndpointLoad next = scratch_[e];
    if (!listed[e]) {  // idle; its totals as last reported
      next.input_tokens_total = old.input_tokens_total;
      next.predicted_cached_tokens_total = old.predicted_cached_tokens_total;
      next.picks_total = old.picks_total;
    }
    add(e, old, -1);
    add(e, next, +1);
    inc(sum_[e].input_tokens_total, next.input_tokens_total, old.input_tokens_total);
    inc(sum_[e].predicted_cached_tokens_total, next.predicted_cached_tokens_total, old.predicted_cached_tokens_total);
    inc(sum_[e].picks_total, next.picks_total, old.picks_total);
    old = next;
  }
  inc(shed_work_pending_ms_, report.shed_work_total_ms, p->shed_total);
  p->shed_total = report.shed_work_total_ms;
  p->seq = seq;
  p->heard = now;
  next_expiry_ = std::min(next_expiry_, now + options_.ttl);
  ++counters_.applied;
  return Applied::ok;
}

void PeerLoad::remove(size_t i) {
  for (size_t e = 0; e < keys_.size(); ++e) add(e, peers_[i].load[e], -1);
  peers_.erase(peers_.begin() + static_cast<std::ptrdiff_t>(i));
  ++counters_.expired;
}

void PeerLoad::expire(Time now) {
  if (peers_.empty() || now < next_expiry_) return;
  Time next = Time::max();
  for (size_t i = peers_.size(); i-- > 0;) {
    if (now - peers_[i].heard >= options_.ttl) remove(i);
    else next = std::min(next, peers_[i].heard + options_.ttl);
  }
  next_expiry_ = next;
}

void PeerLoad::add_to(size_t e, EndpointLoad& l) const {
  if (e >= sum_.size()) return;
  const PeerEndpointLoad& s = sum_[e];
  l.in_flight += s.in_flight;
  l.prefill_requests += s.prefill_requests;
  l.prefill_tokens += s.prefill_tokens;
  l.prefill_pairs += s.prefill_pairs;
  l.decode_tokens += s.decode_tokens;
  l.live_context_tokens += s.live_context_tokens;
  l.context_tokens += s.context_tokens;
  l.input_tokens_total += s.input_tokens_total;
  l.predicted_cached_tokens_total += s.predicted_cached_tokens_total;
  l.assigned_since_scrape += std::max<int64_t>(0, s.picks_total - picks_at_scrape_[e]);
}

void PeerLoad::on_scrape(size_t e) {
  if (e < sum_.size()) picks_at_scrape_[e] = sum_[e].picks_total;
}

}  // namespace sluice
