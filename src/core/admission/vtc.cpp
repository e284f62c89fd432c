#include "core/admission/vtc.h"

#include <algorithm>

namespace sluice {

void VirtualTokenCounter::ensure(TenantId t) {
  if (t >= counters_.size()) {
    counters_.resize(t + 1, 0.0);
    backlogged_.resize(t + 1, false);
  }
}

void VirtualTokenCounter::on_backlogged(TenantId t) {
  ensure(t);
  if (backlogged_[t]) return;
  const double floor = order_.empty() ? last_departed_ : order_.begin()->first;
  counters_[t] = std::max(counters_[t], floor);
  backlogged_[t] = true;
  order_.emplace(counters_[t], t);
}

void VirtualTokenCounter::on_idle(TenantId t) {
  if (!is_backlogged(t)) return;
  order_.erase({counters_[t], t});
  backlogged_[t] = false;
  if (order_.empty()) last_departed_ = counters_[t];
}

std::optional<TenantId> VirtualTokenCounter::next() const {
  if (order_.empty()) return std::nullopt;
  return order_.begin()->second;
}

void VirtualTokenCounter::add(TenantId t, double amount) {
  ensure(t);
  if (amount <= 0) return;
  if (backlogged_[t]) {
    auto node = order_.extract({counters_[t], t});
    counters_[t] += amount;
    node.value().first = counters_[t];
    order_.insert(std::move(node));
  } else {
    counters_[t] += amount;
  }
}

void VirtualTokenCounter::charge_input(TenantId t, int64_t tokens, double weight) {
  add(t, w_.w_in * static_cast<double>(tokens) / (weight > 0 ? weight : 1.0));
}

void VirtualTokenCounter::charge_output(TenantId t, int64_t tokens, double weight) {
  add(t, w_.w_out * static_cast<double>(tokens) / (weight > 0 ? weight : 1.0));
}

}  // namespace sluice
