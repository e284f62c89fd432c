// Helpers for picker tests: a pool of endpoints with hand-set signals and loads, as views.
#pragma once
#include <string>
#include <vector>

#include "core/config.h"
#include "core/picker/policy.h"

namespace sluice::testing {

// A pool config of n endpoints ep0..ep{n-1} at 127.0.0.1:9000+i, for a real PoolRouter.
inline PoolConfig pool_config(size_t n, const std::string& policy, const std::string& name = "chat") {
  PoolConfig p;
  p.name = name;
  p.policy = policy;
  for (size_t i = 0; i < n; ++i) {
    EndpointConfig e;
    e.name = "ep" + std::to_string(i);
    e.address = {"127.0.0.1", static_cast<uint16_t>(9000 + i)};
    p.endpoints.push_back(e);
  }
  return p;
}

struct FakePool {
  std::vector<EngineSignals> signals;
  std::vector<EndpointLoad> loads;
  std::vector<bool> stale;
  std::vector<std::string> names;

  explicit FakePool(size_t n) : signals(n), loads(n), stale(n, false), names(n) {
    for (size_t i = 0; i < n; ++i) {
      signals[i].present = true;
      names[i] = "ep" + std::to_string(i);
    }
  }
  std::vector<EndpointView> views() const {
    std::vector<EndpointView> v;
    for (size_t i = 0; i < signals.size(); ++i) v.push_back({i, names[i], bool(stale[i]), &signals[i], &loads[i]});
    return v;
  }
  // What PoolRouter::dispatch does to the accounting.
  void dispatch(size_t e, const PickRequest& req, int64_t cached) {
    auto& l = loads[e];
    l.in_flight += 1;
    l.prefill_requests += 1;
    l.prefill_tokens += std::max<int64_t>(0, req.input_tokens - cached);
    l.decode_tokens += req.max_output_tokens;
    l.context_tokens += req.input_tokens + req.max_output_tokens;
    l.live_context_tokens += req.input_tokens;
    l.assigned_since_scrape += 1;
  }
};

inline std::vector<Candidate> rank(Policy& p, const FakePool& pool, const PickRequest& req) {
  std::vector<Candidate> out;
  auto v = pool.views();
  p.rank(req, v, Time{}, out);
  return out;
}

inline PickRequest chat(std::string_view text, int64_t input_tokens = -1, int64_t max_out = 100) {
  PickRequest r;
  r.model = "m";
  r.text = text;
  r.input_tokens = input_tokens >= 0 ? input_tokens : static_cast<int64_t>(text.size() / 4);
  r.max_output_tokens = max_out;
  return r;
}

}  // namespace sluice::testing
