#include "core/prom_writer.h"

#include <fmt/format.h>

#include <cmath>

namespace sluice {

void append_prom_label_value(std::string& out, std::string_view v) {
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
}

void append_prom_labels(std::string& out, std::initializer_list<PromLabel> labels) {
  bool first = true;
  for (const auto& l : labels) {
    if (!first) out.push_back(',');
    first = false;
    out += l.name;
    out += "=\"";
    append_prom_label_value(out, l.value);
    out.push_back('"');
  }
}

void append_labels(std::string& out, const std::vector<std::string>& names, const std::vector<std::string_view>& values) {
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (i) out.push_back(',');
    out += names[i];
    out += "=\"";
    append_prom_label_value(out, values[i]);
    out.push_back('"');
  }
}

std::string format_prom_value(double v, PromFloats style) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (style == PromFloats::python && v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

void PromWriter::family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_.push_back(' ');
  for (char c : help) {
    if (c == '\\') out_ += "\\\\";
    else if (c == '\n') out_ += "\\n";
    else out_.push_back(c);
  }
  out_ += "\n# TYPE ";
  out_ += name;
  out_.push_back(' ');
  out_ += type;
  out_.push_back('\n');
}

void PromWriter::sample(std::string_view name, std::string_view labels, double v) {
  out_ += name;
  if (!labels.empty()) {
    out_.push_back('{');
    out_ += labels;
    out_.push_back('}');
  }
  out_.push_back(' ');
  out_ += format_prom_value(v, style_);
  out_.push_back('\n');
}

void PromWriter::sample(std::string_view name, std::initializer_list<PromLabel> labels, double v) {
  std::string l;
  append_prom_labels(l, labels);
  sample(name, l, v);
}

void PromWriter::histogram(std::string_view name, std::string_view labels, const HistogramData& h) {
  const std::string bucket = fmt::format("{}_bucket", name);
  const size_t n = h.bounds ? h.bounds->size() : 0;
  std::string l;
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= n; ++i) {
    cumulative += i < h.counts.size() ? h.counts[i] : 0;
    l.assign(labels);
    if (!l.empty()) l.push_back(',');
    l += "le=\"";
    l += i < n ? format_prom_value((*h.bounds)[i], style_) : "+Inf";
    l.push_back('"');
    sample(bucket, l, double(cumulative));
  }
  sample(fmt::format("{}_sum", name), labels, h.sum);
  sample(fmt::format("{}_count", name), labels, double(h.count));
}

}  // namespace sluice
