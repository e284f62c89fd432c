// The refusal of a request shed on the policy's advice, as every driver makes it (the live gateway,
// the Endpoint Picker, fleetsim): the rule (shed_advised: advised, and the request's priority is not
// positive), the answer (429 over_slo, its Retry-After from the policy's estimate, jittered:
// shed_retry_base, core/admission/outcome.h) and the report to the policy (PoolRouter::on_shed: the
// Retry-After of the requests shed after it counts this one).
#pragma once
#include <optional>
#include <span>

#include "core/admission/outcome.h"
#include "core/picker/pool_router.h"

namespace sluice {

// The refusal, recorded with `router`, or nothing when the request is to be served.
inline std::optional<Denial> shed_refusal(PoolRouter& router, std::span<const Candidate> ranked, int priority, Time now,
                                          AdmissionRng& rng) {
  if (!shed_advised(ranked, priority)) return std::nullopt;
  Denial d = over_slo_denial(shed_retry_base(ranked), rng);
  router.on_shed(ranked, now);
  return d;
}

}  // namespace sluice
