#include "gateway/reload.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/admission/admission_config.h"
#include "core/config.h"
#include "gateway/discovery/discovered.h"
#include "gateway/gateway.h"
#include "gateway/tls/tls_bridge.h"

#include <mutex>

namespace sluice {

namespace {
// sluice_config_reload_failures_total (exported from start-up at 0, see reload_failures()).
void count_failure(Gateway& gateway) { reload_failures(gateway.registry()).inc(); }

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (const auto& x : xs) out += (out.empty() ? "" : ",") + x;
  return out.empty() ? "-" : out;
}
}  // namespace

Counter& reload_failures(MetricsRegistry& registry) {
  return registry
      .counter("sluice_config_reload_failures_total",
               "Config reloads (SIGHUP) refused because the new file was invalid; the old config stays in use.", {})
      .with({});
}

ReloadResult reload_config(Gateway& gateway, const std::string& path,
                           const std::function<void(const std::shared_ptr<PoolRuntime>&)>& start_loops) {
  if (path.empty()) {
    spdlog::warn("SIGHUP: no config file to reload (started without -c); ignored");
    return ReloadResult::no_path;
  }
  std::shared_ptr<const Config> next;
  try {
    next = route_tls_upstreams(load_config_file(path));  // https:// endpoints through their bridges
  } catch (const std::exception& e) {  // ConfigError, or yaml-cpp on an unreadable document
    spdlog::error("config reload refused: {}; keeping the current config", e.what());
    count_failure(gateway);
    return ReloadResult::refused;
  }
  return apply_config(gateway, next, path, start_loops);
}

ReloadResult apply_config(Gateway& gateway, std::shared_ptr<const Config> next, const std::string& path,
                          const std::function<void(const std::shared_ptr<PoolRuntime>&)>& start_loops) {
  static std::mutex apply_mu;  // SIGHUP and the discovery watchers: one new generation at a time
  std::lock_guard apply_lock(apply_mu);
  next = with_discovered(std::move(next));
  const auto cur = gateway.current();
  const Config& start = gateway.startup_config();
  if (next->listen.str() != start.listen.str() || next->admin.str() != start.admin.str() ||
      next->workers != start.workers)
    spdlog::warn("config reload: listen, admin and workers need a restart; keeping {} / {} / {} workers",
                 start.listen.str(), start.admin.str(), start.workers);

  std::string error;
  auto gen = build_generation(next, cur.get(), gateway.generation_inputs(gateway.seed() + cur->number * 1000), error);
  if (!gen) {
    spdlog::error("config reload refused: {}: admission: {}; keeping the current config", path, error);
    count_failure(gateway);
    return ReloadResult::refused;
  }
  std::vector<std::string> kept, fresh, removed;
  for (const auto& [name, pool] : gen->pools) {
    auto old = cur->pools.find(name);
    if (old != cur->pools.end() && old->second == pool) {
      kept.push_back(name);
    } else {
      fresh.push_back(name);
      start_loops(pool);
    }
  }
  const bool admission_kept = gen->admission == cur->admission;
  const uint64_t number = gen->number;
  gateway.install(gen);
  for (const auto& [name, pool] : cur->pools) {
    auto now = gen->pools.find(name);
    if (now == gen->pools.end() || now->second != pool) {
      pool->retire();
      if (now == gen->pools.end()) removed.push_back(name);
    }
  }
  spdlog::info("config reload applied: generation {} from {}: pools kept [{}], new or changed [{}], removed [{}]; "
               "{} models; admission {}",
               number, path, join(kept), join(fresh), join(removed), next->models.size(),
               !next->admission || !next->admission->enabled ? "off" : admission_kept ? "kept" : "rebuilt");
  return ReloadResult::applied;
}

}  // namespace sluice
