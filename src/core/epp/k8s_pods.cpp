#include "core/epp/k8s_pods.h"

#include <simdjson.h>

#include <algorithm>

#include <fmt/format.h>

namespace sluice::k8s {


namespace {

// Reads a pod object (the value of `object` or an item of `items`).
bool read_pod(simdjson::dom::element obj, Pod& pod, std::string& rv) {
  simdjson::dom::element meta;
  if (obj["metadata"].get(meta)) return false;
  std::string_view s;
  if (!meta["name"].get(s)) pod.name = std::string(s);
  if (!meta["resourceVersion"].get(s)) rv = std::string(s);
  simdjson::dom::element del;
  pod.deleting = !meta["deletionTimestamp"].get(del) && !del.is_null();
  simdjson::dom::element status;
  if (!obj["status"].get(status)) {
    if (!status["podIP"].get(s)) pod.ip = std::string(s);
    simdjson::dom::array conds;
    if (!status["conditions"].get(conds))
      for (auto c : conds) {
        std::string_view type, value;
        if (!c["type"].get(type) && type == "Ready" && !c["status"].get(value)) pod.ready = value == "True";
      }
  }
  return !pod.name.empty();
}

thread_local simdjson::dom::parser tl_parser;

}  // namespace

std::optional<PodList> parse_pod_list(std::string_view json, std::string& error) {
  simdjson::dom::element doc;
  if (auto e = tl_parser.parse(json.data(), json.size()).get(doc)) {
    error = fmt::format("pod list: invalid JSON ({})", simdjson::error_message(e));
    return std::nullopt;
  }
  PodList out;
  std::string_view rv;
  if (!doc["metadata"]["resourceVersion"].get(rv)) out.resource_version = std::string(rv);
  simdjson::dom::array items;
  if (doc["items"].get(items)) {
    simdjson::dom::element nul;
    if (!doc["items"].get(nul) && nul.is_null()) return out;  // an empty list may be null
    error = "pod list: no `items` array";
    return std::nullopt;
  }
  for (auto item : items) {
    Pod p;
    std::string ignored;
    if (read_pod(item, p, ignored)) out.pods.push_back(std::move(p));
  }
  return out;
}

std::optional<WatchEvent> parse_watch_event(std::string_view json, std::string& error) {
  simdjson::dom::element doc;
  if (auto e = tl_parser.parse(json.data(), json.size()).get(doc)) {
    error = fmt::format("watch event: invalid JSON ({})", simdjson::error_message(e));
    return std::nullopt;
  }
  std::string_view type;
  if (doc["type"].get(type)) {
    error = "watch event: no `type`";
    return std::nullopt;
  }
  simdjson::dom::element obj;
  if (doc["object"].get(obj)) {
    error = "watch event: no `object`";
    return std::nullopt;
  }
  WatchEvent ev;
  if (type == "ERROR") {
    ev.type = EventType::error;
    int64_t code = 0;
    if (!obj["code"].get(code)) ev.error_code = static_cast<int>(code);
    std::string_view msg;
    if (!obj["message"].get(msg)) ev.error_message = std::string(msg);
    return ev;
  }
  if (type == "ADDED") ev.type = EventType::added;
  else if (type == "MODIFIED") ev.type = EventType::modified;
  else if (type == "DELETED") ev.type = EventType::deleted;
  else if (type == "BOOKMARK") ev.type = EventType::bookmark;
  else {
    error = fmt::format("watch event: unknown type `{}`", type.substr(0, 32));
    return std::nullopt;
  }
  if (ev.type == EventType::bookmark) {
    std::string_view rv;
    if (!obj["metadata"]["resourceVersion"].get(rv)) ev.resource_version = std::string(rv);
    return ev;
  }
  if (!read_pod(obj, ev.pod, ev.resource_version)) {
    error = "watch event: the object is not a pod with a name";
    return std::nullopt;
  }
  return ev;
}

std::optional<PoolSpec> parse_inference_pool(std::string_view json, std::string& error) {
  simdjson::dom::element doc;
  if (auto e = tl_parser.parse(json.data(), json.size()).get(doc)) {
    error = fmt::format("InferencePool: invalid JSON ({})", simdjson::error_message(e));
    return std::nullopt;
  }
  simdjson::dom::element spec;
  if (doc["spec"].get(spec)) {
    error = "InferencePool: no `spec`";
    return std::nullopt;
  }
  PoolSpec out;
  simdjson::dom::object labels;
  simdjson::dom::element sel;
  if (!spec["selector"].get(sel)) {
    if (sel["matchLabels"].get(labels) && sel.get(labels)) labels = {};
    for (auto [k, v] : labels) {
      std::string_view value;
      if (!v.get(value)) out.selector[std::string(k)] = std::string(value);
    }
  }
  simdjson::dom::array ports;
  if (!spec["targetPorts"].get(ports))
    for (auto p : ports) {
      int64_t n = 0;
      if (!p["number"].get(n) && n > 0 && n < 65536) out.target_ports.push_back(static_cast<uint16_t>(n));
    }
  if (out.selector.empty()) {
    error = "InferencePool: spec.selector.matchLabels is empty";
    return std::nullopt;
  }
  if (out.target_ports.empty()) {
    error = "InferencePool: spec.targetPorts is empty";
    return std::nullopt;
  }
  return out;
}

std::string label_selector(const std::map<std::string, std::string>& selector) {
  std::string out;
  for (const auto& [k, v] : selector) out += (out.empty() ? "" : ",") + k + "=" + v;
  return out;
}

std::vector<EndpointConfig> endpoints_of(const std::map<std::string, Pod>& pods, const std::vector<uint16_t>& ports,
                                         EngineKind engine) {
  std::vector<EndpointConfig> out;
  for (const auto& [name, pod] : pods) {
    if (!pod.counts()) continue;
    for (uint16_t port : ports) {
      EndpointConfig e;
      e.address = Address{pod.ip, port};
      e.name = ports.size() > 1 ? fmt::format("{}:{}", name, port) : name;
      e.engine = engine;
      out.push_back(std::move(e));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.address.str() < b.address.str(); });
  // Two pods reporting the same IP (a stale one and its replacement): one endpoint.
  out.erase(std::unique(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.address.str() == b.address.str(); }),
            out.end());
  return out;
}

}  // namespace sluice::k8s
