// Config of the Endpoint Picker side of sluice (issue 17): the top-level `ext_proc:` section (the
// Envoy ext_proc gRPC listener) and a pool's `discovery: { kubernetes: ... }` (endpoints from an
// InferencePool's pods). Plain data, parsed and validated once with the rest of the config
// (core/config.cpp calls the two parsers here); errors name the YAML key.
//
//   ext_proc:
//     listen: 127.0.0.1:9002        # required: the gRPC listener (port 0: ephemeral)
//     destinations: 3               # length of the ordered x-gateway-destination-endpoint list (1-16)
//     threads: 1                    # gRPC poller threads, one completion queue each (1-64)
//     objectives: {critical: 10, batch: -1}   # x-llm-d-inference-objective name -> priority
//     fairness_id_selects_tenant: false       # true: x-llm-d-inference-fairness-id names the tenant
//                                             # (the proxy in front authenticated the client)
//
//   pools:
//   - name: chat
//     discovery:
//       kubernetes:
//         inference_pool: llama      # InferencePool (inference.networking.k8s.io/v1) name
//         namespace: default         # default: the service account's namespace, else "default"
//         api_server: https://...    # default: in-cluster (KUBERNETES_SERVICE_HOST/PORT) or the kubeconfig's
//         kubeconfig: ~/.kube/config # optional: server, token and CA from a kubeconfig
//         token_path / ca_path       # default: /var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt}
//         # selector / target_ports: set both to skip reading the InferencePool object
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace sluice {

struct ExtProcConfig {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 9002;
  int destinations = 3;
  int threads = 1;
  std::map<std::string, int, std::less<>> objectives;
  bool fairness_id_selects_tenant = false;
};

struct KubernetesDiscoveryConfig {
  std::string inference_pool;
  std::string namespace_name;  // empty: the service account's namespace, else "default"
  std::string api_server;      // empty: in-cluster or the kubeconfig's
  std::string kubeconfig;
  std::string token_path = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_path = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::map<std::string, std::string> selector;  // set with target_ports: the InferencePool is not read
  std::vector<uint16_t> target_ports;
};

// Parse `ext_proc:` / a pool's `discovery:`; throw ConfigError naming the field.
ExtProcConfig parse_ext_proc_yaml(const YAML::Node& node, const std::string& path);
KubernetesDiscoveryConfig parse_discovery_yaml(const YAML::Node& node, const std::string& path);

}  // namespace sluice
