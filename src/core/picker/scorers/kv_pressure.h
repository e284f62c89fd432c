// KV pressure scorer: 1 - KV usage, in [0,1] (llm-d's KV-utilization scorer). The usage follows the
// staleness rule (load_estimate.h): scraped when fresh, own in-flight context / capacity when stale.
#pragma once
#include "core/picker/scorers/load_estimate.h"

namespace sluice {

inline double kv_pressure_score(const LoadEstimate& e) { return 1.0 - e.kv_usage; }

}  // namespace sluice
