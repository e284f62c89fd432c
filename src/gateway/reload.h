// SIGHUP config reload: the file is re-read, parsed and fully validated (parse_config: unknown
// keys, ranges, pools, models, admission). An invalid file is refused with one clear log line
// naming the field, and the running config is kept.
//
// A valid file becomes a new generation (generation.h) swapped in atomically:
//   - pools whose YAML is unchanged keep their runtime (prefix index, scraped signals, in-flight
//     accounting, health, ejections, warm upstream connections); changed or new pools get a fresh
//     runtime whose scrapers and health checks start before the swap -- a changed pool's runtime
//     takes over the prefix index learned for the endpoints it keeps (same address), so scaling
//     out by reload keeps cache affinity; removed or replaced pools are retired (loops stopped)
//     after it and freed when their last request ends;
//   - models, aliases and adapters, timeouts, limits and routing headers apply to requests that
//     start after the swap (a keep-alive connection keeps its header/body limits);
//   - the admission layer is kept when `tenants:` and `admission:` are unchanged, else rebuilt
//     (budgets start full; requests already queued are dispatched by the old layer);
//   - `listen`, `admin` and `workers` need a restart: a change is logged and ignored.
// Connections and requests in flight are never dropped: each request keeps the generation it
// started with to its end.
// Known limits of a changed pool's fresh runtime: its in-flight caps do not count requests still
// running on the old runtime (briefly up to twice the cap per endpoint), its endpoints start
// healthy until probes say otherwise, and requests the old runtime dispatches after the copy are
// not learned by the new index.
#pragma once
#include <functional>
#include <memory>
#include <string>

namespace sluice {

class Gateway;
class PoolRuntime;
class MetricsRegistry;
class Counter;

enum class ReloadResult { refused, applied, no_path };

// Logs the outcome: "config reload refused: <path>: <field>: <problem>; keeping the current config"
// or "config reload applied: generation N: ...". `start_loops` starts a new runtime's background
// loops (scrapers, health checks).
// sluice_config_reload_failures_total, created on first use (the gateway does so at start-up).
Counter& reload_failures(MetricsRegistry& registry);

ReloadResult reload_config(Gateway& gateway, const std::string& path,
                           const std::function<void(const std::shared_ptr<PoolRuntime>&)>& start_loops);

struct Config;
// Applies `next` (parsed and validated) as a new generation exactly as a reload does; `source`
// names it in the log ("config file x.yaml", "kubernetes discovery of pool chat"). Reloads and
// discovery updates are serialised. Endpoints found by discovery (discovery/discovered.h) are
// kept across a reload of the file.
ReloadResult apply_config(Gateway& gateway, std::shared_ptr<const Config> next, const std::string& source,
                          const std::function<void(const std::shared_ptr<PoolRuntime>&)>& start_loops);

}  // namespace sluice
