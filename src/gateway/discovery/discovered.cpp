#include "gateway/discovery/discovered.h"

#include <map>
#include <mutex>

namespace sluice {

namespace {
std::mutex mu;
std::map<std::string, std::vector<EndpointConfig>> by_pool;
constexpr std::string_view kMarker = "\n# discovered:";
}  // namespace

void set_discovered(const std::string& pool, std::vector<EndpointConfig> endpoints) {
  std::lock_guard lock(mu);
  by_pool[pool] = std::move(endpoints);
}

std::shared_ptr<const Config> with_discovered(std::shared_ptr<const Config> config) {
  std::lock_guard lock(mu);
  bool any = false;
  for (const auto& p : config->pools) any |= p.discovery && by_pool.contains(p.name);
  if (!any) return config;
  auto next = std::make_shared<Config>(*config);
  for (auto& p : next->pools) {
    auto it = by_pool.find(p.name);
    if (!p.discovery || it == by_pool.end()) continue;
    p.endpoints = it->second;
    // What the pool gives every endpoint: its upstream_auth and its kv_events default.
    for (auto& e : p.endpoints)
      if (e.authorization.empty()) e.authorization = p.upstream_authorization;
    apply_kv_events_defaults(p);
    std::string fp = p.fingerprint.substr(0, p.fingerprint.find(kMarker));
    fp += kMarker;
    for (const auto& e : p.endpoints) fp += " " + e.name + "=" + e.address.str();
    p.fingerprint = std::move(fp);
  }
  return next;
}

}  // namespace sluice
