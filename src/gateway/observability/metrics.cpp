#include "gateway/observability/metrics.h"

namespace sluice {

namespace {
template <typename S>
const char* type_name();
template <>
const char* type_name<Counter>() { return "counter"; }
template <>
const char* type_name<Gauge>() { return "gauge"; }
template <>
const char* type_name<Histogram>() { return "histogram"; }
}  // namespace

template <typename Series>
Series& Family<Series>::with(std::initializer_list<std::string_view> values) {
  std::string key;
  append_labels(key, labels_, std::vector<std::string_view>(values));
  std::lock_guard lock(mu_);
  auto it = series_.find(key);
  if (it != series_.end()) return *it->second;
  std::unique_ptr<Series> s;
  if constexpr (std::is_same_v<Series, Histogram>) s = std::make_unique<Histogram>(&bounds_);
  else s = std::make_unique<Series>();
  return *series_.emplace(std::move(key), std::move(s)).first->second;
}

template <typename Series>
void Family<Series>::render(std::string& out, std::string_view) const {
  PromWriter w(out);
  w.family(name_, type_name<Series>(), help_);
  std::lock_guard lock(mu_);
  for (const auto& [labels, s] : series_) {
    if constexpr (std::is_same_v<Series, Histogram>) w.histogram(name_, labels, s->snapshot());
    else w.sample(name_, labels, s->value());
  }
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

namespace {
// A family registered again (a component rebuilt by a config reload) is the same family.
template <class F>
F* find_family(const std::vector<std::unique_ptr<F>>& families, const std::string& name) {
  for (const auto& f : families)
    if (f->name() == name) return f.get();
  return nullptr;
}
}  // namespace

CounterFamily& MetricsRegistry::counter(std::string name, std::string help, std::vector<std::string> labels) {
  std::lock_guard lock(mu_);
  if (auto* f = find_family(counters_, name)) return *f;
  counters_.push_back(std::make_unique<CounterFamily>(std::move(name), std::move(help), std::move(labels)));
  return *counters_.back();
}

GaugeFamily& MetricsRegistry::gauge(std::string name, std::string help, std::vector<std::string> labels) {
  std::lock_guard lock(mu_);
  if (auto* f = find_family(gauges_, name)) return *f;
  gauges_.push_back(std::make_unique<GaugeFamily>(std::move(name), std::move(help), std::move(labels)));
  return *gauges_.back();
}

HistogramFamily& MetricsRegistry::histogram(std::string name, std::string help, std::vector<std::string> labels,
                                            std::vector<double> bounds) {
  std::lock_guard lock(mu_);
  if (auto* f = find_family(histograms_, name)) return *f;
  histograms_.push_back(
      std::make_unique<HistogramFamily>(std::move(name), std::move(help), std::move(labels), std::move(bounds)));
  return *histograms_.back();
}

void MetricsRegistry::add_collector(std::function<void(std::string&)> collector) {
  std::lock_guard lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::render() const {
  std::string out;
  out.reserve(16 << 10);
  std::lock_guard lock(mu_);
  for (const auto& f : counters_) f->render(out, "counter");
  for (const auto& f : gauges_) f->render(out, "gauge");
  for (const auto& f : histograms_) f->render(out, "histogram");
  for (const auto& c : collectors_) c(out);
  return out;
}

}  // namespace sluice
