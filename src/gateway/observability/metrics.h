// The gateway's metrics registry, rendered as Prometheus text on the admin listener's /metrics.
// Families are declared once (name, help, label names) and series are looked up by label values;
// the returned series reference is stable for the registry's life, so hot paths may keep it.
// Values are atomics; a family's mutex is taken only to find or create a series. Series whose
// values live elsewhere (a PoolRouter's in-flight counts, scraped engine gauges) are rendered at
// scrape time by collectors. See docs/metrics.md for the names and their meaning.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class Counter {
 public:
  void inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(const std::vector<double>* bounds);
  void observe(double v);
  void render(std::string& out, std::string_view name, std::string_view labels) const;

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket (not cumulative) + one for +Inf
  std::atomic<double> sum_{0};
  std::atomic<uint64_t> count_{0};
};

// Appends `name="value"` pairs, escaped as the exposition format requires.
void append_labels(std::string& out, const std::vector<std::string>& names, const std::vector<std::string_view>& values);

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

// Bucket bounds used by the gateway (seconds).
const std::vector<double>& duration_buckets();
const std::vector<double>& ttft_buckets();  // the engines' TTFT buckets (model-server-contract.md)
const std::vector<double>& itl_buckets();
const std::vector<double>& pick_buckets();  // picker decision time: 1 us .. 10 ms

}  // namespace sluice
