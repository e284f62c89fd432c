#include "core/admission/admission_queue.h"

#include <algorithm>

namespace sluice {

Duration QueueConfig::ttl_for(int priority) const {
  for (const auto& [p, ttl] : ttl_by_priority)
    if (p == priority) return ttl;
  return default_ttl;
}

int effective_priority(int tenant_priority, std::optional<int64_t> requested) {
  if (!requested) return tenant_priority;
  return static_cast<int>(std::clamp<int64_t>(*requested, INT32_MIN, tenant_priority));
}

AdmissionQueue::AdmissionQueue(QueueConfig config, AdmissionCounters* counters)
    : config_(std::move(config)), counters_(counters) {}

AdmissionQueue::Band& AdmissionQueue::band_for(int priority) {
  auto it = bands_.find(priority);
  if (it != bands_.end()) return it->second;
  Band& b = bands_[priority];
  b.priority = priority;
  b.ttl = config_.ttl_for(priority);
  b.vtc = VirtualTokenCounter(config_.vtc);
  return b;
}

EnqueueResult AdmissionQueue::enqueue(const QueueRequest& req, bool pool_saturated, Time now,
                                      AdmissionRng& rng) {
  EnqueueResult r;
  std::unique_lock lock(mu_);
  if (req.priority < 0 && pool_saturated) {
    lock.unlock();
    r.denial = shed_denial(config_.retry_base, rng, config_.jitter);
  } else if (requests_ + 1 > config_.max_requests || bytes_ + req.bytes > config_.max_bytes) {
    lock.unlock();
    r.denial = queue_full_denial(config_.retry_base, rng, config_.jitter);
  }
  if (r.denial) {
    if (counters_ != nullptr) counters_->reject(r.denial->reason);
    return r;
  }
  Band& band = band_for(req.priority);
  const Ticket ticket = next_ticket_++;
  auto& fifo = band.tenants[req.tenant];
  const bool was_idle = fifo.empty();
  band.arrival.push_back(ticket);
  fifo.push_back(Entry{ticket, req.cookie, req.tenant, req.weight, req.input_tokens, req.bytes, now,
                       now + band.ttl, std::prev(band.arrival.end())});
  index_.emplace(ticket, Location{&band, std::prev(fifo.end())});
  if (was_idle) band.vtc.on_backlogged(req.tenant);
  band.requests += 1;
  band.bytes += req.bytes;
  requests_ += 1;
  bytes_ += req.bytes;
  r.ticket = ticket;
  r.deadline = now + band.ttl;
  return r;
}

AdmissionQueue::Entry AdmissionQueue::take(Band& band, std::list<Entry>::iterator it) {
  Entry e = std::move(*it);
  auto fifo_it = band.tenants.find(e.tenant);
  fifo_it->second.erase(it);
  if (fifo_it->second.empty()) {
    band.vtc.on_idle(e.tenant);
    band.tenants.erase(fifo_it);
  }
  band.arrival.erase(e.arrival_pos);
  index_.erase(e.ticket);
  band.requests -= 1;
  band.bytes -= e.bytes;
  requests_ -= 1;
  bytes_ -= e.bytes;
  return e;
}

bool AdmissionQueue::remove(Ticket ticket) {
  std::lock_guard lock(mu_);
  auto it = index_.find(ticket);
  if (it == index_.end()) return false;
  take(*it->second.band, it->second.entry);
  if (counters_ != nullptr) counters_->cancelled_queued.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void AdmissionQueue::collect_expired(Time now) {
  for (auto& [priority, band] : bands_) {
    while (!band.arrival.empty()) {
      const Location& loc = index_.at(band.arrival.front());
      if (loc.entry->deadline > now) break;
      expired_.push_back(Expired{take(band, loc.entry), priority});
    }
  }
}

std::optional<Dispatch> AdmissionQueue::pop_next(Time now) {
  return pop_next(now, {});
}

std::optional<Dispatch> AdmissionQueue::pop_next(Time now,
                                                 const std::function<bool(TenantId, uintptr_t)>& eligible) {
  std::lock_guard lock(mu_);
  collect_expired(now);
  for (auto& [priority, band] : bands_) {
    // A tenant's entries are FIFO, but an entry the filter refuses (its pool is full) does not
    // block the tenant's entries for other pools: the first eligible one among its first
    // kLookahead entries goes.
    std::list<Entry>::iterator chosen;
    const std::optional<TenantId> tenant =
        eligible ? band.vtc.next_if([&, &b = band](TenantId t) {
          auto& f = b.tenants.at(t);
          size_t looked = 0;
          for (auto it = f.begin(); it != f.end() && looked < kLookahead; ++it, ++looked)
            if (eligible(t, it->cookie)) {
              chosen = it;
              return true;
            }
          return false;
        })
                 : band.vtc.next();
    if (!tenant) continue;
    auto& fifo = band.tenants.at(*tenant);
    if (!eligible) chosen = fifo.begin();
    // Charge before take(): if this empties the tenant's queue, the lift floor it leaves behind
    // must include this dispatch.
    band.vtc.charge_input(*tenant, chosen->input_tokens, chosen->weight);
    Entry e = take(band, chosen);
    if (counters_ != nullptr) counters_->dispatched.fetch_add(1, std::memory_order_relaxed);
    return Dispatch{e.ticket, e.cookie, e.tenant, priority, now - e.enqueued};
  }
  return std::nullopt;
}

std::vector<QueueExit> AdmissionQueue::expire(Time now, AdmissionRng& rng) {
  std::vector<Expired> gone;
  {
    std::lock_guard lock(mu_);
    collect_expired(now);
    gone.swap(expired_);
  }
  std::vector<QueueExit> out;
  out.reserve(gone.size());
  for (auto& x : gone) {
    const Duration waited = now - x.entry.enqueued;
    out.push_back(QueueExit{x.entry.ticket, x.entry.cookie, x.entry.tenant, x.priority, waited,
                            queue_timeout_denial(waited, config_.retry_base, rng, config_.jitter)});
    if (counters_ != nullptr) counters_->reject(RejectReason::queue_timeout);
  }
  return out;
}

std::optional<Time> AdmissionQueue::next_deadline() const {
  std::lock_guard lock(mu_);
  std::optional<Time> best;
  for (const auto& [priority, band] : bands_) {
    if (band.arrival.empty()) continue;
    const Time d = index_.at(band.arrival.front()).entry->deadline;
    if (!best || d < *best) best = d;
  }
  if (!expired_.empty()) best = Time::min();  // already due
  return best;
}

void AdmissionQueue::charge_output(TenantId tenant, int priority, int64_t tokens, double weight) {
  std::lock_guard lock(mu_);
  band_for(priority).vtc.charge_output(tenant, tokens, weight);
}

size_t AdmissionQueue::size() const {
  std::lock_guard lock(mu_);
  return requests_;
}

size_t AdmissionQueue::bytes() const {
  std::lock_guard lock(mu_);
  return bytes_;
}

std::vector<BandDepth> AdmissionQueue::band_depths() const {
  std::lock_guard lock(mu_);
  std::vector<BandDepth> out;
  out.reserve(bands_.size());
  for (const auto& [priority, band] : bands_) out.push_back({priority, band.requests, band.bytes});
  return out;
}

double AdmissionQueue::vtc_counter(int priority, TenantId tenant) const {
  std::lock_guard lock(mu_);
  auto it = bands_.find(priority);
  return it == bands_.end() ? 0.0 : it->second.vtc.counter(tenant);
}

}  // namespace sluice
