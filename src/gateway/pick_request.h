// The picker's view of one parsed request, built the same way for routing (proxy.cpp) and for the
// admin explanation of a routing decision (`POST /debug/pick` on the admin listener).
#pragma once
#include "core/config.h"
#include "core/picker/policy.h"
#include "core/openai/request.h"

namespace sluice {

constexpr int64_t kDefaultOutputBound = 256;  // decode accounting when the request sets no bound

// `route` and `request` must outlive the returned view.
inline PickRequest make_pick_request(ApiKind kind, const ModelRoute& route, const RequestModel& request) {
  PickRequest pick;
  pick.kind = pick_kind(kind);  // the Responses API as chat; pooling and tokenizer routes as embedding
  pick.model = route.adapter_of.empty() ? std::string_view(route.target) : std::string_view(route.adapter_of);
  pick.adapter = route.adapter_of.empty() ? std::string_view() : std::string_view(route.name);
  pick.text = request.rendered;
  pick.cache_salt = request.cache_salt;
  pick.input_tokens = estimate_tokens(request.rendered);
  pick.max_output_tokens =
      generates(kind) ? request.max_output_tokens.value_or(kDefaultOutputBound) * request.completions : 0;
  pick.whole_answer = generates(kind) && !request.stream;
  return pick;
}

}  // namespace sluice
