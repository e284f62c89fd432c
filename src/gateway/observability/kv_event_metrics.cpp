#include "gateway/observability/kv_event_metrics.h"

#include <functional>
#include <vector>

#include "core/prom_writer.h"

namespace sluice {

namespace {

struct Series {
  const char* name;
  const char* type;
  const char* help;
  std::function<double(const KvEndpointStatus&)> value;
};

const std::vector<Series>& series() {
  using S = KvEndpointStatus;
  static const std::vector<Series> s = {
      {"sluice_kv_events_batches_total", "counter", "Event batches applied to the index.",
       [](const S& x) { return double(x.counters.batches); }},
      {"sluice_kv_events_total", "counter", "Events applied (stored, removed, cleared).",
       [](const S& x) { return double(x.counters.events); }},
      {"sluice_kv_events_decode_errors_total", "counter", "Messages or batches that could not be decoded (dropped).",
       [](const S& x) { return double(x.counters.decode_errors); }},
      {"sluice_kv_events_skipped_total", "counter", "Malformed events skipped inside decodable batches.",
       [](const S& x) { return double(x.counters.skipped_events); }},
      {"sluice_kv_events_duplicates_total", "counter", "Batches received twice (dropped).",
       [](const S& x) { return double(x.counters.duplicates); }},
      {"sluice_kv_events_gaps_total", "counter", "Sequence gaps detected.",
       [](const S& x) { return double(x.counters.gaps); }},
      {"sluice_kv_events_replays_total", "counter", "Replay requests sent (gaps and warm starts).",
       [](const S& x) { return double(x.counters.replays); }},
      {"sluice_kv_events_replay_failures_total", "counter", "Replays that timed out or could not fill a gap.",
       [](const S& x) { return double(x.counters.replay_failures); }},
      {"sluice_kv_events_resyncs_total", "counter", "Times the endpoint's blocks were cleared to take the stream as is.",
       [](const S& x) { return double(x.counters.resyncs); }},
      {"sluice_kv_events_reconnects_total", "counter", "Connections to the publisher (each clears the endpoint).",
       [](const S& x) { return double(x.counters.reconnects); }},
      {"sluice_kv_events_cleared_total", "counter", "AllBlocksCleared events.",
       [](const S& x) { return double(x.counters.cleared); }},
      {"sluice_kv_events_orphan_blocks_total", "counter", "Stored blocks dropped: parent unknown or no token ids.",
       [](const S& x) { return double(x.counters.orphans); }},
      {"sluice_kv_events_stored_blocks_total", "counter", "Blocks stored by events.",
       [](const S& x) { return double(x.counters.stored_blocks); }},
      {"sluice_kv_events_removed_blocks_total", "counter", "Blocks removed by events.",
       [](const S& x) { return double(x.counters.removed_blocks); }},
      {"sluice_kv_events_lag_seconds", "gauge", "Publisher timestamp to applied, of the last batch.",
       [](const S& x) { return x.last_lag_s; }},
      {"sluice_kv_events_last_seq", "gauge", "Sequence number of the last batch applied (-1: none).",
       [](const S& x) { return double(x.last_seq); }},
      {"sluice_kv_events_connected", "gauge", "1 while subscribed to the publisher.",
       [](const S& x) { return x.connected ? 1.0 : 0.0; }},
      {"sluice_kv_events_fresh", "gauge", "1 when the picker trusts the events (else the learned index).",
       [](const S& x) { return x.fresh ? 1.0 : 0.0; }},
      {"sluice_kv_index_blocks", "gauge", "Blocks the engine holds by its events.",
       [](const S& x) { return double(x.blocks); }},
      {"sluice_kv_evicting", "gauge", "1 while the engine evicts (a block removed in the last second): the eviction forecast acts.",
       [](const S& x) { return x.evicting ? 1.0 : 0.0; }},
      {"sluice_kv_unscheduled_blocks", "gauge",
       "Blocks this gateway's dispatches not yet scheduled by the engine will allocate (the forecast's evictions).",
       [](const S& x) { return double(x.unscheduled_blocks); }},
  };
  return s;
}

}  // namespace

void append_kv_event_metrics(std::string& out,
                             const std::map<std::string, std::shared_ptr<PoolRuntime>, std::less<>>& pools, Time now) {
  struct Row {
    std::string pool;
    std::vector<std::pair<std::string, KvEndpointStatus>> eps;
    size_t bytes = 0, blocks = 0;
  };
  std::vector<Row> rows;
  for (const auto& [name, pool] : pools) {
    if (!pool->kv_index) continue;
    Row r{name, {}, pool->kv_index->memory_bytes(), pool->kv_index->blocks()};
    for (size_t e = 0; e < pool->config().endpoints.size(); ++e)
      r.eps.emplace_back(pool->config().endpoints[e].name, pool->kv_index->status(e, now));
    rows.push_back(std::move(r));
  }
  if (rows.empty()) return;
  PromWriter w(out);
  for (const auto& s : series()) {
    w.family(s.name, s.type, s.help);
    for (const auto& r : rows)
      for (const auto& [ep, st] : r.eps) w.sample(s.name, {{"pool", r.pool}, {"endpoint", ep}}, s.value(st));
  }
  static constexpr const char* kSources[] = {"learned", "events", "recent"};
  w.family("sluice_kv_prompt_tokens_total", "counter", "Prompt tokens dispatched, by the source of their prediction.");
  for (const auto& r : rows)
    for (const auto& [ep, st] : r.eps)
      for (size_t i = 0; i < 3; ++i)
        w.sample("sluice_kv_prompt_tokens_total", {{"pool", r.pool}, {"endpoint", ep}, {"source", kSources[i]}},
                 double(st.counters.prompt_tokens[i]));
  w.family("sluice_kv_predicted_cached_tokens_total", "counter",
           "Prompt tokens predicted cached, by source (compare sluice_engine_prefix_cache_hits_tokens_total).");
  for (const auto& r : rows)
    for (const auto& [ep, st] : r.eps)
      for (size_t i = 0; i < 3; ++i)
        w.sample("sluice_kv_predicted_cached_tokens_total", {{"pool", r.pool}, {"endpoint", ep}, {"source", kSources[i]}},
                 double(st.counters.predicted_tokens[i]));
  w.family("sluice_kv_index_memory_bytes", "gauge", "Bytes held by the event index (blocks, hash map, recent window).");
  for (const auto& r : rows) w.sample("sluice_kv_index_memory_bytes", {{"pool", r.pool}}, double(r.bytes));
  w.family("sluice_kv_index_bytes_per_block", "gauge", "Index bytes per (block, endpoint) entry.");
  for (const auto& r : rows)
    w.sample("sluice_kv_index_bytes_per_block", {{"pool", r.pool}}, r.blocks ? double(r.bytes) / double(r.blocks) : 0.0);
}

}  // namespace sluice
