#include "fleetsim/fleet_sim.h"

#include <chrono>
#include <deque>
#include <fmt/format.h>
#include <queue>
#include <unordered_map>

#include "core/admission/admission_queue.h"
#include "core/admission/dispatcher.h"
#include "core/admission/fair_share.h"
#include "core/admission/outcome.h"
#include "core/config.h"
#include "core/json_escape.h"
#include "core/picker/oracle_policy.h"
#include "core/picker/peer_report.h"
#include "core/picker/policy_factory.h"
#include "core/picker/pool_router.h"
#include "core/picker/shed_refusal.h"
#include "core/prefix/kv_event_index.h"
#include "core/openai/request.h"
#include "fleetsim/hot_prefix_probe.h"

namespace sluice::fleetsim {
namespace {

using workload::RequestRecord;
using workload::WorkloadRequest;

enum class EventKind { arrival, step_end, scrape, kv_events, share_load, peer_report, retry };

struct Event {
  Time t;
  uint64_t seq;
  EventKind kind;
  size_t replica;  // step_end, kv_events: the replica; retry: the request's id
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

// One request between its arrival and its last token.
struct Flight {
  uint64_t id = 0;
  std::string tenant;
  std::string group;     // with FleetConfig::trace
  std::string explain;   // with FleetConfig::trace 2: the pick's explanation
  int endpoint = -1;     // -1: never dispatched
  int64_t engine_cached = -1;  // the engine's cached prompt tokens at admission (-1: not admitted)
  TenantId tenant_id = 0;
  Time sent{};
  Time dispatched{};
  std::optional<Time> first_token;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t predicted_cached = 0;
  float expected_ttft_ms = 0;  // the chosen candidate's (Candidate::expected_ttft_ms; 0: none)
  int source = 0;  // KvEventIndex::Source of the prediction (learned without events)
  bool admitted = false;  // the engine's cached tokens were counted
  bool whole = false;     // a whole answer (FleetConfig::whole_answers): the gateway hears of it at its end
  size_t gateway = 0;     // the gateway replica that placed it
  DispatchGuard guard;
};

// A request waiting at a gateway (its admission queue) or for its client's retry.
struct Queued {
  WorkloadRequest req;
  uint64_t id;
  Time sent;
  std::string text;  // at a gateway: req.rendered(), rendered once when it was queued
};

// A gateway's admission queue and dispatcher: the live gateway's objects (core/admission), not a
// copy of their rule. Without tenants (FleetConfig::fair_queue off) it is the live gateway's
// implicit gate: every request one tenant's (so first come, first placed), no fair share of the
// slots, the same queue limits and TTL (503 queue_timeout past it).
struct Gate {
  AdmissionQueue queue;
  Dispatcher dispatcher;
  std::unordered_map<uint64_t, Queued> parked;  // in `queue`, by id (the queue's cookie)
  Gate(QueueConfig q, FairShareConfig f) : queue(std::move(q)), dispatcher(f) {}
};

struct Replica {
  std::unique_ptr<engine::Engine> engine;
  Duration busy{}, busy_at_scrape{};
  std::deque<kv::EventBatch> kv_in_transit;  // published, not yet delivered (a fixed delay: FIFO)
  int64_t kv_seq = 0;
};

struct Gateway {
  std::unique_ptr<PoolRouter> router;
  std::shared_ptr<KvEventIndex> events;  // null: the learned index only
  std::unique_ptr<PeerSender> sender;    // with share_load
  std::unique_ptr<Gate> gate;            // with a gateway queue (FleetConfig::max_in_flight_per_endpoint or fair_queue)
};

// A peer-load report on its way to the other gateways (a fixed delay: FIFO).
struct PeerInTransit {
  size_t from;
  std::string payload;
};

PoolConfig pool_config(const FleetConfig& cfg) {
  PoolConfig pool;
  pool.name = "fleet";
  pool.policy = cfg.policy;
  pool.policy_params = cfg.policy_params;
  pool.scrape.interval = cfg.scrape_interval;
  pool.scrape.stale_after = cfg.stale_after;
  pool.max_in_flight_per_endpoint = cfg.max_in_flight_per_endpoint > 0 ? cfg.max_in_flight_per_endpoint : 1 << 30;
  for (size_t i = 0; i < cfg.replicas; ++i) {
    EndpointConfig e;
    e.name = fmt::format("replica-{}", i);
    e.address = Address{"127.0.0.1", uint16_t(20000 + i % 40000)};
    pool.endpoints.push_back(e);
  }
  return pool;
}

class Simulation {
 public:
  Simulation(const FleetConfig& cfg, std::unique_ptr<workload::Workload> wl) : cfg_(cfg), wl_(std::move(wl)) {
    const auto pool = pool_config(cfg);
    for (size_t g = 0; g < cfg.gateways; ++g) {
      std::unique_ptr<Policy> policy;
      if (cfg.policy == "oracle") {
        PolicyParams params(pool);
        auto sp = SluiceParams::from(params);
        params.reject_unknown("oracle");
        policy = std::make_unique<OraclePolicy>(
            [this](size_t endpoint, const PickRequest&) { return true_cached_tokens(endpoint); }, sp, pool.kind);
      } else {
        policy = make_policy(pool, cfg.seed + g * 104729);
      }
      Gateway gw;
      gw.router = std::make_unique<PoolRouter>(pool, std::move(policy));
      if (cfg.kv_events) {
        KvEventIndex::Options o;
        o.recent_window = cfg.kv_recent_window;
        gw.events = std::make_shared<KvEventIndex>(cfg.replicas, o);
        if (!gw.router->attach_kv_events(gw.events))
          throw ConfigError("policy " + cfg.policy + " keeps no prefix index: kv events would be unused");
        for (size_t i = 0; i < cfg.replicas; ++i) {  // subscribed from the start, in sequence
          gw.events->set_connected(i, true, Time{});
          gw.events->set_synced(i, true);
        }
      }
      if (cfg.share_load) {
        const std::string id = fmt::format("gateway-{}", g);
        PeerLoad::Options o;
        o.ttl = std::max<Duration>(std::chrono::seconds(1), 20 * cfg.share_load_interval);
        gw.router->share_load(id, o);
        gw.sender = std::make_unique<PeerSender>(id, g + 1, o.ttl / 4);
      }
      gateways_.push_back(std::move(gw));
    }
    router_ = gateways_[0].router.get();
    if (cfg.max_in_flight_per_endpoint > 0 || cfg.fair_queue) {
      QueueConfig queue;
      queue.default_ttl = cfg.queue_ttl;
      FairShareConfig share;
      share.enabled = cfg.fair_queue && cfg.fair_share;  // the implicit gate: one tenant, no shares
      for (auto& gw : gateways_) gw.gate = std::make_unique<Gate>(queue, share);
    }
    for (size_t i = 0; i < cfg.replicas; ++i) {
      auto ec = cfg.engine;
      ec.seed = cfg.engine.seed + i * 7919;
      if (i + cfg.slow_replicas >= cfg.replicas) ec.cost = ec.cost.scaled(cfg.slow_factor);
      replicas_.push_back(Replica{std::make_unique<engine::Engine>(ec), {}, {}, {}, 0});
      if (cfg.kv_events) replicas_.back().engine->enable_kv_events(true);
    }
  }

