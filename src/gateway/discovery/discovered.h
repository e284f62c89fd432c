// The endpoints discovery found, by pool (process-wide: the watchers write, every new config reads).
// A pool with `discovery:` takes its endpoints from here in every generation built after an
// update, a SIGHUP reload of the file included (its YAML lists none or only seed endpoints).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"

namespace sluice {

void set_discovered(const std::string& pool, std::vector<EndpointConfig> endpoints);
// `config` with each discovered pool's endpoints replaced by the discovered ones, given the pool's
// upstream_auth and kv_events defaults (and its
// fingerprint marked with them, so a changed set gets a fresh runtime that adopts the prefix index
// of the endpoints it keeps); `config` itself when there is nothing to replace.
std::shared_ptr<const Config> with_discovered(std::shared_ptr<const Config> config);

}  // namespace sluice
