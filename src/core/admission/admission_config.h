/*
 * YAML for the admission layer: the `tenants:` list and the `admission:` section of sluice's
 * config, parsed into TenantsSpec + AdmissionConfig (plain data; TenantRegistry::build then
 * validates the tenants). Errors are values naming the field (`tenants[1].limits.max_concurrent:
 * expected an integer`); unknown keys are errors. The config loader calls this on its root node
 * (and should allow the two top-level keys).
 *
 *   tenants:
 *     - name: acme
 *       key_sha256: [<64 hex digits>, ...]     # SHA-256 of each API key (`sluice hash-key`)
 *       priority: 1                           # higher first; negative = sheddable (default 0)
 *       weight: 2.0                           # VTC fairness weight (default 1)
 *       limits: {requests_per_min: 600, input_tokens_per_min: 200000,
 *                output_tokens_per_min: 100000, tokens_per_day: 10000000, max_concurrent: 32}
 *       models:                               # narrower per-model limits, checked in addition
 *         - {model: llama-70b, limits: {output_tokens_per_min: 20000}}
 *   admission:
 *     anonymous_tenant: free                  # tenant for requests without a key (default none)
 *     default_max_output_tokens: 4096         # reserved + injected when a request sets no bound
 *     concurrency_retry_after_ms: 1000
 *     queue: {max_requests: 4096, max_bytes: 67108864, ttl_ms: 30000,
 *             ttl_ms_by_priority: {"2": 60000, "-1": 5000}, retry_after_ms: 1000}
 *     vtc: {w_in: 1, w_out: 2}
 *     fair_share: {enabled: true, active_window_ms: 10000, spare_slots: 0}   # fair_share.h
 * Absent sections keep the defaults of admission.h / admission_queue.h; no `tenants:` means
 * admission is off (`enabled == false`).
 */
#pragma once
#include <string>

#include <yaml-cpp/yaml.h>

#include "core/admission/admission.h"
#include "core/admission/tenants.h"

namespace sluice {

struct AdmissionSpec {
  bool enabled = false;  // a `tenants:` list was given
  TenantsSpec tenants;
  AdmissionConfig config;
  // The `tenants:` and `admission:` YAML as parsed (canonical dump): a reload with the same
  // fingerprint keeps the running admission layer (budgets, queue, fairness counters).
  std::string fingerprint;
};

struct AdmissionSpecResult {
  AdmissionSpec spec;
  std::string error;  // empty on success
  bool ok() const { return error.empty(); }
};

// Reads root["tenants"] and root["admission"]; other keys are ignored here.
AdmissionSpecResult parse_admission_yaml(const YAML::Node& root);
AdmissionSpecResult parse_admission_yaml(const std::string& yaml_text);

}  // namespace sluice
