#include "gateway/generation.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "core/metrics/model_labels.h"
#include "core/openai/models_list.h"
#include "core/picker/policy_factory.h"
#include "gateway/admission_driver.h"
#include "gateway/render_client.h"
#include "gateway/signals/health_checker.h"
#include "gateway/signals/kv_event_subscriber.h"
#include "gateway/signals/scraper.h"

namespace sluice {

namespace {
std::atomic<uint64_t> next_runtime_id{1};
}

PoolRuntime::PoolRuntime(const PoolConfig& config, uint64_t id_, uint64_t seed, PoolSeries s)
    : id(id_), router(config, make_policy(config, seed)), health(router), series(s) {
  if (config.kv_events.enabled) {
    KvEventIndex::Options o;
    o.stale_after = config.kv_events.stale_after;
    o.recent_window = config.kv_events.recent_window;
    kv_index = std::make_shared<KvEventIndex>(config.endpoints.size(), o);
    if (!router.attach_kv_events(kv_index))
      spdlog::warn("pool {}: policy {} keeps no prefix index: kv_events are received but unused", config.name,
                   config.policy);
    else if (config.token_ids.source == TokenIdsConfig::Source::render)
      render = std::make_shared<RenderRuntime>(config.token_ids);
  }
  if (config.token_ids.source == TokenIdsConfig::Source::render && !render)
    spdlog::warn("pool {}: token_ids.source render is unused: no kv_events index the policy reads", config.name);
}

PoolRuntime::~PoolRuntime() { retire(); }

void PoolRuntime::retire() {
  // Stop the loops and drop our handles: the loops' own references end with them, on their
  // io_context's thread, so a strand is never destroyed after its io_context.
  if (scrapers) scrapers->stop();
  if (checkers) checkers->stop();
  if (kv_events) kv_events->stop();
  scrapers.reset();
  checkers.reset();
  kv_events.reset();
}

std::shared_ptr<Generation> build_generation(std::shared_ptr<const Config> config, const Generation* previous,
                                             const GenerationInputs& in, std::string& error) {
  uint64_t seed = in.seed;
  auto gen = std::make_shared<Generation>();
  gen->number = previous ? previous->number + 1 : 1;
  gen->config = config;
  for (const auto& pc : config->pools) {
    std::shared_ptr<PoolRuntime> reuse;
    if (previous && !pc.fingerprint.empty()) {
      auto it = previous->pools.find(pc.name);
      if (it != previous->pools.end() && it->second->config().fingerprint == pc.fingerprint) reuse = it->second;
    }
    if (!reuse) {
      PoolSeries series{&in.pick.with({pc.name}), &in.ttft_estimate.with({pc.name})};
      reuse = std::make_shared<PoolRuntime>(pc, next_runtime_id.fetch_add(1), seed++, series);
      // A changed pool (an endpoint added or removed, a limit changed) keeps the cache affinity
      // learned for the endpoints it still has.
      if (PoolRuntime* old = previous ? previous->pool(pc.name) : nullptr) {
        if (size_t kept = reuse->router.adopt_learned(old->router); kept > 0)
          spdlog::info("pool {}: what the picker learned of {} endpoint(s) (prefix index, pace) carried over to the new config", pc.name, kept);
        // Requests still running on the old runtime keep counting against the hard cap.
        const std::shared_ptr<PoolRuntime>& held = previous->pools.find(pc.name)->second;
        reuse->router.inherit_in_flight(std::shared_ptr<const PoolRouter>(held, &held->router));
      }
    }
    gen->pools.emplace(pc.name, std::move(reuse));
  }
  const auto created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  gen->models_json = models_list_json(*config, created);
  gen->models_created = created;
  for (const auto& m : config->models)
    gen->ok_requests.emplace(m.name, &in.requests.with({m.pool, m.name, "200", "ok"}));
  for (const auto& [name, l] : model_labels(*config)) {
    const std::initializer_list<std::string_view> labels{l.pool, l.model, l.adapter};
    gen->model_series.emplace(name, ModelSeries{&in.duration.with(labels), &in.ttft.with(labels), &in.itl.with(labels)});
  }
  gen->admission = make_admission(in.admission, *config, previous, error);
  if (!gen->admission) return nullptr;
  return gen;
}

}  // namespace sluice
