/*
 * Kubernetes discovery, the pure part: the API server's JSON (recorded shapes of
 * `GET /api/v1/namespaces/NS/pods` lists, `?watch=true` events and the InferencePool object of
 * inference.networking.k8s.io/v1) read into plain data, and the endpoint set a pool gets from it.
 * No sockets: gateway/discovery/ fetches, this decides.
 *
 *   - A pod counts when it has a podIP, no deletionTimestamp, and condition Ready=True; each
 *     counts once per target port (several ports = data-parallel ranks): `ip:port`, named
 *     `pod-name` (or `pod-name:port` with several ports).
 *   - Watch events: ADDED / MODIFIED replace the pod, DELETED removes it, BOOKMARK only moves the
 *     resource version, ERROR carries a Status (410 Gone: the version is too old, list again).
 *   - InferencePool: spec.selector.matchLabels (v1; a plain map is accepted too) and
 *     spec.targetPorts[].number.
 * Malformed JSON yields an error string, never an exception.
 */
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"

namespace sluice::k8s {

struct Pod {
  std::string name;
  std::string ip;
  bool ready = false;
  bool deleting = false;
  bool counts() const { return ready && !deleting && !ip.empty(); }
};

struct PodList {
  std::vector<Pod> pods;
  std::string resource_version;
};

enum class EventType { added, modified, deleted, bookmark, error };

struct WatchEvent {
  EventType type = EventType::added;
  Pod pod;
  std::string resource_version;  // of the object (bookmarks included)
  int error_code = 0;            // ERROR: the Status code (410: list again)
  std::string error_message;
};

struct PoolSpec {
  std::map<std::string, std::string> selector;
  std::vector<uint16_t> target_ports;
};

std::optional<PodList> parse_pod_list(std::string_view json, std::string& error);
std::optional<WatchEvent> parse_watch_event(std::string_view json, std::string& error);
std::optional<PoolSpec> parse_inference_pool(std::string_view json, std::string& error);

// "k1=v1,k2=v2" (the labelSelector query value, not yet URL-encoded).
std::string label_selector(const std::map<std::string, std::string>& selector);

// The endpoints of the pods that count, sorted by address (a stable order: equal sets compare equal).
std::vector<EndpointConfig> endpoints_of(const std::map<std::string, Pod>& pods, const std::vector<uint16_t>& ports,
                                         EngineKind engine);

}  // namespace sluice::k8s
