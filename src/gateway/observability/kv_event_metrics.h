// The engine KV-event series (issue 15) of every pool with events, rendered at scrape time from
// the pools' KvEventIndex (core/prefix/kv_event_index.h). Names: docs/metrics.md.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "core/time.h"
#include "gateway/generation.h"

namespace sluice {

void append_kv_event_metrics(std::string& out,
                             const std::map<std::string, std::shared_ptr<PoolRuntime>, std::less<>>& pools, Time now);

}  // namespace sluice
