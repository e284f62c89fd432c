#include "core/epp/epp_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/config_yaml.h"
#include "core/url.h"

namespace sluice {

using namespace config_yaml;

ExtProcConfig parse_ext_proc_yaml(const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) fail(path, "expected a mapping (listen, destinations, objectives, fairness_id_selects_tenant, threads)");
  check_keys(n, path, {"listen", "destinations", "objectives", "fairness_id_selects_tenant", "threads"});
  ExtProcConfig c;
  if (!n["listen"]) fail(path + ".listen", "is required (host:port)");
  const auto listen = get<std::string>(n["listen"], path + ".listen", "host:port");
  std::string error;
  auto hp = parse_host_port(listen, error);
  if (!hp) fail(path + ".listen", error.empty() ? "expected host:port" : error);
  c.listen_host = hp->host;
  c.listen_port = hp->port;
  if (n["destinations"]) c.destinations = static_cast<int>(get_int(n["destinations"], path + ".destinations", 1, 16));
  if (n["threads"]) c.threads = static_cast<int>(get_int(n["threads"], path + ".threads", 1, 64));
  if (const auto& o = n["objectives"]) {
    if (!o.IsMap()) fail(path + ".objectives", "expected a mapping of objective name: integer priority");
    for (const auto& kv : o) {
      const auto name = kv.first.as<std::string>();
      if (name.empty()) fail(path + ".objectives", "an objective name must not be empty");
      c.objectives[name] = static_cast<int>(get_int(kv.second, path + ".objectives." + name, -1000000, 1000000));
    }
  }
  if (n["fairness_id_selects_tenant"])
    c.fairness_id_selects_tenant = get<bool>(n["fairness_id_selects_tenant"], path + ".fairness_id_selects_tenant", "true or false");
  return c;
}

KubernetesDiscoveryConfig parse_discovery_yaml(const YAML::Node& n, const std::string& path) {
  if (!n.IsMap()) fail(path, "expected a mapping with `kubernetes`");
  check_keys(n, path, {"kubernetes"});
  const auto& k = n["kubernetes"];
  const auto kp = path + ".kubernetes";
  if (!k || !k.IsMap()) fail(kp, "is required (inference_pool, namespace, ...)");
  check_keys(k, kp, {"inference_pool", "namespace", "api_server", "kubeconfig", "token_path", "ca_path", "selector",
                     "target_ports"});
  KubernetesDiscoveryConfig d;
  if (k["inference_pool"]) d.inference_pool = get<std::string>(k["inference_pool"], kp + ".inference_pool", "a name");
  if (k["namespace"]) d.namespace_name = get<std::string>(k["namespace"], kp + ".namespace", "a namespace");
  if (k["api_server"]) {
    d.api_server = get<std::string>(k["api_server"], kp + ".api_server", "a URL");
    if (d.api_server.rfind("http://", 0) != 0 && d.api_server.rfind("https://", 0) != 0)
      fail(kp + ".api_server", "expected an http:// or https:// URL");
  }
  if (k["kubeconfig"]) d.kubeconfig = get<std::string>(k["kubeconfig"], kp + ".kubeconfig", "a path");
  if (k["token_path"]) d.token_path = get<std::string>(k["token_path"], kp + ".token_path", "a path");
  if (k["ca_path"]) d.ca_path = get<std::string>(k["ca_path"], kp + ".ca_path", "a path");
  if (const auto& s = k["selector"]) {
    if (!s.IsMap() || s.size() == 0) fail(kp + ".selector", "expected a non-empty mapping of label: value");
    for (const auto& kv : s) d.selector[kv.first.as<std::string>()] = get<std::string>(kv.second, kp + ".selector", "a label value");
  }
  if (const auto& t = k["target_ports"]) {
    if (!t.IsSequence() || t.size() == 0 || t.size() > 8) fail(kp + ".target_ports", "expected a list of 1-8 ports");
    for (size_t i = 0; i < t.size(); ++i)
      d.target_ports.push_back(static_cast<uint16_t>(get_int(t[i], fmt::format("{}.target_ports[{}]", kp, i), 1, 65535)));
  }
  if (d.selector.empty() != d.target_ports.empty())
    fail(kp, "selector and target_ports go together (or neither: both are read from the InferencePool)");
  if (d.inference_pool.empty() && d.selector.empty())
    fail(kp + ".inference_pool", "is required (or give selector and target_ports)");
  return d;
}

}  // namespace sluice
