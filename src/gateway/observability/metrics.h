// The gateway's metrics registry, rendered as Prometheus text on the admin listener's /metrics.
// Families are declared once (name, help, label names) and series are looked up by label values;
// the returned series reference is stable for the registry's life, so hot paths may keep it.
// Counters and histograms are sharded per worker thread and merged at scrape time (core/metrics/):
// recording takes no lock and writes no cache line another worker writes. A family's mutex is
// taken only to find or create a series, so hot paths resolve their series once and keep the
// reference. Series whose values live elsewhere (a PoolRouter's in-flight counts, scraped engine
// gauges) are rendered at scrape time by collectors, through the same PromWriter. See docs/metrics.md for the names and their meaning.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/metrics/histogram.h"
#include "core/metrics/series.h"
#include "core/prom_writer.h"

namespace sluice {

template <typename Series>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> labels, std::vector<double> bounds = {})
      : name_(std::move(name)), help_(std::move(help)), labels_(std::move(labels)), bounds_(std::move(bounds)) {}
  // The series for these label values (in the family's label order); created on first use.
  Series& with(std::initializer_list<std::string_view> values);
  void render(std::string& out, std::string_view type) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_, help_;
  std::vector<std::string> labels_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Series>> series_;  // key: rendered label set
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class MetricsRegistry {
 public:
  // Registering a name again returns the existing family (labels and help of the first).
  CounterFamily& counter(std::string name, std::string help, std::vector<std::string> labels);
  GaugeFamily& gauge(std::string name, std::string help, std::vector<std::string> labels);
  HistogramFamily& histogram(std::string name, std::string help, std::vector<std::string> labels,
                             std::vector<double> bounds);
  // A collector appends complete exposition text (HELP, TYPE and samples) at every scrape.
  void add_collector(std::function<void(std::string& out)> collector);
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<CounterFamily>> counters_;
  std::vector<std::unique_ptr<GaugeFamily>> gauges_;
  std::vector<std::unique_ptr<HistogramFamily>> histograms_;
  std::vector<std::function<void(std::string&)>> collectors_;
};

}  // namespace sluice
