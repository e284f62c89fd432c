#include "sim/faults.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <charconv>
#include <cmath>

namespace sluice::sim {

namespace {

bool valid_rate(double r) { return std::isfinite(r) && r >= 0 && r <= 1; }

std::optional<double> to_double(std::string_view s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

double* rate_slot(FaultConfig& f, std::string_view status) {
  if (status == "429") return &f.rate_429;
  if (status == "500") return &f.rate_500;
  if (status == "503") return &f.rate_503;
  if (status == "400") return &f.rate_400;
  return nullptr;
}

std::string_view metrics_name(MetricsFault m) {
  switch (m) {
    case MetricsFault::ok: return "ok";
    case MetricsFault::freeze: return "freeze";
    case MetricsFault::fail: return "fail";
    case MetricsFault::slow: return "slow";
  }
  return "ok";
}

std::string_view render_name(RenderFault r) {
  switch (r) {
    case RenderFault::ok: return "ok";
    case RenderFault::error: return "error";
    case RenderFault::garbage: return "garbage";
    case RenderFault::slow: return "slow";
    case RenderFault::missing: return "missing";
  }
  return "ok";
}

}  // namespace

std::optional<MetricsFault> parse_metrics_fault(std::string_view s) {
  if (s == "ok" || s == "none") return MetricsFault::ok;
  if (s == "freeze") return MetricsFault::freeze;
  if (s == "fail") return MetricsFault::fail;
  if (s == "slow") return MetricsFault::slow;
  return std::nullopt;
}

std::optional<std::string> FaultConfig::set_error_rates(std::string_view spec) {
  FaultConfig next = *this;
  size_t start = 0;
  while (start <= spec.size() && !spec.empty()) {
    size_t end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    const auto item = spec.substr(start, end - start);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return fmt::format("error rate '{}': expected STATUS=RATE", item);
    double* slot = rate_slot(next, item.substr(0, eq));
    if (!slot) return fmt::format("error rate '{}': status must be 400, 429, 500 or 503", item);
    auto r = to_double(item.substr(eq + 1));
    if (!r || !valid_rate(*r)) return fmt::format("error rate '{}': rate must be within [0, 1]", item);
    *slot = *r;
    start = end + 1;
  }
  *this = next;
  return std::nullopt;
}

std::optional<std::string> FaultConfig::set_latency_spike(std::string_view spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string_view::npos) return fmt::format("latency spike '{}': expected P:MS", spec);
  auto p = to_double(spec.substr(0, colon));
  auto ms = to_double(spec.substr(colon + 1));
  if (!p || !valid_rate(*p) || !ms || *ms < 0)
    return fmt::format("latency spike '{}': need 0 <= P <= 1 and MS >= 0", spec);
  spike_probability = *p;
  spike_ms = *ms;
  return std::nullopt;
}

std::optional<std::string> FaultConfig::apply_json(std::string_view body) {
  using namespace simdjson;
  dom::parser parser;
  dom::element doc;
  if (parser.parse(body.data(), body.size()).get(doc)) return "malformed JSON";
  dom::object obj;
  if (doc.get_object().get(obj)) return "expected a JSON object";
  FaultConfig next = *this;
  if (bool reset = false; !obj["reset"].get_bool().get(reset) && reset) next = FaultConfig{};
  for (auto [key, value] : obj) {
    if (key == "reset") continue;
    if (key == "error_rate") {
      dom::object rates;
      if (value.get_object().get(rates)) return "error_rate must be an object";
      for (auto [status, rate] : rates) {
        double* slot = rate_slot(next, status);
        double r = 0;
        if (!slot) return fmt::format("error_rate: unknown status '{}'", std::string_view(status));
        if (rate.get_double().get(r) || !valid_rate(r)) return "error_rate values must be numbers within [0, 1]";
        *slot = r;
      }
    } else if (key == "latency_spike") {
      double p = 0, ms = 0;
      if (value["probability"].get_double().get(p) || value["ms"].get_double().get(ms) || !valid_rate(p) || ms < 0)
        return "latency_spike needs probability within [0, 1] and ms >= 0";
      next.spike_probability = p;
      next.spike_ms = ms;
    } else if (key == "hang") {
      if (value.get_bool().get(next.hang)) return "hang must be a boolean";
    } else if (key == "exit") {
      std::string_view s;
      if (value.get_string().get(s)) return "exit must be \"replica\" or \"process\"";
      if (s == "replica") next.exit = ExitFault::replica;
      else if (s == "process") next.exit = ExitFault::process;
      else if (s == "none") next.exit = ExitFault::none;
      else return "exit must be \"replica\" or \"process\"";
    } else if (key == "metrics") {
      std::string_view s;
      if (value.get_string().get(s)) return "metrics must be a string";
      auto m = parse_metrics_fault(s);
      if (!m) return "metrics must be one of ok, freeze, fail, slow";
      next.metrics = *m;
    } else if (key == "metrics_delay_ms") {
      double ms = 0;
      if (value.get_double().get(ms) || ms < 0 || ms > 600000) return "metrics_delay_ms must be within [0, 600000]";
      next.metrics_delay_ms = ms;
    } else if (key == "render") {
      std::string_view s;
      if (value.get_string().get(s)) return "render must be a string";
      if (s == "ok") next.render = RenderFault::ok;
      else if (s == "error") next.render = RenderFault::error;
      else if (s == "garbage") next.render = RenderFault::garbage;
      else if (s == "slow") next.render = RenderFault::slow;
      else if (s == "missing") next.render = RenderFault::missing;
      else return "render must be one of ok, error, garbage, slow, missing";
    } else if (key == "render_delay_ms") {
      double ms = 0;
      if (value.get_double().get(ms) || ms < 0 || ms > 600000) return "render_delay_ms must be within [0, 600000]";
      next.render_delay_ms = ms;
    } else {
      return fmt::format("unknown fault '{}'", std::string_view(key));
    }
  }
  *this = next;
  return std::nullopt;
}

std::string FaultConfig::to_json() const {
  return fmt::format(
      R"({{"error_rate":{{"400":{},"429":{},"500":{},"503":{}}},"latency_spike":{{"probability":{},"ms":{}}},)"
      R"("hang":{},"exit":"{}","metrics":"{}","metrics_delay_ms":{},"render":"{}","render_delay_ms":{}}})",
      rate_400, rate_429, rate_500, rate_503, spike_probability, spike_ms, hang ? "true" : "false",
      exit == ExitFault::none ? "none" : exit == ExitFault::replica ? "replica" : "process", metrics_name(metrics),
      metrics_delay_ms, render_name(render), render_delay_ms);
}

FaultDecision decide(const FaultConfig& f, std::mt19937_64& rng) {
  FaultDecision d;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double total = f.rate_400 + f.rate_429 + f.rate_500 + f.rate_503;
  if (total > 0) {
    double x = u(rng);
    if (x < f.rate_429) d.error_status = 429;
    else if ((x -= f.rate_429) < f.rate_500) d.error_status = 500;
    else if ((x -= f.rate_500) < f.rate_503) d.error_status = 503;
    else if ((x -= f.rate_503) < f.rate_400) d.error_status = 400;
  }
  if (f.spike_probability > 0 && u(rng) < f.spike_probability) d.extra_delay_ms = f.spike_ms;
  return d;
}

}  // namespace sluice::sim
