#include "core/metrics/model_labels.h"

#include <set>

namespace sluice {

std::map<std::string, ModelLabels, std::less<>> model_labels(const Config& config) {
  std::set<std::string, std::less<>> models, adapters;  // the names that keep their own value
  auto bounded = [](std::set<std::string, std::less<>>& kept, size_t cap, const std::string& name) -> std::string {
    if (kept.contains(name)) return name;
    if (kept.size() >= cap) return std::string(kOtherModelLabel);
    kept.insert(name);
    return name;
  };
  std::map<std::string, ModelLabels, std::less<>> out;
  for (const auto& m : config.models) {
    // What the engine serves: an alias is its target (parse_config refuses an alias of an alias).
    const ModelRoute* served = &m;
    if (m.is_alias())
      if (const ModelRoute* t = config.find_model(m.target)) served = t;
    ModelLabels l;
    l.pool = m.pool;
    if (served->adapter_of.empty()) {
      l.model = bounded(models, kMaxModelLabels, served->name);
      l.adapter = std::string(kUnresolvedModelLabel);
    } else {
      l.model = bounded(models, kMaxModelLabels, served->adapter_of);
      l.adapter = bounded(adapters, kMaxAdapterLabels, served->name);
    }
    out.emplace(m.name, std::move(l));
  }
  return out;
}

}  // namespace sluice
