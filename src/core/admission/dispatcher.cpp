#include "core/admission/dispatcher.h"

#include <algorithm>

#include "core/picker/pool_router.h"

namespace sluice {

bool pool_has_room(const PoolRouter& router, int64_t promised, int64_t share_in_flight, Time now) {
  const auto occ = router.occupancy();
  if (occ.capacity == 0) return true;  // no healthy endpoint: leave now, the request's path answers 503
  if (router.saturated(now)) return false;
  // share_in_flight already counts the promised requests (FairShare::on_dispatched at the pop).
  return occ.capacity - std::max(occ.in_flight + promised, share_in_flight) > 0;
}

Dispatcher::PoolState& Dispatcher::pool(std::string_view name) {
  auto it = pools_.find(name);
  if (it == pools_.end()) it = pools_.emplace(std::string(name), PoolState{{}, 0, FairShare(fair_)}).first;
  return it->second;
}

void Dispatcher::on_queued(uintptr_t cookie, std::string_view pool_name, TenantId tenant, double weight, int priority,
                           Time now) {
  auto [it, fresh] = entries_.try_emplace(cookie);
  if (!fresh) return;
  it->second = Entry{std::string(pool_name), tenant, priority, State::queued};
  auto& ps = pool(pool_name);
  ++ps.queued[priority];
  ++queued_total_;
  if (fair_.enabled) ps.share.on_queued(tenant, weight, now, priority);
}

void Dispatcher::on_left_queue(uintptr_t cookie, Time now) {
  auto it = entries_.find(cookie);
  if (it == entries_.end() || it->second.state != State::queued) return;
  auto& ps = pool(it->second.pool);
  --ps.queued[it->second.priority];
  --queued_total_;
  if (fair_.enabled) ps.share.on_left_queue(it->second.tenant, now);
  entries_.erase(it);
}

bool Dispatcher::eligible_now(TenantId tenant, uintptr_t cookie, Time now, const RouterOf& router_of) {
  auto it = entries_.find(cookie);
  if (it == entries_.end() || it->second.state != State::queued) return true;  // stale: let it leave the queue
  const PoolRouter* r = router_of(it->second.pool);
  if (r == nullptr) return true;  // unknown pool: the request's own path answers it
  auto& ps = pool(it->second.pool);
  const int64_t share_in_flight = fair_.enabled ? ps.share.total_in_flight() : 0;
  // Room is the same for every entry of a pool within one pop: asked once per pool per pop.
  bool room = false;
  auto cached = std::find_if(room_cache_.begin(), room_cache_.end(), [&](const auto& c) { return c.first == r; });
  if (cached != room_cache_.end()) {
    room = cached->second;
  } else {
    room = pool_has_room(*r, ps.promised, share_in_flight, now);
    room_cache_.emplace_back(r, room);
  }
  if (!room) return false;
  if (!fair_.enabled) return true;
  const auto occ = r->occupancy();
  if (occ.capacity == 0) return true;  // no healthy endpoint: no slots to share, the request is answered
  return ps.share.may_dispatch(tenant, occ.capacity, std::max(occ.in_flight + ps.promised, share_in_flight), now);
}

bool Dispatcher::popped(uintptr_t cookie) {
  auto it = entries_.find(cookie);
  if (it == entries_.end() || it->second.state != State::queued) return false;
  it->second.state = State::popped;
  auto& ps = pool(it->second.pool);
  --ps.queued[it->second.priority];
  --queued_total_;
  ++ps.promised;
  if (fair_.enabled) ps.share.on_dispatched(it->second.tenant);
  return true;
}

bool Dispatcher::admit_now(uintptr_t cookie, std::string_view pool_name, TenantId tenant, double weight, int priority,
                           Time now, const PoolRouter& router) {
  if (queued_total_ > 0 || entries_.contains(cookie)) return false;
  auto& ps = pool(pool_name);
  const int64_t share_in_flight = fair_.enabled ? ps.share.total_in_flight() : 0;
  if (!pool_has_room(router, ps.promised, share_in_flight, now)) return false;
  if (fair_.enabled) {
    const auto occ = router.occupancy();
    ps.share.on_queued(tenant, weight, now, priority);
    if (!ps.share.may_dispatch(tenant, occ.capacity, std::max(occ.in_flight + ps.promised, share_in_flight), now)) {
      ps.share.on_left_queue(tenant, now);
      return false;
    }
    ps.share.on_dispatched(tenant);
  }
  entries_.emplace(cookie, Entry{std::string(pool_name), tenant, priority, State::popped});
  ++ps.promised;
  return true;
}

void Dispatcher::on_placed(uintptr_t cookie) {
  auto it = entries_.find(cookie);
  if (it == entries_.end() || it->second.state != State::popped) return;
  it->second.state = State::placed;
  --pool(it->second.pool).promised;
}

void Dispatcher::on_finished(uintptr_t cookie, Time now) {
  auto it = entries_.find(cookie);
  if (it == entries_.end()) return;
  if (it->second.state == State::queued) {
    on_left_queue(cookie, now);
    return;
  }
  on_placed(cookie);
  if (fair_.enabled) pool(it->second.pool).share.on_finished(it->second.tenant, now);
  entries_.erase(it);
}

void Dispatcher::for_each_depth(const std::function<void(std::string_view, int, int64_t)>& f) const {
  for (const auto& [name, ps] : pools_)
    for (const auto& [prio, n] : ps.queued) f(name, prio, n);
}

int64_t Dispatcher::promised(std::string_view name) const {
  auto it = pools_.find(name);
  return it == pools_.end() ? 0 : it->second.promised;
}

const FairShare* Dispatcher::fair_share(std::string_view name) const {
  auto it = pools_.find(name);
  return it == pools_.end() || !fair_.enabled ? nullptr : &it->second.share;
}

}  // namespace sluice
