#include "gateway/reload.h"

#include <spdlog/spdlog.h>

#include "core/config.h"
#include "gateway/gateway.h"

namespace sluice {

ReloadResult reload_config(Gateway& gateway, const std::string& path) {
  if (path.empty()) {
    spdlog::warn("SIGHUP: no config file to reload (started without -c); ignored");
    return ReloadResult::no_path;
  }
  std::shared_ptr<const Config> next;
  try {
    next = load_config_file(path);
  } catch (const std::exception& e) {  // ConfigError, or yaml-cpp on an unreadable document
    spdlog::error("config reload refused: {}; keeping the current config", e.what());
    return ReloadResult::refused;
  }
  const Config& cur = gateway.config();
  size_t endpoints = 0;
  for (const auto& p : next->pools) endpoints += p.endpoints.size();
  spdlog::warn("config reload: {} is valid ({} pools, {} endpoints, {} models) but live apply is not implemented "
               "yet; still serving the startup config ({} pools); restart to apply",
               path, next->pools.size(), endpoints, next->models.size(), cur.pools.size());
  return ReloadResult::valid_not_applied;
}

}  // namespace sluice
