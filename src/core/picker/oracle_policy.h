// oracle: scores exactly like `sluice` (sluice_policy.h) but takes each endpoint's cached tokens
// for the request from a callback instead of the approximate prefix index. The fleet simulator
// wires the callback to the simulated engines' real KV caches, giving an upper bound for what a
// perfect (KV-event) index would achieve. Not selectable from config: it needs the callback.
#pragma once
#include "core/picker/sluice_policy.h"

namespace sluice {

class OraclePolicy final : public SluicePolicy {
 public:
  OraclePolicy(CachedTokensOracle cached_tokens, SluiceParams params = {}, PoolKind kind = PoolKind::chat)
      : SluicePolicy(params, kind) {
    oracle_ = std::move(cached_tokens);
  }
  std::string_view name() const override { return "oracle"; }
};

}  // namespace sluice
