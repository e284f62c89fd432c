#include "model/workload/workload.h"

#include <fmt/format.h>

#include "model/workload/generators.h"
#include "model/workload/params.h"

namespace sluice::workload {

std::vector<std::string> workload_names() {
  return {"shared_prefix", "multi_turn", "cost_mix",   "lora_mix",    "tenants",  "embeddings",
          "replay",        "hot_prefix", "agent_sessions", "tool_agent", "kv_pressure", "fan_out"};
}

std::variant<WorkloadSpec, std::string> parse_workload_spec(const std::string& text) {
  WorkloadSpec spec;
  spec.text = text;
  std::vector<std::string_view> parts;
  std::string_view rest = text;
  for (;;) {
    const auto comma = rest.find(',');
    parts.push_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  const auto head = parts[0];
  const auto colon = head.find(':');
  spec.name = std::string(head.substr(0, colon));
  if (colon != std::string_view::npos) spec.preset = std::string(head.substr(colon + 1));
  if (spec.name.empty()) return std::string("workload: empty name");
  bool known = false;
  for (const auto& n : workload_names()) known |= n == spec.name;
  if (!known) {
    std::string names;
    for (const auto& n : workload_names()) names += (names.empty() ? "" : ", ") + n;
    return fmt::format("workload: unknown name '{}' (known: {})", spec.name, names);
  }
  if (colon != std::string_view::npos && spec.preset.empty()) return std::string("workload: empty preset after ':'");
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto kv = parts[i];
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return fmt::format("workload {}: expected key=value, got '{}'", spec.name, kv);
    spec.params[std::string(kv.substr(0, eq))] = std::string(kv.substr(eq + 1));
  }
  return spec;
}

std::variant<std::unique_ptr<ContentGenerator>, std::string> make_content(const WorkloadSpec& spec, uint64_t seed) {
  Params p("workload " + spec.name, spec.params);
  std::unique_ptr<ContentGenerator> g;
  if (spec.name != "shared_prefix" && !spec.preset.empty())
    return fmt::format("workload {}: has no presets (got ':{}')", spec.name, spec.preset);
  if (spec.name == "shared_prefix") g = make_shared_prefix(spec.preset, p, seed);
  else if (spec.name == "multi_turn") g = make_multi_turn(p, seed);
  else if (spec.name == "cost_mix") g = make_cost_mix(p, seed);
  else if (spec.name == "lora_mix") g = make_lora_mix(p, seed);
  else if (spec.name == "tenants") g = make_tenants(p, seed);
  else if (spec.name == "embeddings") g = make_embeddings(p, seed);
  else if (spec.name == "replay") g = make_replay(p, seed);
  else if (spec.name == "hot_prefix") g = make_hot_prefix(p, seed);
  else if (spec.name == "agent_sessions") g = make_agent_sessions(p, seed);
  else if (spec.name == "tool_agent") g = make_tool_agent(p, seed);
  else if (spec.name == "kv_pressure") g = make_kv_pressure(p, seed);
  else if (spec.name == "fan_out") g = make_fan_out(p, seed);
  if (p.ok()) p.finish();
  if (!p.ok()) return p.error();
  if (!g) return "workload " + spec.name + ": invalid parameters";
  return g;
}

Workload::Workload(std::unique_ptr<ContentGenerator> content, const ArrivalSpec& arrivals,
                   const WorkloadLimits& limits, uint64_t seed)
    : content_(std::move(content)), spec_(arrivals), limits_(limits), arrivals_(arrivals, seed) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), 0xc0de7u};
  rng_.seed(seq);
}

std::optional<WorkloadRequest> Workload::next() {
  if (int64_t(index_) >= limits_.max_requests) return std::nullopt;
  WorkloadRequest r;
  r.index = index_;
  if (!content_->fill(r, rng_)) return std::nullopt;
  if (spec_.kind == ArrivalKind::concurrency) r.arrival = Duration::zero();
  else if (!content_->has_own_arrivals()) r.arrival = arrivals_.next();
  if (limits_.max_duration && r.arrival > *limits_.max_duration) return std::nullopt;
  ++index_;
  return r;
}

std::string Workload::describe() const {
  std::string d = content_->describe();
  if (!content_->has_own_arrivals() || spec_.kind == ArrivalKind::concurrency) d += ", " + spec_.describe();
  return d;
}

std::variant<std::unique_ptr<Workload>, std::string> make_workload(const std::string& spec_text,
                                                                   const ArrivalSpec& arrivals,
                                                                   const WorkloadLimits& limits, uint64_t seed) {
  auto spec = parse_workload_spec(spec_text);
  if (auto* e = std::get_if<std::string>(&spec)) return *e;
  if (auto e = arrivals.validate(); !e.empty()) return "arrivals: " + e;
  if (limits.max_requests < 1) return std::string("the request limit must be at least 1");
  auto content = make_content(std::get<0>(spec), seed);
  if (auto* e = std::get_if<std::string>(&content)) return *e;
  return std::make_unique<Workload>(std::move(std::get<0>(content)), arrivals, limits, seed);
}

}  // namespace sluice::workload