  FleetResult run() {
    const auto wall0 = std::chrono::steady_clock::now();
    if (wl_->arrivals().kind == workload::ArrivalKind::concurrency) {
      for (int i = 0; i < wl_->arrivals().concurrency; ++i) pull_next(Time{});
    } else {
      pull_next(Time{});
    }
    push(Time{}, EventKind::scrape, 0);
    if (cfg_.share_load && gateways_.size() > 1) push(Time{}, EventKind::share_load, 0);
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.t;
      switch (e.kind) {
        case EventKind::arrival: on_arrival(); break;
        case EventKind::step_end: on_step_end(e.replica); break;
        case EventKind::scrape: on_scrape(); break;
        case EventKind::kv_events: on_kv_events(e.replica); break;
        case EventKind::share_load: on_share_load(); break;
        case EventKind::peer_report: on_peer_report(); break;
        case EventKind::retry: on_retry(e.replica); break;
      }
    }
    FleetResult r;
    r.figures = workload::summarize(records_, cfg_.slo);
    r.workload_description = wl_->describe();
    int64_t q = 0, h = 0;
    r.picks_min = INT64_MAX;
    std::vector<int64_t> picks(replicas_.size(), 0);
    for (const auto& gw : gateways_) {
      const auto snap = gw.router->snapshot(now_);
      for (size_t i = 0; i < replicas_.size(); ++i) picks[i] += snap[i].load.picks_total;
    }
    for (size_t i = 0; i < replicas_.size(); ++i) {
      const auto& c = replicas_[i].engine->counters();
      q += c.prefix_queries, h += c.prefix_hits;
      r.preemptions += c.preemptions;
      r.steps += c.steps;
      r.picks_min = std::min(r.picks_min, picks[i]);
      r.picks_max = std::max(r.picks_max, picks[i]);
    }
    r.predicted_cached_tokens = predicted_cached_;
    r.engine_cached_tokens = engine_cached_;
    r.kv_event_batches = kv_batches_;
    r.peer_reports = peer_reports_;
    r.client_retries = client_retries_;
    r.ttft_estimate = ttft_estimate_of(ttft_ratios_);
    for (size_t k = 0; k < 3; ++k)
      r.by_source[k] = {by_source_[k][0], by_source_[k][1], by_source_[k][2]};
    r.prefix_hit_rate = q ? double(h) / double(q) : 0.0;
    r.figures.prefix_hit_rate = r.prefix_hit_rate;
    r.mean_kv_usage = kv_samples_ ? kv_sum_ / double(kv_samples_) : 0.0;
    r.hot_group = std::string(hot_.group());
    r.hot_prefix_blocks = hot_.prefix_blocks();
    r.hot_samples = hot_.samples();
    r.trace = std::move(trace_);
    r.virtual_seconds = to_seconds(now_);
    r.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    return r;
  }

