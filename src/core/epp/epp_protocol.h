/*
 * The Endpoint Picker protocol of the Gateway API Inference Extension (v1.0) as plain functions
 * over strings: no gRPC, no protobuf (the one gRPC translation unit, src/extproc/, converts).
 * See ../shared/reference/scale-out-and-standards.md section 3 and the public EPP protocol doc.
 *
 *   - The answer: header `x-gateway-destination-endpoint` and dynamic metadata
 *     `envoy.lb` / `x-gateway-destination-endpoint`, the same value: one `ip:port` or an ordered
 *     comma list (`destination_list`: the picker's ranking, at most ExtProcConfig::destinations
 *     long) the proxy walks on retry.
 *   - Subset hint: request metadata `envoy.lb.subset_hint` / `x-gateway-destination-endpoint-subset`
 *     = a list of `ip:port`: pick only from it (`restrict_to_subset`); none eligible -> 503.
 *   - The proxy reports what it used in `envoy.lb` / `x-gateway-destination-endpoint-served`.
 *   - Refusals are immediate responses: 503 with no ready endpoint, 429 when shed, with
 *     `x-llm-d-request-dropped-reason` (`dropped_reason`).
 *   - Priority: `x-llm-d-inference-objective` (old: `x-gateway-inference-objective`) names an
 *     objective whose priority is configured (ext_proc.objectives); an integer is taken as the
 *     priority itself; absent or unknown -> the tenant's own (`objective_priority`).
 *   - Tenant: `x-llm-d-inference-fairness-id` (old: `x-gateway-inference-fairness-id`).
 */
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/admission/outcome.h"
#include "core/epp/epp_config.h"

namespace sluice::epp {

inline constexpr std::string_view kDestinationHeader = "x-gateway-destination-endpoint";
inline constexpr std::string_view kServedKey = "x-gateway-destination-endpoint-served";
inline constexpr std::string_view kLbNamespace = "envoy.lb";
inline constexpr std::string_view kSubsetNamespace = "envoy.lb.subset_hint";
inline constexpr std::string_view kSubsetKey = "x-gateway-destination-endpoint-subset";
inline constexpr std::string_view kDroppedReasonHeader = "x-llm-d-request-dropped-reason";
inline constexpr std::string_view kObjectiveHeader = "x-llm-d-inference-objective";
inline constexpr std::string_view kObjectiveHeaderOld = "x-gateway-inference-objective";
inline constexpr std::string_view kFairnessHeader = "x-llm-d-inference-fairness-id";
inline constexpr std::string_view kFairnessHeaderOld = "x-gateway-inference-fairness-id";
inline constexpr std::string_view kServiceName = "envoy.service.ext_proc.v3.ExternalProcessor";

// The dropped-reason values (llm-d's names).
inline constexpr std::string_view kDroppedNoEndpoints = "rejected-no-endpoints";
inline constexpr std::string_view kDroppedSaturated = "rejected-saturated";
inline constexpr std::string_view kDroppedTtlExpired = "rejected-ttl-expired";
inline constexpr std::string_view kDroppedRateLimited = "rejected-rate-limited";
inline constexpr std::string_view kDroppedTooLarge = "rejected-too-large";
std::string_view dropped_reason(RejectReason r);

// The priority an objective header asks for; nullopt: keep the tenant's.
std::optional<int> objective_priority(std::string_view value, const ExtProcConfig& cfg);

// The subset hint's entries: each list element may itself be a comma list; blanks dropped.
std::vector<std::string> split_endpoints(const std::vector<std::string>& values);

// The ranked endpoint addresses allowed by the subset (all when `subset` is null), in rank order:
// indices into `ranked`.
std::vector<size_t> restrict_to_subset(const std::vector<std::string_view>& ranked,
                                       const std::vector<std::string>* subset);

// "a,b,c": the first `n` of `ranked` at the given indices.
std::string destination_list(const std::vector<std::string_view>& ranked, const std::vector<size_t>& allowed, size_t n);

// The API a request path names (query ignored): /v1/chat/completions, /v1/completions,
// /v1/embeddings (also without the /v1 prefix); nullopt for anything else.
enum class PathKind { chat, completion, embedding };
std::optional<PathKind> path_kind(std::string_view path);

}  // namespace sluice::epp
