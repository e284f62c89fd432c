/*
 * Virtual Token Counter fairness (Sheng et al., "Fairness in Serving Large Language Models",
 * OSDI 2024).
 *
 * Algorithm. One counter per tenant, in weighted tokens of service received:
 *   - at dispatch a request's input is charged: counter += w_in * input_tokens / weight;
 *   - as output streams: counter += w_out * output_tokens / weight;
 *   - among backlogged tenants (those with queued requests) the next request always comes from
 *     the tenant with the smallest counter (ties: smallest TenantId);
 *   - counter lift: when a tenant becomes backlogged after being idle, its counter is raised to
 *     max(own, min counter of the currently backlogged tenants) -- or, when nobody is backlogged,
 *     to max(own, counter of the last tenant to leave the backlog) -- so idle time is never
 *     banked as credit to burst past others later.
 * Guarantee (paper, Thm. 4.4): while two tenants stay backlogged, the difference between the
 * weighted service they receive stays within 2U, U = max(w_in * max input length,
 * w_out * max tokens in one batch step).
 * Defaults: w_in = 1, w_out = 2, tenant weight 1 (weights come from TenantSpec::weight).
 *
 * Cost: next() O(1), next_if() O(backlogged) at worst, backlog changes and charges to backlogged tenants O(log backlogged).
 * Not thread-safe: the owner (AdmissionQueue) serialises access. Pure: no time at all.
 */
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/admission/tenants.h"

namespace sluice {

struct VtcWeights {
  double w_in = 1.0;
  double w_out = 2.0;
};

class VirtualTokenCounter {
 public:
  explicit VirtualTokenCounter(VtcWeights w = {}) : w_(w) {}

  // The tenant's queue went from empty to non-empty: lift its counter, mark it backlogged.
  void on_backlogged(TenantId t);
  // The tenant's queue became empty.
  void on_idle(TenantId t);
  bool is_backlogged(TenantId t) const { return t < backlogged_.size() && backlogged_[t]; }
  // The backlogged tenant with the smallest counter; nullopt when nobody is backlogged.
  std::optional<TenantId> next() const;
  // The backlogged tenant with the smallest counter among those `eligible(t)` accepts (the
  // others are passed over, keeping their place); nullopt when none is.
  template <class Pred>
  std::optional<TenantId> next_if(Pred&& eligible) const {
    for (const auto& [counter, t] : order_)
      if (eligible(t)) return t;
    return std::nullopt;
  }

  void charge_input(TenantId t, int64_t tokens, double weight = 1.0);
  void charge_output(TenantId t, int64_t tokens, double weight = 1.0);
  double counter(TenantId t) const { return t < counters_.size() ? counters_[t] : 0.0; }
  size_t backlogged_count() const { return order_.size(); }
  const VtcWeights& weights() const { return w_; }

 private:
  void ensure(TenantId t);
  void add(TenantId t, double amount);

  VtcWeights w_;
  std::vector<double> counters_;
  std::vector<bool> backlogged_;
  std::set<std::pair<double, TenantId>> order_;  // backlogged tenants by counter
  double last_departed_ = 0.0;
};

}  // namespace sluice
