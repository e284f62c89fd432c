#include "gateway/observability/endpoint_metrics.h"

#include <array>
#include <functional>
#include <vector>

#include "core/prom_writer.h"

namespace sluice {

namespace {

struct Series {
  const char* name;
  const char* type;
  const char* help;
  // Returns false when the endpoint has no value for this series (e.g. nothing scraped yet).
  std::function<bool(const EndpointSnapshot&, Time, double&)> value;
};

const std::vector<Series>& series() {
  static const std::vector<Series> s = {
      {"sluice_picks_total", "counter", "Dispatches per endpoint.",
       [](const EndpointSnapshot& e, Time, double& v) { v = double(e.load.picks_total); return true; }},
      {"sluice_endpoint_inflight_requests", "gauge", "The gateway's own in-flight count.",
       [](const EndpointSnapshot& e, Time, double& v) { v = double(e.load.in_flight); return true; }},
      {"sluice_endpoint_healthy", "gauge", "1 when the endpoint takes traffic.",
       [](const EndpointSnapshot& e, Time, double& v) { v = e.healthy ? 1 : 0; return true; }},
      {"sluice_endpoint_stale", "gauge", "1 when the endpoint's metrics are older than the stale threshold.",
       [](const EndpointSnapshot& e, Time, double& v) { v = e.stale ? 1 : 0; return true; }},
      {"sluice_endpoint_scrape_age_seconds", "gauge", "Age of the last successful metrics scrape.",
       [](const EndpointSnapshot& e, Time now, double& v) {
         if (!e.signals.present) return false;
         v = to_seconds(now - e.signals.scraped_at);
         return true;
       }},
      {"sluice_endpoint_scrape_errors_total", "counter", "Failed metrics scrapes.",
       [](const EndpointSnapshot& e, Time, double& v) { v = double(e.load.scrape_errors_total); return true; }},
      {"sluice_endpoint_waiting_requests", "gauge", "Engine-reported waiting requests.",
       [](const EndpointSnapshot& e, Time, double& v) { v = e.signals.waiting; return e.signals.present; }},
      {"sluice_endpoint_running_requests", "gauge", "Engine-reported running requests.",
       [](const EndpointSnapshot& e, Time, double& v) { v = e.signals.running; return e.signals.present; }},
      {"sluice_endpoint_kv_usage_ratio", "gauge", "Engine-reported KV cache usage, 0..1.",
       [](const EndpointSnapshot& e, Time, double& v) { v = e.signals.kv_usage; return e.signals.present; }},
      {"sluice_endpoint_duty_cycle_ratio", "gauge", "GPU busy fraction, 0..1 (engine gauge or DCGM exporter).",
       [](const EndpointSnapshot& e, Time, double& v) {
         v = e.signals.duty_cycle;
         return e.signals.present && e.signals.duty_cycle >= 0;
       }},
      {"sluice_endpoint_pace_ratio", "gauge",
       "The picker's learned step time of the endpoint over the pool's fastest (1: as fast; sluice policy).",
       [](const EndpointSnapshot& e, Time, double& v) {
         v = e.pace;
         return e.pace >= 0;
       }},
      {"sluice_endpoint_itl_calibration_ratio", "gauge",
       "The ITL the endpoint's decodes showed over the picker's model of their batches (>= 1; sluice policy).",
       [](const EndpointSnapshot& e, Time, double& v) {
         v = e.itl_calibration;
         return e.itl_calibration >= 0;
       }},
      {"sluice_prefix_prompt_tokens_total", "counter", "Estimated prompt tokens dispatched.",
       [](const EndpointSnapshot& e, Time, double& v) { v = double(e.load.input_tokens_total); return true; }},
      {"sluice_prefix_predicted_cached_tokens_total", "counter", "Prompt tokens the picker predicted cached.",
       [](const EndpointSnapshot& e, Time, double& v) { v = double(e.load.predicted_cached_tokens_total); return true; }},
      {"sluice_engine_prefix_cache_queries_tokens_total", "counter",
       "Engine-reported prefix cache lookups in tokens, as scraped.",
       [](const EndpointSnapshot& e, Time, double& v) { v = e.signals.prefix_queries; return e.signals.present; }},
      {"sluice_engine_prefix_cache_hits_tokens_total", "counter",
       "Engine-reported prefix cache hits in tokens, as scraped.",
       [](const EndpointSnapshot& e, Time, double& v) { v = e.signals.prefix_hits; return e.signals.present; }},
  };
  return s;
}

}  // namespace

void append_endpoint_metrics(std::string& out,
                             const std::map<std::string, std::shared_ptr<PoolRuntime>, std::less<>>& pools,
                             Time now) {
  std::vector<std::pair<std::string, std::vector<EndpointSnapshot>>> snapshots;
  for (const auto& [name, pool] : pools) snapshots.emplace_back(name, pool->router.snapshot(now));
  PromWriter w(out);
  for (const auto& s : series()) {
    w.family(s.name, s.type, s.help);
    for (const auto& [pool, endpoints] : snapshots) {
      for (const auto& ep : endpoints) {
        double v = 0;
        if (s.value(ep, now, v)) w.sample(s.name, {{"pool", pool}, {"endpoint", ep.name}}, v);
      }
    }
  }
  // The pools' most asked-for prefixes, by rank (a prefix's hash would be an unbounded label): how
  // much demand each carries and on how many endpoints the picker's index holds it, so a hot prefix
  // piled on one replica, or spread and contracting again, shows over time.
  constexpr size_t kHotPrefixes = 3;
  std::vector<std::pair<std::string_view, std::vector<HotPrefix>>> hot;
  for (const auto& [name, pool] : pools) hot.emplace_back(name, pool->router.hot_prefixes(now, kHotPrefixes));
  static const std::array<std::string, kHotPrefixes> ranks = {"1", "2", "3"};
  struct HotSeries {
    const char* name;
    const char* help;
    double (*value)(const HotPrefix&);
  };
  static constexpr HotSeries hot_series[] = {
      {"sluice_hot_prefix_requests_per_second",
       "Dispatches per second for the pool's most asked-for prefixes (rank 1 = most), decayed over ~2 s.",
       [](const HotPrefix& h) { return h.requests_per_s; }},
      {"sluice_hot_prefix_holders", "Endpoints the picker's prefix index holds each of the pool's most asked-for prefixes on.",
       [](const HotPrefix& h) { return static_cast<double>(h.holders); }},
  };
  for (const HotSeries& s : hot_series) {
    w.family(s.name, "gauge", s.help);
    for (const auto& [pool, list] : hot)
      for (size_t i = 0; i < list.size(); ++i) w.sample(s.name, {{"pool", pool}, {"rank", ranks[i]}}, s.value(list[i]));
  }
}

}  // namespace sluice
