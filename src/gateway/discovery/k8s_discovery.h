/*
 * Discovery from Kubernetes (issue 17): a pool with `discovery: {kubernetes: ...}` takes its
 * endpoints from an InferencePool (inference.networking.k8s.io/v1: spec.selector, spec.targetPorts)
 * by listing and watching the matching pods through the API server; ready pods only
 * (core/epp/k8s_pods.h decides). Endpoints join and leave live: each change is applied as a new
 * generation exactly as a reload of that pool is (reload.h apply_config: the prefix index of the
 * endpoints kept carries over, in-flight requests keep their runtime).
 *
 * Per pool, one thread with blocking I/O (Boost.Beast, OpenSSL for https): read the InferencePool
 * (unless selector + target_ports are given), LIST the pods (resourceVersion), then WATCH from that
 * version (`watch=true&resourceVersion=..&allowWatchBookmarks=true&timeoutSeconds=60`), one JSON
 * event per line. A broken or ended watch reconnects from the last version seen (backoff 100 ms,
 * doubling to 2 s); an ERROR 410 (version too old) lists again. Credentials: the bearer token and
 * CA from the standard in-cluster paths (re-read on every connect, so a rotated token is picked
 * up) and KUBERNETES_SERVICE_HOST/PORT, or a kubeconfig's current context (server, token or
 * tokenFile, certificate-authority[-data]), or `api_server` given outright. A refused token (401 /
 * 403) or any failure is logged once per distinct error, with the pool and what to check, and the
 * pool keeps its last good endpoints. Counted in sluice_discovery_updates_total{pool, result}.
 */
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "gateway/server.h"

namespace sluice {

class Gateway;
class PoolRuntime;

class KubernetesDiscovery final : public GatewayService {
 public:
  using StartLoops = std::function<void(const std::shared_ptr<PoolRuntime>&)>;
  // Watches every pool of the start-up config that has `discovery:`.
  KubernetesDiscovery(Gateway& gateway, StartLoops start_loops);
  ~KubernetesDiscovery() override;
  bool empty() const { return watchers_.empty(); }
  void start() override;
  void stop() override;

  struct Watcher;

 private:
  std::vector<std::unique_ptr<Watcher>> watchers_;
};

}  // namespace sluice
