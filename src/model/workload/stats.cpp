#include "model/workload/stats.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "core/json_escape.h"

namespace sluice::workload {

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * double(sorted.size() - 1);
  const auto lo = size_t(std::floor(pos));
  const auto hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - double(lo));
}

Distribution distribution_of(std::vector<double> v) {
  Distribution d;
  d.n = v.size();
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  d.mean = sum / double(v.size());
  d.p50 = percentile(v, 0.50);
  d.p90 = percentile(v, 0.90);
  d.p99 = percentile(v, 0.99);
  d.max = v.back();
  return d;
}

namespace {

std::optional<double> itl_of(const RequestRecord& r) {
  if (!r.ttft || r.output_tokens < 2) return std::nullopt;
  return to_seconds(r.e2e - *r.ttft) / double(r.output_tokens - 1);
}

bool meets_slo(const RequestRecord& r, const SloSpec& slo) {
  if (!r.ok()) return false;
  if (r.ttft && *r.ttft > slo.ttft) return false;
  if (!r.ttft && r.e2e > slo.ttft) return false;  // non-streamed / embeddings: whole response
  if (auto itl = itl_of(r); itl && *itl > to_seconds(slo.itl)) return false;
  return true;
}

}  // namespace

Figures summarize(std::span<const RequestRecord> records, const SloSpec& slo) {
  Figures f;
  f.requests = records.size();
  if (records.empty()) return f;
  Duration first = records[0].arrival, last = records[0].arrival + records[0].e2e;
  std::vector<double> ttft, itl, e2e, queue;
  int64_t in_tokens = 0, out_tokens = 0;
  size_t good = 0;
  struct TenantAcc {
    std::vector<double> ttft, e2e;
    size_t good = 0;
  };
  std::map<std::string, TenantAcc> acc;
  for (const auto& r : records) {
    first = std::min(first, r.arrival);
    last = std::max(last, r.arrival + r.e2e);
    f.by_status[r.status] += 1;
    auto& t = f.tenants[r.tenant];
    auto& ta = acc[r.tenant];
    t.requests += 1;
    if (!r.ok()) continue;
    f.ok += 1;
    t.ok += 1;
    in_tokens += r.input_tokens;
    out_tokens += r.output_tokens;
    t.input_tokens += r.input_tokens;
    t.output_tokens += r.output_tokens;
    if (r.ttft) {
      ttft.push_back(to_seconds(*r.ttft));
      ta.ttft.push_back(to_seconds(*r.ttft));
    }
    if (auto x = itl_of(r)) itl.push_back(*x);
    e2e.push_back(to_seconds(r.e2e));
    ta.e2e.push_back(to_seconds(r.e2e));
    queue.push_back(to_seconds(r.queue));
    if (meets_slo(r, slo)) good += 1, ta.good += 1;
  }
  f.span_s = std::max(1e-9, to_seconds(last - first));
  f.requests_per_s = double(f.ok) / f.span_s;
  f.input_tokens_per_s = double(in_tokens) / f.span_s;
  f.output_tokens_per_s = double(out_tokens) / f.span_s;
  f.goodput_rps = double(good) / f.span_s;
  f.slo_attainment = double(good) / double(f.requests);
  f.reject_rate = double(f.requests - f.ok) / double(f.requests);
  f.ttft = distribution_of(std::move(ttft));
  f.itl = distribution_of(std::move(itl));
  f.e2e = distribution_of(std::move(e2e));
  f.queue = distribution_of(std::move(queue));
  for (auto& [name, t] : f.tenants) {
    auto& a = acc[name];
    t.output_tokens_per_s = double(t.output_tokens) / f.span_s;
    t.goodput_rps = double(a.good) / f.span_s;
    t.ttft = distribution_of(std::move(a.ttft));
    t.e2e = distribution_of(std::move(a.e2e));
  }
  return f;
}

namespace {

std::string num(double x) {
  if (!std::isfinite(x)) return "null";
  return fmt::format("{:.6g}", x);
}

std::string dist_json(const Distribution& d) {
  return fmt::format("{{\"n\":{},\"mean\":{},\"p50\":{},\"p90\":{},\"p99\":{},\"max\":{}}}", d.n, num(d.mean),
                     num(d.p50), num(d.p90), num(d.p99), num(d.max));
}

}  // namespace

