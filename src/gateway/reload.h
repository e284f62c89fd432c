// SIGHUP config reload, first step: the file is re-read, parsed and fully validated into a new
// snapshot (parse_config: unknown keys, ranges, pools, models, admission). An invalid file is
// refused with one clear log line naming the field, and the running config is kept.
//
// NOT YET: applying a valid snapshot live. The running Gateway's PoolRouters, the per-worker
// upstream pools (indexed by pool/endpoint position), the scrapers and health checkers are built
// once from the startup config; swapping them needs a refcounted per-request snapshot (see the
// report of issue 6). Until then a valid new config is logged as valid-but-not-applied.
#pragma once
#include <string>

namespace sluice {

class Gateway;

enum class ReloadResult { refused, valid_not_applied, no_path };

// Logs the outcome: "config reload refused: <path>: <field>: <problem>; keeping the current config".
ReloadResult reload_config(Gateway& gateway, const std::string& path);

}  // namespace sluice
