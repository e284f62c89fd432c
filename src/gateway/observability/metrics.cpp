#include "gateway/observability/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace sluice {

namespace {
void append_escaped(std::string& out, std::string_view v) {
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
}

std::string format_value(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v)) && std::abs(v) < 1e15)
    return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

template <typename S>
const char* type_name();
template <>
const char* type_name<Counter>() { return "counter"; }
template <>
const char* type_name<Gauge>() { return "gauge"; }
template <>
const char* type_name<Histogram>() { return "histogram"; }
}  // namespace

void append_labels(std::string& out, const std::vector<std::string>& names, const std::vector<std::string_view>& values) {
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (i) out.push_back(',');
    out += names[i];
    out += "=\"";
    append_escaped(out, values[i]);
    out.push_back('"');
  }
}

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds_->size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  size_t i = std::lower_bound(bounds_->begin(), bounds_->end(), v) - bounds_->begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::render(std::string& out, std::string_view name, std::string_view labels) const {
  uint64_t cumulative = 0;
  const std::string sep = labels.empty() ? "" : ",";
  for (size_t i = 0; i <= bounds_->size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    std::string le = i < bounds_->size() ? fmt::format("{}", (*bounds_)[i]) : "+Inf";
    out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, le, cumulative);
  }
  std::string braces = labels.empty() ? "" : fmt::format("{{{}}}", labels);
  out += fmt::format("{}_sum{} {}\n", name, braces, sum_.load(std::memory_order_relaxed));
  out += fmt::format("{}_count{} {}\n", name, braces, count_.load(std::memory_order_relaxed));
}

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
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name_, help_, name_, type_name<Series>());
  std::lock_guard lock(mu_);
  for (const auto& [labels, s] : series_) {
    if constexpr (std::is_same_v<Series, Histogram>) {
      s->render(out, name_, labels);
    } else {
      out += name_;
      if (!labels.empty()) out += "{" + labels + "}";
      out += " " + format_value(s->value()) + "\n";
    }
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

const std::vector<double>& duration_buckets() {
  static const std::vector<double> b{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                     1, 2.5, 5, 10, 30, 60, 120, 300, 600};
  return b;
}

const std::vector<double>& ttft_buckets() {
  static const std::vector<double> b{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                     1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560};
  return b;
}

const std::vector<double>& pick_buckets() {
  static const std::vector<double> b{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 1e-2};
  return b;
}

const std::vector<double>& itl_buckets() {
  static const std::vector<double> b{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                                     1, 2.5, 5, 7.5, 10, 20, 40, 80};
  return b;
}

}  // namespace sluice