std::string to_json(const Figures& f) {
  std::string out = "{\"labels\":{";
  for (size_t i = 0; i < f.labels.size(); ++i) {
    if (i) out += ',';
    append_json_string(out, f.labels[i].first);
    out += ':';
    append_json_string(out, f.labels[i].second);
  }
  out += fmt::format("}},\"requests\":{},\"ok\":{},\"span_s\":{},\"requests_per_s\":{},\"input_tokens_per_s\":{},"
                     "\"output_tokens_per_s\":{},\"goodput_rps\":{},\"slo_attainment\":{},\"reject_rate\":{},",
                     f.requests, f.ok, num(f.span_s), num(f.requests_per_s), num(f.input_tokens_per_s),
                     num(f.output_tokens_per_s), num(f.goodput_rps), num(f.slo_attainment), num(f.reject_rate));
  out += "\"by_status\":{";
  bool first = true;
  for (const auto& [status, n] : f.by_status) {
    out += fmt::format("{}\"{}\":{}", first ? "" : ",", status, n);
    first = false;
  }
  out += "},";
  out += fmt::format("\"ttft_s\":{},\"itl_s\":{},\"e2e_s\":{},\"queue_s\":{},\"prefix_hit_rate\":{},", dist_json(f.ttft),
                     dist_json(f.itl), dist_json(f.e2e), dist_json(f.queue),
                     f.prefix_hit_rate ? num(*f.prefix_hit_rate) : "null");
  out += "\"tenants\":{";
  first = true;
  for (const auto& [name, t] : f.tenants) {
    if (!first) out += ',';
    first = false;
    append_json_string(out, name);
    out += fmt::format(":{{\"requests\":{},\"ok\":{},\"input_tokens\":{},\"output_tokens\":{},\"output_tokens_per_s\":{},"
                       "\"goodput_rps\":{},\"ttft_s\":{},\"e2e_s\":{}}}",
                       t.requests, t.ok, t.input_tokens, t.output_tokens, num(t.output_tokens_per_s),
                       num(t.goodput_rps), dist_json(t.ttft), dist_json(t.e2e));
  }
  out += "}}";
  return out;
}

std::string to_table(std::span<const Figures> rows) {
  if (rows.empty()) return "";
  std::vector<std::string> head;
  for (const auto& [k, v] : rows[0].labels) head.push_back(k);
  const char* cols[] = {"req",   "ok%",    "req/s",  "out tok/s", "ttft p50", "ttft p90", "ttft p99",
                        "itl p50", "itl p90", "e2e p50", "e2e p90", "goodput", "hit rate"};
  std::vector<std::vector<std::string>> cells;
  auto secs = [](double s) { return s >= 10 ? fmt::format("{:.1f}s", s) : s >= 1 ? fmt::format("{:.2f}s", s) : fmt::format("{:.0f}ms", s * 1000); };
  for (const auto& f : rows) {
    std::vector<std::string> c;
    for (const auto& [k, v] : f.labels) c.push_back(v);
    c.push_back(fmt::format("{}", f.requests));
    c.push_back(fmt::format("{:.1f}", f.requests ? 100.0 * double(f.ok) / double(f.requests) : 0.0));
    c.push_back(fmt::format("{:.2f}", f.requests_per_s));
    c.push_back(fmt::format("{:.0f}", f.output_tokens_per_s));
    c.push_back(secs(f.ttft.p50));
    c.push_back(secs(f.ttft.p90));
    c.push_back(secs(f.ttft.p99));
    c.push_back(fmt::format("{:.1f}ms", f.itl.p50 * 1000));
    c.push_back(fmt::format("{:.1f}ms", f.itl.p90 * 1000));
    c.push_back(secs(f.e2e.p50));
    c.push_back(secs(f.e2e.p90));
    c.push_back(fmt::format("{:.2f}", f.goodput_rps));
    c.push_back(f.prefix_hit_rate ? fmt::format("{:.1f}%", *f.prefix_hit_rate * 100) : "-");
    cells.push_back(std::move(c));
  }
  for (const char* c : cols) head.push_back(c);
  std::vector<size_t> width(head.size());
  for (size_t i = 0; i < head.size(); ++i) {
    width[i] = head[i].size();
    for (const auto& row : cells) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); ++i) out += fmt::format("{}{:>{}}", i ? "  " : "", row[i], width[i]);
    out += '\n';
  };
  line(head);
  for (const auto& row : cells) line(row);
  return out;
}

std::string tenant_table(const Figures& f) {
  std::string out = fmt::format("{:>12}  {:>7}  {:>6}  {:>10}  {:>9}  {:>9}  {:>9}\n", "tenant", "req", "ok%",
                                "out tok/s", "ttft p50", "ttft p90", "goodput");
  for (const auto& [name, t] : f.tenants)
    out += fmt::format("{:>12}  {:>7}  {:>6.1f}  {:>10.0f}  {:>8.0f}ms  {:>8.0f}ms  {:>9.2f}\n", name, t.requests,
                       t.requests ? 100.0 * double(t.ok) / double(t.requests) : 0.0, t.output_tokens_per_s,
                       t.ttft.p50 * 1000, t.ttft.p90 * 1000, t.goodput_rps);
  return out;
}

}  // namespace sluice::workload