 private:
  void push(Time t, EventKind k, size_t replica) { events_.push(Event{t, seq_++, k, replica}); }

  // Takes the next workload request (if any) and schedules its arrival.
  void pull_next(Time not_before) {
    if (exhausted_) return;
    auto r = wl_->next();
    if (!r) {
      exhausted_ = true;
      return;
    }
    const Time t = std::max(not_before, Time(r->arrival));
    pending_.push_back(std::move(*r));
    push(t, EventKind::arrival, 0);
  }

  bool closed_loop() const { return wl_->arrivals().kind == workload::ArrivalKind::concurrency; }
  bool done() const {
    for (const auto& gw : gateways_)
      if (gw.gate && !gw.gate->parked.empty()) return false;
    return exhausted_ && flights_.empty() && pending_.empty() && retrying_.empty();
  }

  TenantId tenant_id(const std::string& name) {
    auto [it, fresh] = tenant_ids_.emplace(name, TenantId(tenant_ids_.size()));
    return it->second;
  }

  void on_arrival() {
    WorkloadRequest req = std::move(pending_.front());
    pending_.pop_front();
    if (!closed_loop()) pull_next(now_);
    admit(std::move(req), next_id_++, now_);
  }

  // A refused request whose client comes back: admitted again as a new arrival, its times still
  // counted from its first attempt.
  void on_retry(uint64_t id) {
    auto it = retrying_.find(id);
    if (it == retrying_.end()) return;
    Queued q = std::move(it->second);
    retrying_.erase(it);
    admit(std::move(q.req), q.id, q.sent);
  }

  // True when the client of this refused request retries it (FleetConfig::client_retries) after
  // `wait` (the Retry-After the gateway answered; 0: none, not retried): it is held until then and
  // nothing is recorded yet.
  bool retry_later(WorkloadRequest& req, uint64_t id, Time sent, Duration wait) {
    if (cfg_.client_retries <= 0 || wait <= Duration::zero() || wait > std::chrono::seconds(60)) return false;
    int& tries = tries_[id];  // erased when its outcome is recorded
    if (tries >= cfg_.client_retries) return false;
    ++tries;
    ++client_retries_;
    retrying_.emplace(id, Queued{std::move(req), id, sent, {}});
    push(now_ + wait, EventKind::retry, static_cast<size_t>(id));
    return true;
  }

  // Every arrival (a first attempt at `sent` = now, or a client's retry): a gateway's admission
  // queue, or (no gateway queue) a dispatch.
  void admit(WorkloadRequest req, uint64_t id, Time sent) {
    const size_t g = next_gateway_;  // round robin, as the load balancer in front of the gateways
    next_gateway_ = (next_gateway_ + 1) % gateways_.size();
    Gate* gate = gateways_[g].gate.get();
    std::string text = req.rendered();
    if (!gate) {
      dispatch(g, std::move(req), std::move(text), id, sent);
      return;
    }
    // As the live gateway: every request passes the admission queue; an arrival never overtakes a
    // queued request (it joins the queue and the queue moves, as the live dispatcher runs on every
    // admit, placing both at once when a scrape has shown room since the last completion).
    QueueRequest q;
    q.tenant = cfg_.fair_queue ? tenant_id(req.tenant) : 0;
    q.input_tokens = estimate_tokens(text);
    q.bytes = text.size();
    q.cookie = id;
    auto placed = gate->queue.enqueue(q, saturated(g), now_, admission_rng_);
    if (!placed.ok()) {
      if (placed.denial->should_retry && retry_later(req, id, sent, placed.denial->retry_after)) return;
      Flight f;
      f.id = id;
      f.tenant = req.tenant;
      f.sent = sent;
      f.dispatched = now_;
      record(f, placed.denial->error.status);
      return;
    }
    gate->dispatcher.on_queued(id, gateways_[g].router->config().name, q.tenant, q.weight, q.priority, now_);
    gate->parked.emplace(id, Queued{std::move(req), id, sent, std::move(text)});
    drain();
  }

