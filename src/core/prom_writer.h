// The one Prometheus text exposition (0.0.4) writer: HELP/TYPE headers, samples with escaped
// labels, histograms. Everything that serves /metrics writes through it: the gateway's registry
// and its collectors (endpoint series, health, admission) and the engine simulator's replicas.
// The parser is prom_text.h.
//
//   PromWriter w(out);
//   w.family("sluice_queue_depth", "gauge", "Requests waiting.");
//   w.sample("sluice_queue_depth", {{"pool", "chat"}, {"priority", "0"}}, 3);
//
// Numbers: Floats::shortest writes the shortest round-trip form (3 -> "3", 0.25 -> "0.25", the Go
// client's style, used by the gateway); Floats::python writes integral values with ".0" (3 ->
// "3.0"), as Python's prometheus_client does, so the simulator looks like vLLM byte for byte.
// Infinities and NaN are "+Inf", "-Inf", "NaN" in both.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/metrics/histogram.h"

namespace sluice {

struct PromLabel {
  std::string_view name, value;
};

enum class PromFloats { shortest, python };

// Appends `v` escaped as a label value (\\, \" and \n).
void append_prom_label_value(std::string& out, std::string_view v);
// Appends `a="x",b="y"` (no braces).
void append_prom_labels(std::string& out, std::initializer_list<PromLabel> labels);
void append_labels(std::string& out, const std::vector<std::string>& names, const std::vector<std::string_view>& values);
std::string format_prom_value(double v, PromFloats style = PromFloats::shortest);

class PromWriter {
 public:
  explicit PromWriter(std::string& out, PromFloats style = PromFloats::shortest) : out_(out), style_(style) {}

  // `# HELP` (docstring escaped) and `# TYPE` lines of one family.
  void family(std::string_view name, std::string_view type, std::string_view help);
  // One sample; `labels` is an already rendered label list (append_prom_labels), empty for none.
  void sample(std::string_view name, std::string_view labels, double v);
  void sample(std::string_view name, std::initializer_list<PromLabel> labels, double v);
  // The _bucket (cumulative, `le` after `labels`), _sum and _count samples of one series.
  void histogram(std::string_view name, std::string_view labels, const HistogramData& h);

  std::string& out() { return out_; }

 private:
  std::string& out_;
  PromFloats style_;
};

}  // namespace sluice
