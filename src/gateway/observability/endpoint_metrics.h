// Per-endpoint series whose values live in the pool routers (the gateway's own accounting and the
// scraped engine signals), rendered at scrape time of the admin /metrics. Names: docs/metrics.md.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "core/picker/pool_router.h"
#include "gateway/generation.h"
#include "core/time.h"

namespace sluice {

void append_endpoint_metrics(std::string& out,
                             const std::map<std::string, std::shared_ptr<PoolRuntime>, std::less<>>& pools,
                             Time now);

}  // namespace sluice