  // The live gateway's rule (admission_driver.cpp): the pool is saturated when every healthy
  // endpoint is at the in-flight cap or, by fresh engine signals, at the saturation limits.
  // Each gateway replica applies it to what it sees itself (its own in-flight, the shared signals).
  bool saturated(size_t g = 0) const {
    return cfg_.max_in_flight_per_endpoint > 0 && gateways_[g].router->saturated(now_);
  }

  // `text`: req.rendered().
  void dispatch(size_t g, WorkloadRequest req, std::string text, uint64_t id, Time sent) {
    PoolRouter* router = gateways_[g].router.get();
    PickRequest pick;
    pick.kind = req.kind;
    pick.model = req.adapter.empty() ? std::string_view(req.model) : std::string_view("llama");
    pick.adapter = req.adapter;
    pick.text = text;
    pick.input_tokens = estimate_tokens(text);
    pick.max_output_tokens = req.kind == ApiKind::embedding ? 0 : req.max_tokens;
    pick.whole_answer = whole_answer(id);
    engine::EngineRequest er;
    er.id = id;
    er.prompt = engine::tokenize(text);
    er.max_output_tokens = req.kind == ApiKind::embedding ? 1 : req.max_tokens;
    er.adapter = req.adapter;
    er.embedding = req.kind == ApiKind::embedding;
    er.arrival = sent;
    if (!req.adapter.empty()) saw_adapter_ = true;
    if (cfg_.policy == "oracle") {
      current_hashes_.clear();
      engine::extend_block_hashes(er.prompt, engine::extra_keys_hash(er.adapter, er.cache_salt),
                                  cfg_.engine.block_size, current_hashes_);
      current_tokens_ = int64_t(er.prompt.size());
    }
    Flight f;
    f.id = id;
    f.whole = pick.whole_answer;
    if (cfg_.trace > 0) f.group = req.group;
    if (cfg_.trace > 1) f.explain = router->explain_json(pick, now_);
    auto ranked = router->rank(pick, now_);
    f.tenant = req.tenant;
    f.tenant_id = tenant_id(req.tenant);
    f.gateway = g;
    f.sent = sent;
    f.dispatched = now_;
    f.input_tokens = int64_t(er.prompt.size());
    if (ranked.empty()) {  // 503 no_endpoint, the gateway's jittered 1 s Retry-After (proxy.cpp)
      finished(g, id);
      if (cfg_.client_retries > 0 && retry_later(req, id, sent, jittered(std::chrono::seconds(1), client_rng_))) return;
      record(f, 503);
      return;
    }
    if (auto d = shed_refusal(*router, ranked, 0, now_, client_rng_)) {  // as the gateway does (no priorities here)
      finished(g, id);
      if (retry_later(req, id, sent, d->retry_after)) return;
      record(f, 429);
      return;
    }
    const auto& chosen = ranked.front();
    // The source of the prediction (events, recent dispatches, learned): the one whose prompt-token
    // counter the dispatch advanced.
    uint64_t before[3] = {0, 0, 0};
    if (auto& ev = gateways_[g].events)
      ev->count(chosen.endpoint, [&](KvEndpointCounters& c) { std::copy(c.prompt_tokens, c.prompt_tokens + 3, before); });
    f.guard = router->dispatch(pick, chosen, now_);
    f.endpoint = static_cast<int>(chosen.endpoint);
    f.predicted_cached = chosen.predicted_cached_tokens;
    f.expected_ttft_ms = chosen.expected_ttft_ms;
    if (auto& ev = gateways_[g].events)
      ev->count(chosen.endpoint, [&](KvEndpointCounters& c) {
        for (size_t k = 0; k < 3; ++k)
          if (c.prompt_tokens[k] != before[k]) f.source = static_cast<int>(k);
      });
    hot_.on_dispatch(req.group, er.prompt, cfg_.engine.block_size, chosen.endpoint);
    auto& rep = replicas_[chosen.endpoint];
    const auto err = rep.engine->submit(std::move(er), now_);
    if (err != engine::SubmitError::none) {
      f.guard.release();
      finished(g, id);
      record(f, 400);
      return;
    }
    flights_.emplace(id, std::move(f));
    if (!rep.engine->step_in_flight()) {
      begin_step(chosen.endpoint);
      publish_kv_events(chosen.endpoint);  // the step's evictions
    }
  }

