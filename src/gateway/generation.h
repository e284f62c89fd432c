// A config generation: everything the gateway derives from one Config snapshot, swapped whole on a
// SIGHUP reload (reload.h). A request takes the current generation once at its start
// (Gateway::current) and uses only it to its end, so a reload never changes the config, the routes
// or the router under a request in flight; the old generation lives until its last request ends.
//
// Pools survive reloads when their config is unchanged (same PoolConfig::fingerprint): the new
// generation shares the old PoolRuntime, so the prefix index, the scraped signals, the in-flight
// accounting, health and ejections, and the per-worker upstream connections (keyed by runtime id)
// carry over. A changed or new pool gets a fresh runtime (a changed one takes over the prefix index
// of the endpoints it keeps, PoolRouter::adopt_learned); a pool no longer in the config is retired
// (its scrapers and health checks stop) and freed when its last request ends.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "core/config.h"
#include "core/picker/pool_router.h"
#include "gateway/admission_runtime.h"
#include "gateway/observability/metrics.h"
#include "gateway/signals/pool_health.h"

namespace sluice {

class Scrapers;
class HealthCheckers;
class KvEventSubscriber;
class RenderRuntime;
struct AdmissionHost;

struct PoolSeries {
  Histogram* pick;           // picker decision time
  Histogram* ttft_estimate;  // a first token's TTFT over the picker's estimate
};

// The latency series of one configured model name ({pool, model, adapter}: core/metrics/
// model_labels.h), resolved when the generation is built: a request looks its series up once,
// never per token.
struct ModelSeries {
  Histogram* duration;
  Histogram* ttft;
  Histogram* itl;
};

class PoolRuntime {
 public:
  PoolRuntime(const PoolConfig& config, uint64_t id, uint64_t seed, PoolSeries series);
  ~PoolRuntime();
  PoolRuntime(const PoolRuntime&) = delete;
  PoolRuntime& operator=(const PoolRuntime&) = delete;

  const PoolConfig& config() const { return router.config(); }
  // Stops the background loops (scrapers, health checks); in-flight requests finish normally.
  void retire();

  const uint64_t id;  // unique per runtime in the process: keys the per-worker upstream slots
  PoolRouter router;
  PoolHealth health;
  const PoolSeries series;
  std::shared_ptr<Scrapers> scrapers;        // set when the server starts its loops
  std::shared_ptr<HealthCheckers> checkers;
  // Engine KV events (issue 15): the index the policy reads, set when the pool has events
  // addresses; its subscriber thread is started with the other loops.
  std::shared_ptr<KvEventIndex> kv_index;
  std::shared_ptr<KvEventSubscriber> kv_events;
  // The engine's token ids for the event index (`token_ids: {source: render}`, render_client.h):
  // set only when the pool's policy reads a kv_index.
  std::shared_ptr<RenderRuntime> render;
};

struct Generation {
  uint64_t number = 1;
  std::shared_ptr<const Config> config;
  std::map<std::string, std::shared_ptr<PoolRuntime>, std::less<>> pools;
  std::shared_ptr<AdmissionRuntime> admission;  // never null (the implicit gate without tenants)
  std::string models_json;
  int64_t models_created = 0;  // the `created` of every /v1/models entry
  std::map<std::string, Counter*, std::less<>> ok_requests;  // model -> {status 200, outcome ok}
  std::map<std::string, ModelSeries, std::less<>> model_series;  // configured model name -> its series

  // The series of configured model `name`, or null (not configured).
  const ModelSeries* series_for(std::string_view name) const {
    auto it = model_series.find(name);
    return it == model_series.end() ? nullptr : &it->second;
  }

  PoolRuntime* pool(std::string_view name) const {
    auto it = pools.find(name);
    return it == pools.end() ? nullptr : it->second.get();
  }
  PoolRouter* router(std::string_view name) const {
    PoolRuntime* p = pool(name);
    return p ? &p->router : nullptr;
  }
};

// What a generation is built from besides its config: the metric families its series live in,
// the admission layer's view of the process, and the seed of the pools' policies.
struct GenerationInputs {
  HistogramFamily& duration;  // pool, model, adapter
  HistogramFamily& ttft;      // pool, model, adapter
  HistogramFamily& itl;       // pool, model, adapter
  HistogramFamily& pick;
  HistogramFamily& ttft_estimate;  // pool
  CounterFamily& requests;
  const AdmissionHost& admission;
  uint64_t seed;
};

// The one builder of a whole generation, used by start-up and by reload: the pools (reusing the
// runtimes of `previous` whose pool fingerprint is unchanged; new runtimes have no loops yet, the
// server starts them) and the admission layer (kept when its sections are unchanged). Null with
// `error` set when the config's tenants do not validate.
std::shared_ptr<Generation> build_generation(std::shared_ptr<const Config> config, const Generation* previous,
                                             const GenerationInputs& in, std::string& error);

}  // namespace sluice