  // Whether request `id` asks for a whole answer: a draw from the seed and the id alone, so every
  // policy sees the same requests streamed.
  bool whole_answer(uint64_t id) const {
    if (!(cfg_.whole_answers > 0)) return false;
    uint64_t z = (cfg_.seed * 0x9e3779b97f4a7c15ULL) ^ (id + 0x632be59bd9b4e019ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;  // splitmix64's finaliser
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53 < cfg_.whole_answers;
  }

  int64_t true_cached_tokens(size_t endpoint) const {
    const auto& bm = replicas_[endpoint].engine->blocks();
    const int64_t max_blocks = std::max<int64_t>(0, (current_tokens_ - 1) / bm.block_size());
    return bm.cached_prefix_blocks(current_hashes_, max_blocks) * bm.block_size();
  }

  void begin_step(size_t i) {
    auto& rep = replicas_[i];
    if (auto d = rep.engine->begin_step(now_)) {
      rep.busy += *d;
      push(now_ + *d, EventKind::step_end, i);
    }
  }

  void on_step_end(size_t i) {
    auto& rep = replicas_[i];
    auto result = rep.engine->end_step(now_);
    for (const auto& out : result.outputs) {
      auto it = flights_.find(out.id);
      if (it == flights_.end()) continue;
      auto& f = it->second;
      if (!f.admitted) {  // the first output: the engine's hit at admission is known
        f.admitted = true;
        f.engine_cached = out.cached_tokens;
        predicted_cached_ += std::max<int64_t>(0, f.predicted_cached);
        engine_cached_ += out.cached_tokens;
        by_source_[f.source][0] += std::max<int64_t>(0, f.predicted_cached);
        by_source_[f.source][1] += out.cached_tokens;
        by_source_[f.source][2] += 1;
      }
      if (out.first_token && !f.first_token) {
        f.first_token = now_;
        if (const double r = ttft_estimate_ratio(f.expected_ttft_ms, to_millis(now_ - f.dispatched)); r >= 0)
          ttft_ratios_.push_back(r);
        if (!f.whole) f.guard.on_first_token(now_);
      }
      if (out.new_tokens > 0 && !f.whole) {
        f.guard.on_tokens(out.new_tokens);
        if (cfg_.fair_queue) gateways_[f.gateway].gate->queue.charge_output(f.tenant_id, 0, out.new_tokens);
      }
      f.output_tokens = out.output_tokens;
      if (out.finished) {
        if (f.whole) {  // the whole answer, as the live proxy relays it: first token, tokens, charge at once
          f.guard.on_whole_answer(now_, f.output_tokens);
          if (cfg_.fair_queue && f.output_tokens > 0)
            gateways_[f.gateway].gate->queue.charge_output(f.tenant_id, 0, f.output_tokens);
        }
        const int status = *out.finished == engine::FinishReason::abort ? 500 : 200;
        if (status == 200 && !f.whole) f.guard.on_stream_end(now_);
        f.guard.release();
        record(f, status);
        finished(f.gateway, out.id);
        flights_.erase(it);
        on_slot_freed();
      }
    }
    if (rep.engine->has_work()) begin_step(i);
    publish_kv_events(i);
  }

  // The events the replica's engine logged since the last call become one batch on its way to the
  // gateways (vLLM publishes once per step).
  void publish_kv_events(size_t i) {
    if (!cfg_.kv_events) return;
    auto& rep = replicas_[i];
    auto evs = rep.engine->take_kv_events();
    if (evs.empty()) return;
    kv::EventBatch b;
    b.ts = to_seconds(now_);
    b.events = std::move(evs);
    rep.kv_in_transit.push_back(std::move(b));
    push(now_ + cfg_.kv_event_delay, EventKind::kv_events, i);
  }

  void on_kv_events(size_t i) {
    auto& rep = replicas_[i];
    if (rep.kv_in_transit.empty()) return;
    const kv::EventBatch b = std::move(rep.kv_in_transit.front());
    rep.kv_in_transit.pop_front();
    const int64_t seq = rep.kv_seq++;
    const double lag = to_seconds(now_) - b.ts;
    for (auto& gw : gateways_) gw.events->apply(i, b, seq, lag, now_);
    ++kv_batches_;
  }

  // Every gateway's report of its own load, on its way to the others.
  void on_share_load() {
    for (size_t g = 0; g < gateways_.size(); ++g) {
      auto& gw = gateways_[g];
      PeerPoolReport section;
      const bool changed = gw.router->peer_report(now_, section);
      gw.sender->begin();
      gw.sender->add(std::move(section), changed);
      std::string payload = gw.sender->finish(now_);
      if (payload.empty()) continue;
      peers_in_transit_.push_back(PeerInTransit{g, std::move(payload)});
      push(now_ + cfg_.share_load_delay, EventKind::peer_report, g);
      ++peer_reports_;
    }
    if (!done()) push(now_ + cfg_.share_load_interval, EventKind::share_load, 0);
  }

  void on_peer_report() {
    if (peers_in_transit_.empty()) return;
    const PeerInTransit t = std::move(peers_in_transit_.front());
    peers_in_transit_.pop_front();
    PeerMessage m;
    if (!decode_peer_message(t.payload, m)) throw ConfigError("fleetsim: a peer report did not decode");
    for (size_t g = 0; g < gateways_.size(); ++g)
      if (g != t.from)
        for (const auto& section : m.pools) gateways_[g].router->apply_peer(m.gateway, m.instance, m.seq, section, now_);
  }

  void on_slot_freed() {
    drain();
    if (closed_loop()) pull_next(now_);
  }

  // The request's fair share of its gateway's slots is free (it ended, or never got an endpoint).
  void finished(size_t g, uint64_t id) {
    if (Gate* gate = gateways_[g].gate.get()) gate->dispatcher.on_finished(id, now_);
  }

  // Each gateway's dispatcher places what may go now; a request is placed at once here, so its
  // promise is kept the moment it is made.
  void drain() {
    for (size_t g = 0; g < gateways_.size(); ++g) {
      Gate* gate = gateways_[g].gate.get();
      if (!gate || gate->parked.empty()) continue;
      const PoolRouter* router = gateways_[g].router.get();
      const Dispatcher::RouterOf router_of = [router](std::string_view) { return router; };
      gate->dispatcher.dispatch(gate->queue, now_, router_of, [&](const Dispatcher::Popped& p) {
        auto it = gate->parked.find(p.cookie);
        if (it == gate->parked.end()) return;
        auto q = std::move(it->second);
        gate->parked.erase(it);
        dispatch(g, std::move(q.req), std::move(q.text), q.id, q.sent);
        gate->dispatcher.on_placed(p.cookie);
      });
    }
  }

  void record(const Flight& f, int status) {
    int retries = 0;
    if (cfg_.client_retries > 0) {
      if (auto it = tries_.find(f.id); it != tries_.end()) retries = it->second, tries_.erase(it);
    }
    RequestRecord r;
    r.tenant = f.tenant;
    r.status = status;
    r.arrival = f.sent;
    if (f.first_token) r.ttft = *f.first_token - f.sent;
    r.e2e = now_ - f.sent;
    r.queue = f.dispatched - f.sent;
    r.input_tokens = f.input_tokens;
    r.output_tokens = f.output_tokens;
    if (cfg_.trace > 0) trace_line(f, r, retries);
    records_.push_back(std::move(r));
    if (status != 200 && closed_loop()) pull_next(now_);
  }

  // One request of the trace: what it was, where it went, what the index predicted and the engine
  // found, and how it fared (times in ms, from its first attempt; ttft_ms null without a first token;
// with client retries, how often its client sent it again).
  void trace_line(const Flight& f, const RequestRecord& r, int retries) {
    auto& out = trace_;
    out += fmt::format("{{\"id\":{},\"policy\":", f.id);
    append_json_string(out, cfg_.policy);
    out += fmt::format(",\"rate\":{},\"tenant\":", cfg_.arrivals.rate);
    append_json_string(out, f.tenant);
    out += ",\"group\":";
    append_json_string(out, f.group);
    out += fmt::format(
        ",\"arrival_ms\":{:.3f},\"queue_ms\":{:.3f},\"endpoint\":{},\"input_tokens\":{},\"output_tokens\":{},"
        "\"predicted_cached_tokens\":{},\"engine_cached_tokens\":{},\"status\":{},\"ttft_ms\":",
        to_millis(f.sent), to_millis(r.queue), f.endpoint, f.input_tokens, f.output_tokens,
        f.endpoint >= 0 ? f.predicted_cached : 0, f.engine_cached, r.status);
    out += r.ttft ? fmt::format("{:.3f}", to_millis(*r.ttft)) : std::string("null");
    out += fmt::format(",\"e2e_ms\":{:.3f}", to_millis(r.e2e));
    if (f.expected_ttft_ms > 0) out += fmt::format(",\"expected_ttft_ms\":{:.3f}", f.expected_ttft_ms);
    if (cfg_.client_retries > 0) out += fmt::format(",\"retries\":{}", retries);
    if (cfg_.whole_answers > 0) out += f.whole ? ",\"whole\":true" : ",\"whole\":false";
    if (!f.explain.empty()) out += ",\"explain\":" + f.explain;
    out += "}\n";
  }

  void expire_queued() {
    for (auto& gw : gateways_) {
      Gate* gate = gw.gate.get();
      if (!gate) continue;
      for (const auto& x : gate->queue.expire(now_, admission_rng_)) {
        auto it = gate->parked.find(x.cookie);
        if (it == gate->parked.end()) continue;
        Flight f;
        f.id = x.cookie;
        f.tenant = it->second.req.tenant;
        f.sent = it->second.sent;
        f.dispatched = now_;
        Queued q = std::move(it->second);
        gate->parked.erase(it);
        gate->dispatcher.on_left_queue(x.cookie, now_);
        if (x.denial.should_retry && retry_later(q.req, q.id, q.sent, x.denial.retry_after)) continue;
        record(f, x.denial.error.status);
      }
    }
  }

  void on_scrape() {
    expire_queued();
    for (size_t i = 0; i < replicas_.size(); ++i) {
      auto& rep = replicas_[i];
      const auto& eng = *rep.engine;
      EngineSignals s;
      s.scraped_at = now_;
      s.waiting = double(eng.num_waiting());
      s.running = double(eng.num_running());
      s.kv_usage = eng.blocks().usage();
      s.block_size = eng.blocks().block_size();
      s.kv_capacity_blocks = eng.blocks().num_blocks();
      s.prefix_queries = double(eng.counters().prefix_queries);
      s.prefix_hits = double(eng.counters().prefix_hits);
      s.itl_sum_s = eng.histograms().itl.sum;
      s.itl_count = double(eng.histograms().itl.count);
      s.duty_cycle = std::min(1.0, to_seconds(rep.busy - rep.busy_at_scrape) / to_seconds(cfg_.scrape_interval));
      rep.busy_at_scrape = rep.busy;
      if (saw_adapter_ && cfg_.engine.max_loras > 0) {
        auto st = eng.stats(now_);
        s.lora_running = std::move(st.running_adapters);
        s.lora_waiting = std::move(st.waiting_adapters);
        s.max_lora = cfg_.engine.max_loras;
      }
      kv_sum_ += s.kv_usage;
      kv_samples_ += 1;
      for (size_t g = 1; g < gateways_.size(); ++g) gateways_[g].router->update_signals(i, s);
      router_->update_signals(i, std::move(s));
    }
    std::vector<const engine::BlockManager*> caches;
    for (const auto& rep : replicas_) caches.push_back(&rep.engine->blocks());
    hot_.on_scrape(now_, caches);
    if (!done()) push(now_ + cfg_.scrape_interval, EventKind::scrape, 0);
  }

  const FleetConfig& cfg_;
  std::unique_ptr<workload::Workload> wl_;
  std::vector<Gateway> gateways_;
  PoolRouter* router_ = nullptr;  // gateways_[0]'s
  size_t next_gateway_ = 0;
  std::vector<Replica> replicas_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::deque<WorkloadRequest> pending_;
  std::unordered_map<std::string, TenantId> tenant_ids_;
  AdmissionRng admission_rng_{7};
  AdmissionRng client_rng_{11};  // the Retry-After jitter of refusals outside the admission queue
  std::unordered_map<uint64_t, Queued> retrying_;  // refused, their clients coming back (client_retries)
  std::unordered_map<uint64_t, int> tries_;        // retries so far, by request id
  int64_t client_retries_ = 0;
  std::unordered_map<uint64_t, Flight> flights_;
  HotPrefixProbe hot_;
  std::vector<RequestRecord> records_;
  std::string trace_;  // FleetConfig::trace: the lines so far
  std::vector<engine::BlockHash> current_hashes_;
  int64_t current_tokens_ = 0;
  Time now_{};
  uint64_t seq_ = 0, next_id_ = 1;
  bool exhausted_ = false, saw_adapter_ = false;
  double kv_sum_ = 0;
  int64_t kv_samples_ = 0;
  int64_t predicted_cached_ = 0, engine_cached_ = 0, kv_batches_ = 0, peer_reports_ = 0;
  std::vector<double> ttft_ratios_;  // each first token's TTFT from its dispatch over its candidate's estimate
  std::deque<PeerInTransit> peers_in_transit_;
  int64_t by_source_[3][3] = {};  // per source: predicted, engine cached, requests
};

}  // namespace

std::variant<FleetResult, std::string> run_fleet(const FleetConfig& cfg) {
  if (cfg.replicas < 1 || cfg.replicas > 10000) return std::string("replicas must be in [1, 10000]");
  if (auto e = cfg.engine.validate(); !e.empty()) return "engine: " + e;
  if (cfg.scrape_interval <= Duration::zero()) return std::string("scrape interval must be positive");
  if (cfg.gateways < 1 || cfg.gateways > 64) return std::string("gateways must be in [1, 64]");
  if (cfg.slow_replicas > cfg.replicas) return std::string("slow replicas must be at most the replicas");
  if (!(cfg.slow_factor >= 0.1 && cfg.slow_factor <= 100)) return std::string("slow factor must be in [0.1, 100]");
  if (!(cfg.whole_answers >= 0 && cfg.whole_answers <= 1)) return std::string("whole answers must be a share in [0, 1]");
  if (cfg.kv_event_delay < Duration::zero()) return std::string("kv event delay must be >= 0");
  if (cfg.share_load && (cfg.share_load_interval <= Duration::zero() || cfg.share_load_delay < Duration::zero()))
    return std::string("share-load interval must be > 0 and its delay >= 0");
  auto wl = workload::make_workload(cfg.workload, cfg.arrivals, cfg.limits, cfg.seed);
  if (auto* e = std::get_if<std::string>(&wl)) return *e;
  try {
    Simulation sim(cfg, std::move(std::get<0>(wl)));
    return sim.run();
  } catch (const ConfigError& e) {
    return std::string(e.what());
  }
}

TtftEstimate ttft_estimate_of(std::vector<double> ratios) {
  TtftEstimate t;
  t.requests = static_cast<int64_t>(ratios.size());
  if (ratios.empty()) return t;
  const auto at = [&](double q) {
    auto it = ratios.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(ratios.size() - 1));
    std::nth_element(ratios.begin(), it, ratios.end());
    return *it;
  };
  t.p10 = at(0.1), t.p50 = at(0.5), t.p90 = at(0.9);
  return t;
}

std::string hot_prefix_json(const FleetResult& r) {
  if (r.hot_group.empty()) return "";
  std::string out = fmt::format("\"hot_prefix\":{{\"group\":\"{}\",\"blocks\":{},\"holders_mean\":{:.3g},\"holders_max\":{},"
                                "\"receivers_mean\":{:.3g},\"series\":[",
                                r.hot_group, r.hot_prefix_blocks, r.hot_holders_mean(), r.hot_holders_max(),
                                r.hot_receivers_mean());
  for (size_t i = 0; i < r.hot_samples.size(); ++i) {
    const auto& s = r.hot_samples[i];
    out += fmt::format("{}[{:g},{},{},{}]", i ? "," : "", s.t_s, s.holders, s.receivers, s.requests);
  }
  return out + "]},";
}

std::string result_json(const FleetConfig& cfg, const FleetResult& r) {
  std::string out = "{\"policy\":";
  append_json_string(out, cfg.policy);
  out += fmt::format(",\"replicas\":{},\"gateways\":{},\"index\":\"{}\",\"kv_event_delay_ms\":{:g},\"share_load\":{},"
                     "\"share_load_delay_ms\":{:g},\"seed\":{},\"workload\":",
                     cfg.replicas, cfg.gateways, cfg.kv_events ? "events" : "learned", to_millis(cfg.kv_event_delay),
                     cfg.share_load, to_millis(cfg.share_load_delay), cfg.seed);
  append_json_string(out, r.workload_description);
  out += ",\"arrivals\":";
  append_json_string(out, cfg.arrivals.describe());
  if (cfg.slow_replicas > 0) out += fmt::format(",\"slow_replicas\":{},\"slow_factor\":{:g}", cfg.slow_replicas, cfg.slow_factor);
  if (cfg.whole_answers > 0) out += fmt::format(",\"whole_answers\":{:g}", cfg.whole_answers);
  out += fmt::format(",\"offered_rate\":{},", cfg.arrivals.kind == workload::ArrivalKind::concurrency ? 0.0 : cfg.arrivals.rate);
  out += fmt::format("\"fleet\":{{\"prefix_hit_rate\":{:.6g},\"preemptions\":{},\"picks_min\":{},\"picks_max\":{},"
                     "\"mean_kv_usage\":{:.6g},\"steps\":{},\"virtual_s\":{:.6g},\"wall_s\":{:.6g},"
                     "\"predicted_cached_tokens\":{},\"engine_cached_tokens\":{},\"kv_event_batches\":{},\"peer_reports\":{},"
                     "\"client_retries\":{},"
                     "\"by_source\":{{\"learned\":[{},{},{}],\"events\":[{},{},{}],\"recent\":[{},{},{}]}}}},",
                     r.prefix_hit_rate, r.preemptions, r.picks_min, r.picks_max, r.mean_kv_usage, r.steps,
                     r.virtual_seconds, r.wall_seconds, r.predicted_cached_tokens, r.engine_cached_tokens,
                     r.kv_event_batches, r.peer_reports, r.client_retries, r.by_source[0][0], r.by_source[0][1], r.by_source[0][2], r.by_source[1][0],
                     r.by_source[1][1], r.by_source[1][2], r.by_source[2][0], r.by_source[2][1], r.by_source[2][2]);
  out += hot_prefix_json(r);
  if (r.ttft_estimate.requests > 0)
    out += fmt::format("\"ttft_estimate\":{{\"requests\":{},\"p10\":{:.4g},\"p50\":{:.4g},\"p90\":{:.4g}}},",
                       r.ttft_estimate.requests, r.ttft_estimate.p10, r.ttft_estimate.p50, r.ttft_estimate.p90);
  out += "\"figures\":" + workload::to_json(r.figures) + "}";
  return out;
}

}  // namespace sluice::fleetsim
