// sluice's live dashboard. Polls /metrics (same origin) every second, parses the Prometheus text
// (prom.js), computes rates and histogram quantiles over a short window of polls, and draws uPlot
// charts. Warnings: any endpoint whose metrics are stale (sluice_endpoint_stale == 1 or scrape age
// > 2 s), rejects rising, /metrics unreachable; plus a one-line diagnosis of the two classic
// incidents (queueing while engines idle = picker/stale metrics; engines pegged + rejects = capacity).
(function () {
  "use strict";
  const P = globalThis.SluiceProm;
  const params = new URLSearchParams(location.search);
  const POLL_MS = Math.max(100, Number(params.get("interval")) || 1000);
  const METRICS_URL = "/metrics";
  const SHORT_WINDOW_MS = 5000;   // rates and quantiles on the charts
  const LONG_WINDOW_MS = 60000;   // baseline for "rejects rising"
  const HISTORY_MS = LONG_WINDOW_MS + 5000;
  const MAX_POINTS = 300;         // five minutes at 1 s
  const STALE_AGE_S = 2;
  const FROZEN_WINDOW_MS = 5000;  // engine counters unchanged this long while receiving requests: frozen
  const FROZEN_MIN_PICKS = 5;
  const COLORS = ["#4e9af1", "#f1a04e", "#5ec27a", "#e05d5d", "#b07ee8", "#e6d155", "#4ed2d2",
    "#e87eb9", "#9aa0a6", "#8fd14f", "#d18f4f", "#6f7fe8"];

  // ---- formatting -------------------------------------------------------------------------
  const fmtPct = (v) => (v == null || !isFinite(v) ? "–" : (100 * v).toFixed(1) + "%");
  const fmtNum = (v, d = 1) => (v == null || !isFinite(v) ? "–" : v.toFixed(d));
  const fmtSec = (v) => (v == null || !isFinite(v) ? "–" : v < 1 ? (1000 * v).toFixed(0) + " ms" : v.toFixed(2) + " s");
  // Durations from microseconds (the gateway's own phases) to seconds (an engine's answer).
  const fmtDur = (v) => (v == null || !isFinite(v) ? "–" : v < 1e-3 ? (1e6 * v).toFixed(0) + " us"
    : v < 1 ? (1000 * v).toFixed(v < 0.01 ? 1 : 0) + " ms" : v.toFixed(2) + " s");

  // ---- a chart panel: named series over a shared time axis ---------------------------------
  class Panel {
    // scales: { y: {range?: [lo, hi], label?, fmt?, log?}, r?: {...} } ; series defs come with push().
    // log: a log10 axis (values <= 0 are not drawn).
    constructor(id, scales) {
      this.id = id;
      this.el = document.getElementById(id);
      this.scales = scales;
      this.xs = [];
      this.cols = new Map();   // key -> {label, scale, values[]}
      this.chart = null;
      this.dirty = true;
    }
    reset() { this.xs = []; this.cols = new Map(); this.dirty = true; }
    // values: [{key, label, scale, value}]
    push(t, values) {
      this.xs.push(t);
      const seen = new Set();
      for (const v of values) {
        let col = this.cols.get(v.key);
        if (!col) {
          col = { label: v.label, scale: v.scale || "y", values: new Array(this.xs.length - 1).fill(null) };
          this.cols.set(v.key, col);
          this.dirty = true;
        }
        const logScale = (this.scales[col.scale] || {}).log;
        col.values.push(v.value == null || !isFinite(v.value) || (logScale && !(v.value > 0)) ? null : v.value);
        seen.add(v.key);
      }
      for (const [key, col] of this.cols) if (!seen.has(key)) col.values.push(null);
      if (this.xs.length > MAX_POINTS) {
        this.xs.shift();
        for (const col of this.cols.values()) col.values.shift();
      }
    }
    data() { return [this.xs, ...[...this.cols.values()].map((c) => c.values)]; }
    options() {
      const width = Math.max(300, this.el.clientWidth || 600);
      const scales = { x: { time: true } };
      const axes = [{ stroke: "#aab", grid: { stroke: "#2a2f3a" }, ticks: { stroke: "#2a2f3a" }, space: 70,
        incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600],
        values: (u, vals) => vals.map((v) => new Date(v * 1000).toLocaleTimeString([], { hour12: false })) }];
      let side = 3;
      for (const [name, s] of Object.entries(this.scales)) {
        scales[name] = s.log ? { distr: 3, log: 10 }
          : s.range ? { auto: false, range: s.range } : { auto: true, range: (u, lo, hi) => [0, Math.max(hi * 1.1, s.min || 1e-9)] };
        axes.push({ scale: name, side, label: s.label, stroke: "#aab", size: 60,
          ...(s.ints ? { incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000] } : {}),
          // A log axis: ticks and grid at the powers of ten only.
          ...(s.log ? { splits: (u, i, min, max) => {
            const out = [];
            for (let e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++)
              if (10 ** e >= min && 10 ** e <= max) out.push(10 ** e);
            return out;
          } } : {}),
          grid: { show: side === 3, stroke: "#2a2f3a" }, ticks: { stroke: "#2a2f3a" },
          values: (u, vals) => vals.map((v) => (s.fmt ? s.fmt(v) : v)) });
        side = 1;
      }
      const series = [{}];
      let i = 0;
      for (const col of this.cols.values()) {
        const fmt = (this.scales[col.scale] || {}).fmt;
        series.push({ label: col.label, scale: col.scale, stroke: col.color || COLORS[i++ % COLORS.length], width: 2,
          value: (u, v) => (v == null ? "–" : fmt ? fmt(v) : fmtNum(v, 2)) });
      }
      return { width, height: 220, scales, axes, series, legend: { live: true }, cursor: { drag: { x: false, y: false } } };
    }
    render() {
      if (this.cols.size === 0) return;
      if (this.dirty || !this.chart) {
        if (this.chart) this.chart.destroy();
        this.el.textContent = "";
        this.chart = new uPlot(this.options(), this.data(), this.el);
        this.dirty = false;
      } else {
        this.chart.setData(this.data());
      }
      // Not hovering: the legend shows the latest values.
      if (!(this.chart.cursor.left >= 0)) this.chart.setLegend({ idx: this.xs.length - 1 });
    }
    resize() { if (this.chart) this.chart.setSize({ width: Math.max(300, this.el.clientWidth), height: 220 }); }
    // For tests and operators poking in devtools: points per series.
    summary() {
      const out = {};
      for (const col of this.cols.values()) out[col.label] = col.values.filter((v) => v != null).length;
      return out;
    }
  }

  // sluice_gateway_overhead_seconds's phases, in the order a request passes them (docs/metrics.md).
  const OVERHEAD_PHASES = ["read_body", "parse", "admit", "pick", "connect", "send_request", "first_upstream_byte"];
  const ratio = { range: [0, 1], label: "ratio", fmt: fmtPct };
  const panels = {
    hit: new Panel("chart-hit", { y: ratio }),
    reject: new Panel("chart-reject", { y: { label: "rejects/s", fmt: (v) => fmtNum(v, 1), min: 1 }, r: ratio }),
    queue: new Panel("chart-queue", { y: { label: "seconds", fmt: fmtSec, min: 0.01 } }),
    ttft: new Panel("chart-ttft", { y: { label: "seconds", fmt: fmtSec, min: 0.01 } }),
    kv: new Panel("chart-kv", { y: ratio }),
    waiting: new Panel("chart-waiting", { y: { label: "requests", fmt: (v) => fmtNum(v, 0), min: 1, ints: true } }),
    picks: new Panel("chart-picks", { y: { label: "picks/s", fmt: (v) => fmtNum(v, 1), min: 1 } }),
    duty: new Panel("chart-duty", { y: ratio }),
    // The pools' three most asked-for prefixes (sluice policy): the endpoints holding each, and its demand.
    hot: new Panel("chart-hot", { y: { label: "holders", fmt: (v) => fmtNum(v, 0), min: 1, ints: true },
      r: { label: "requests/s", fmt: (v) => fmtNum(v, 1), min: 1 } }),
    tenantRejects: new Panel("chart-tenant-rejects", { y: { label: "rejects/s", fmt: (v) => fmtNum(v, 1), min: 1 } }),
    tenantTokens: new Panel("chart-tenant-tokens", { y: { label: "tokens/s", fmt: (v) => fmtNum(v, 0), min: 1 } }),
    upstream: new Panel("chart-upstream", { y: { label: "per second", fmt: (v) => fmtNum(v, 2), min: 0.1 } }),
    tokens: new Panel("chart-tokens", { y: { label: "tokens/s", fmt: (v) => fmtNum(v, 0), min: 1 },
      r: { label: "seconds", fmt: fmtSec, min: 0.01 } }),
    freshness: new Panel("chart-freshness", { y: { label: "seconds", fmt: fmtSec, min: 1 } }),
    overhead: new Panel("chart-overhead", { y: { label: "seconds", fmt: fmtDur, log: true } }),
    // Engine KV events (pools with kv_events): drawn only while the gateway exports them.
    kvEvents: new Panel("chart-kv-events", { y: { label: "per second", fmt: (v) => fmtNum(v, 1), min: 1 },
      r: { label: "seconds", fmt: fmtSec, min: 0.01 } }),
    kvSource: new Panel("chart-kv-source", { y: ratio }),
    // Engine render (pools with token_ids.source render): drawn only while the gateway exports it.
    render: new Panel("chart-render", { y: { label: "per second", fmt: (v) => fmtNum(v, 1), min: 1 },
      r: { label: "seconds", fmt: fmtSec, min: 0.001 } }),
    renderCache: new Panel("chart-render-cache", { y: ratio }),
  };

  // ---- state ---------------------------------------------------------------------------------
  const state = { history: [], polls: 0, errors: 0, lastError: null, pool: "", stale: [], rejectWarning: null,
    diagnosis: null, lastPollAt: null };

  function poolFilter() {
    const pool = state.pool;
    return pool ? (l) => l.pool === pool : null;
  }

  // The snapshot closest to `ms` before the newest one (at least one poll back).
  function snapshotBefore(ms) {
    const h = state.history;
    if (h.length < 2) return null;
    const cur = h[h.length - 1];
    let best = h[h.length - 2];
    for (let i = h.length - 2; i >= 0; i--) {
      if (cur.t - h[i].t > ms) break;
      best = h[i];
    }
    return best;
  }

  function endpointsOf(snap, filter) {
    const eps = new Map();  // "pool/endpoint" -> {pool, endpoint}
    for (const name of ["sluice_endpoint_stale", "sluice_endpoint_scrape_age_seconds", "sluice_endpoint_kv_usage_ratio",
      "sluice_endpoint_waiting_requests", "sluice_endpoint_healthy", "sluice_endpoint_inflight_requests",
      "sluice_endpoint_duty_cycle_ratio", "sluice_picks_total"]) {
      for (const s of P.samples(snap, name, filter)) {
        if (s.labels.endpoint === undefined) continue;
        const pool = s.labels.pool || "";
        eps.set(pool + "/" + s.labels.endpoint, { pool, endpoint: s.labels.endpoint });
      }
    }
    return [...eps.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1));
  }

  function gaugeOf(snap, name, ep) {
    const list = P.samples(snap, name, (l) => l.endpoint === ep.endpoint && (l.pool || "") === ep.pool);
    return list.length ? list[0].value : null;
  }

  function updatePoolSelect(snap) {
    const sel = document.getElementById("pool");
    const pools = new Set();
    for (const list of snap.byName.values()) for (const s of list) if (s.labels.pool) pools.add(s.labels.pool);
    const have = new Set([...sel.options].map((o) => o.value));
    for (const p of [...pools].sort()) {
      if (!have.has(p)) { const o = document.createElement("option"); o.value = p; o.textContent = p; sel.appendChild(o); }
    }
  }

  function setBanner(id, html) {
    const el = document.getElementById(id);
    if (html) { el.innerHTML = html; el.hidden = false; } else { el.hidden = true; el.textContent = ""; }
  }
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  const setText = (id, s) => { document.getElementById(id).textContent = s; };

  // ---- one poll ------------------------------------------------------------------------------
  function analyse() {
    const h = state.history;
    const cur = h[h.length - 1];
    const filter = poolFilter();
    const short = snapshotBefore(SHORT_WINDOW_MS);
    const long = snapshotBefore(LONG_WINDOW_MS);
    const t = cur.t / 1000;
    const eps = endpointsOf(cur, filter);
    const multiPool = new Set(eps.map(([, e]) => e.pool)).size > 1;
    const epLabel = (e) => (multiPool ? e.pool + "/" + e.endpoint : e.endpoint);

    // Stale endpoints: the gateway says so (stale flag, scrape age), or the page sees it: the
    // engine's prefix-cache counter and its waiting/running/KV gauges have not moved for
    // FROZEN_WINDOW_MS while the gateway kept sending it requests (a metrics handler serving the
    // same body forever scrapes "fine").
    const stale = [];
    const frozenFrom = snapshotBefore(FROZEN_WINDOW_MS);
    const frozenSpan = frozenFrom ? cur.t - frozenFrom.t : 0;
    for (const [, e] of eps) {
      const mine = (l) => l.endpoint === e.endpoint && (l.pool || "") === e.pool;
      const flag = gaugeOf(cur, "sluice_endpoint_stale", e);
      const age = gaugeOf(cur, "sluice_endpoint_scrape_age_seconds", e);
      let frozenPicks = null;
      if (frozenSpan >= FROZEN_WINDOW_MS * 0.8) {
        const sent = P.increase(frozenFrom, cur, "sluice_picks_total", mine);
        const seen = P.increase(frozenFrom, cur, "sluice_engine_prefix_cache_queries_tokens_total", mine);
        const total = gaugeOf(cur, "sluice_engine_prefix_cache_queries_tokens_total", e);
        // A live engine that is merely busy still moves: its waiting count grows as requests arrive,
        // or its KV usage and running count change. Frozen means all of them stand still.
        const still = ["sluice_endpoint_waiting_requests", "sluice_endpoint_running_requests", "sluice_endpoint_kv_usage_ratio"]
          .every((n) => gaugeOf(frozenFrom, n, e) === gaugeOf(cur, n, e));
        if (sent >= FROZEN_MIN_PICKS && seen === 0 && total > 0 && still) frozenPicks = sent;
      }
      if (flag === 1 || (age != null && age > STALE_AGE_S) || frozenPicks != null)
        stale.push({ ...e, age, frozenPicks, label: epLabel(e) });
    }

    // Cluster-level figures over the short window.
    const rps = P.rate(short, cur, "sluice_requests_total", filter);
    // No reject series yet (nothing rejected since start) while requests are counted: 0/s.
    const orZero = (v, other) => (v == null && other != null ? 0 : v);
    const rejects = orZero(P.rate(short, cur, "sluice_rejects_total", filter), rps);
    const rejectsLong = orZero(P.rate(long, cur, "sluice_rejects_total", filter), P.rate(long, cur, "sluice_requests_total", filter));
    const rejectRatio = rps > 0 && rejects != null ? Math.min(1, rejects / rps) : rejects > 0 ? 1 : rps != null ? 0 : null;
    const hitsInc = P.increase(short, cur, "sluice_engine_prefix_cache_hits_tokens_total", filter);
    const queriesInc = P.increase(short, cur, "sluice_engine_prefix_cache_queries_tokens_total", filter);
    const engineHit = queriesInc > 0 ? hitsInc / queriesInc : null;
    const predInc = P.increase(short, cur, "sluice_prefix_predicted_cached_tokens_total", filter);
    const promptInc = P.increase(short, cur, "sluice_prefix_prompt_tokens_total", filter);
    const predictedHit = promptInc > 0 ? predInc / promptInc : null;
    // Average duty over endpoints with fresh metrics (a stale endpoint's gauge is from the past).
    const staleKeys = new Set(stale.map((e) => e.pool + "/" + e.endpoint));
    const fresh = eps.filter(([key]) => !staleKeys.has(key));
    const duties = (fresh.length ? fresh : eps).map(([, e]) => gaugeOf(cur, "sluice_endpoint_duty_cycle_ratio", e)).filter((v) => v != null);
    const duty = duties.length ? duties.reduce((a, b) => a + b, 0) / duties.length : null;
    // Requests flowing and nothing observed in the queue histogram in the window (or no histogram
    // yet: the gateway may observe only requests that actually queued): nobody waited, p99 = 0.
    const queueBuckets = P.bucketIncrease(short, cur, "sluice_queue_time_seconds", filter);
    const queueP99 = P.histogramQuantile(0.99, queueBuckets) ?? (rps > 0 ? 0 : null);
    const ttftP99 = P.histogramQuantile(0.99, P.bucketIncrease(short, cur, "sluice_ttft_seconds", filter));
    const queued = P.sum(cur, "sluice_queue_depth", filter);

    panels.hit.push(t, [
      { key: "engine", label: "prefix hit (engine)", value: engineHit },
      { key: "predicted", label: "prefix hit (predicted)", value: predictedHit },
      { key: "duty", label: "duty cycle (avg)", value: duty },
    ]);
    // Clients' own retries (the SDKs' x-stainless-retry-count): a retry storm beside its rejects.
    const clientRetries = orZero(P.rate(short, cur, "sluice_client_retries_total", filter), rps);
    panels.reject.push(t, [
      { key: "rejects", label: "rejects/s", value: rejects },
      { key: "client_retries", label: "client retries/s", value: clientRetries },
      { key: "ratio", label: "reject ratio", scale: "r", value: rejectRatio },
      { key: "duty", label: "duty cycle (avg)", scale: "r", value: duty },
    ]);
    panels.queue.push(t, [{ key: "p99", label: "queue time p99", value: queueP99 }]);
    panels.ttft.push(t, [{ key: "p99", label: "TTFT p99", value: ttftP99 }]);

    const picks = P.increaseBy(short, cur, "sluice_picks_total", "endpoint", filter);
    const dt = short ? (cur.t - short.t) / 1000 : 0;
    const perEp = (name) => eps.map(([key, e]) => ({ key, label: epLabel(e), value: gaugeOf(cur, name, e) }));
    panels.kv.push(t, perEp("sluice_endpoint_kv_usage_ratio"));
    panels.waiting.push(t, perEp("sluice_endpoint_waiting_requests"));
    panels.duty.push(t, perEp("sluice_endpoint_duty_cycle_ratio"));
    const hotOf = (name, what, scale) => P.samples(cur, name, filter).map((s) => {
      const id = (multiPool ? (s.labels.pool || "") + " " : "") + "#" + s.labels.rank;
      return { key: (s.labels.pool || "") + "/" + s.labels.rank + "/" + what, label: id + " " + what, scale, value: s.value };
    });
    panels.hot.push(t, [...hotOf("sluice_hot_prefix_holders", "holders"),
      ...hotOf("sluice_hot_prefix_requests_per_second", "requests/s", "r")]);
    // Tenants: rejects by tenant ("-": before authentication or without tenants) and tokens charged.
    const perSecond = (m) => [...m.entries()].map(([k, v]) => ({ key: k, label: k, value: dt > 0 ? v / dt : null }));
    panels.tenantRejects.push(t, perSecond(P.increaseBy(short, cur, "sluice_rejects_total", "tenant", filter)));
    const tokensBy = new Map();
    for (const dir of ["input", "output"]) {
      for (const [k, v] of P.increaseBy(short, cur, "sluice_tenant_tokens_total", "tenant", (l) => l.direction === dir))
        tokensBy.set(k + " " + dir, v);
    }
    panels.tenantTokens.push(t, perSecond(tokensBy));
    const failed = (l) => (!filter || filter(l)) && (l.outcome === "upstream_error" || l.outcome === "timeout");
    panels.upstream.push(t, [
      { key: "errors", label: "upstream errors + timeouts", value: orZero(P.rate(short, cur, "sluice_requests_total", failed), rps) },
      { key: "retries", label: "retries", value: orZero(P.rate(short, cur, "sluice_retries_total", filter), rps) },
      { key: "refused", label: "retries refused", value: orZero(P.rate(short, cur, "sluice_retries_refused_total", filter), rps) },
    ]);
    const itlP99 = P.histogramQuantile(0.99, P.bucketIncrease(short, cur, "sluice_itl_seconds", filter));
    panels.tokens.push(t, [
      { key: "tokens", label: "streamed token events/s", value: orZero(P.rate(short, cur, "sluice_itl_seconds_count", filter), rps) },
      { key: "itl", label: "ITL p99", scale: "r", value: itlP99 },
    ]);
    panels.freshness.push(t, perEp("sluice_endpoint_scrape_age_seconds"));
    // What the gateway itself costs a request, by phase (all pools: the histogram has no pool label),
    // beside the engine's own time to its response head. A phase with nothing observed in the window
    // (read_body: small bodies arrive with their head) draws a gap.
    panels.overhead.push(t, OVERHEAD_PHASES.map((ph) => ({ key: ph, label: ph + " p99",
      value: P.histogramQuantile(0.99, P.bucketIncrease(short, cur, "sluice_gateway_overhead_seconds", (l) => l.phase === ph)) })));
    // KV events: what the subscribers receive and drop, how late, and where the picker's predicted
    // cached tokens came from (events, the gateway's own recent dispatches, or the learned index for
    // endpoints whose events are stale), as shares of the prompt tokens beside the engines' hit rate.
    const kvShown = P.sum(cur, "sluice_kv_events_connected", filter) != null;
    document.getElementById("kv-panels").hidden = !kvShown;
    if (kvShown) {
      const lags = eps.map(([, e]) => gaugeOf(cur, "sluice_kv_events_lag_seconds", e)).filter((v) => v != null);
      const bad = (name) => orZero(P.rate(short, cur, name, filter), rps);
      panels.kvEvents.push(t, [
        { key: "events", label: "events/s", value: orZero(P.rate(short, cur, "sluice_kv_events_total", filter), rps) },
        { key: "errors", label: "decode errors + skipped/s", value: dt > 0 ? bad("sluice_kv_events_decode_errors_total") + bad("sluice_kv_events_skipped_total") : null },
        { key: "gaps", label: "gaps/s", value: bad("sluice_kv_events_gaps_total") },
        { key: "resyncs", label: "resyncs/s", value: bad("sluice_kv_events_resyncs_total") },
        { key: "lag", label: "event lag (max)", scale: "r", value: lags.length ? Math.max(...lags) : null },
      ]);
      const kvPrompt = P.increase(short, cur, "sluice_kv_prompt_tokens_total", filter);
      const share = (src) => {
        const inc = P.increase(short, cur, "sluice_kv_predicted_cached_tokens_total", (l) => (!filter || filter(l)) && l.source === src);
        return kvPrompt > 0 && inc != null ? inc / kvPrompt : null;
      };
      panels.kvSource.push(t, [
        { key: "events", label: "predicted from events", value: share("events") },
        { key: "recent", label: "predicted from recent dispatches", value: share("recent") },
        { key: "learned", label: "predicted from learned (stale events)", value: share("learned") },
        { key: "engine", label: "prefix hit (engine)", value: engineHit },
      ]);
    }
    // Engine render: token-id lookups by outcome (the engine answered, the cache did, or the
    // request fell back to the estimate on a timeout or error), the call's p99 and the cache's hit rate.
    const renderShown = P.sum(cur, "sluice_render_requests_total", filter) != null;
    document.getElementById("render-panels").hidden = !renderShown;
    if (renderShown) {
      const byOutcome = (o) => orZero(P.rate(short, cur, "sluice_render_requests_total", (l) => (!filter || filter(l)) && l.outcome === o), rps);
      const renderAll = P.increase(short, cur, "sluice_render_requests_total", filter);
      const renderHits = P.increase(short, cur, "sluice_render_requests_total", (l) => (!filter || filter(l)) && l.outcome === "cache_hit");
      panels.render.push(t, [
        { key: "ok", label: "rendered by the engine/s", value: byOutcome("ok") },
        { key: "hit", label: "cache hits/s", value: byOutcome("cache_hit") },
        { key: "fallback", label: "timeouts + errors (estimated)/s", value: dt > 0 ? byOutcome("timeout") + byOutcome("error") : null },
        { key: "p99", label: "render p99", scale: "r", value: P.histogramQuantile(0.99, P.bucketIncrease(short, cur, "sluice_render_duration_seconds", filter)) },
      ]);
      panels.renderCache.push(t, [
        { key: "hitRate", label: "render cache hit rate", value: renderAll > 0 && renderHits != null ? renderHits / renderAll : null },
      ]);
    }
    panels.picks.push(t, eps.map(([key, e]) => {
      const inc = P.increase(short, cur, "sluice_picks_total", (l) => l.endpoint === e.endpoint && (l.pool || "") === e.pool);
      return { key, label: epLabel(e), value: inc != null && dt > 0 ? inc / dt : null };
    }));

    state.stale = stale.map((e) => e.label);
    const why = (e) => (e.frozenPicks != null && !(e.age > STALE_AGE_S)
      ? ` (engine counters unchanged for ${fmtNum(frozenSpan / 1000, 0)} s while it was sent ${fmtNum(e.frozenPicks, 0)} requests)`
      : e.age != null ? ` (last scrape ${fmtNum(e.age, 1)} s ago)` : "");
    setBanner("stale-banner", stale.length === 0 ? null :
      `<strong>Stale metrics</strong> on ${stale.length} endpoint${stale.length > 1 ? "s" : ""}: ` +
      stale.map((e) => `<span class="ep">${esc(e.label)}</span>` + why(e)).join(", ") +
      ". The picker is routing on old load and cache data for them.");

    // Rejects rising (or simply high).
    const rising = rejects != null && rejects > 0.2 && (rejectsLong == null || rejects > 1.5 * rejectsLong);
    const high = rejectRatio != null && rejectRatio > 0.05 && rejects > 0.2;
    state.rejectWarning = rising ? "rising" : high ? "high" : null;
    let reasons = "";
    if (state.rejectWarning) {
      const by = [...P.increaseBy(short, cur, "sluice_rejects_total", "reason", filter).entries()].filter(([, v]) => v > 0)
        .sort((a, b) => b[1] - a[1]);
      reasons = by.map(([r, v]) => `${esc(r)} ${fmtNum(v / dt, 1)}/s`).join(", ");
    }
    setBanner("reject-banner", !state.rejectWarning ? null :
      `<strong>Rejects ${state.rejectWarning}</strong>: ${fmtNum(rejects, 1)}/s now` +
      (rejectsLong != null ? ` vs ${fmtNum(rejectsLong, 1)}/s over the last ${fmtNum((cur.t - long.t) / 1000, 0)} s` : "") +
      ` (${fmtPct(rejectRatio)} of requests)` + (reasons ? `; by reason: ${reasons}` : "") + ".");

    // The two incidents the page exists for.
    let diag = null;
    if (queueP99 != null && queueP99 > 0.5 && duty != null && duty < 0.5) {
      diag = "Requests queue at the gateway while engines look idle: the picker is wrong or its metrics are stale" +
        (stale.length ? " (stale: " + esc(state.stale.join(", ")) + ")" : "") + ".";
    } else if (duty != null && duty > 0.85 && (state.rejectWarning || (queueP99 != null && queueP99 > 0.5))) {
      diag = "Engines are pegged and requests are rejected or queued: capacity or shedding, not routing.";
    }
    state.diagnosis = diag;
    setBanner("diagnosis", diag);

    setText("stat-rps", fmtNum(rps, 1));
    setText("stat-rejects", fmtNum(rejects, 1));
    setText("stat-reject-ratio", fmtPct(rejectRatio));
    setText("stat-queue-p99", fmtSec(queueP99));
    setText("stat-ttft-p99", fmtSec(ttftP99));
    setText("stat-duty", fmtPct(duty));
    setText("stat-hit", fmtPct(engineHit));
    setText("stat-queued", fmtNum(queued, 0));

    // Endpoint table.
    const tbody = document.querySelector("#endpoint-table tbody");
    const errs = P.increaseBy(short, cur, "sluice_endpoint_scrape_errors_total", "endpoint", filter);
    tbody.innerHTML = eps.map(([, e]) => {
      const g = (n) => gaugeOf(cur, n, e);
      const isStale = state.stale.includes(epLabel(e));
      const healthy = g("sluice_endpoint_healthy");
      const pk = picks.get(e.endpoint);
      const er = errs.get(e.endpoint);
      return `<tr class="${isStale ? "stale" : ""}"><td>${esc(e.pool)}</td><td>${esc(e.endpoint)}</td>` +
        `<td>${healthy == null ? "–" : healthy === 1 ? "yes" : "<b>no</b>"}</td>` +
        `<td>${isStale ? "<b>STALE</b>" : "fresh"}</td><td>${fmtSec(g("sluice_endpoint_scrape_age_seconds"))}</td>` +
        `<td>${fmtNum(g("sluice_endpoint_inflight_requests"), 0)}</td><td>${fmtNum(g("sluice_endpoint_waiting_requests"), 0)}</td>` +
        `<td>${fmtNum(g("sluice_endpoint_running_requests"), 0)}</td><td>${fmtPct(g("sluice_endpoint_kv_usage_ratio"))}</td>` +
        `<td>${fmtPct(g("sluice_endpoint_duty_cycle_ratio"))}</td><td>${pk != null && dt > 0 ? fmtNum(pk / dt, 1) : "–"}</td>` +
        `<td>${er != null && dt > 0 ? fmtNum(er / dt, 1) : "–"}</td></tr>`;
    }).join("");

    for (const p of Object.values(panels)) p.render();
  }

  async function poll() {
    const started = Date.now();
    try {
      const ctl = new AbortController();
      const timer = setTimeout(() => ctl.abort(), Math.max(900, POLL_MS - 100));
      const resp = await fetch(METRICS_URL, { cache: "no-store", signal: ctl.signal });
      clearTimeout(timer);
      if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
      const text = await resp.text();
      const snap = P.parse(text, Date.now());
      state.history.push(snap);
      while (state.history.length > 2 && snap.t - state.history[0].t > HISTORY_MS) state.history.shift();
      state.polls++;
      state.lastPollAt = snap.t;
      updatePoolSelect(snap);
      setBanner("fetch-banner", null);
      analyse();
      setText("poll-status", `last poll ${new Date(snap.t).toLocaleTimeString()} · ${snap.series.size} series` +
        (snap.errors ? ` · ${snap.errors} unparsable lines` : ""));
    } catch (e) {
      state.errors++;
      state.lastError = String(e && e.message ? e.message : e);
      setBanner("fetch-banner", `<strong>Cannot read /metrics</strong>: ${esc(state.lastError)}. The charts below are frozen.`);
    }
    setTimeout(poll, Math.max(0, POLL_MS - (Date.now() - started)));
  }

  document.getElementById("pool").addEventListener("change", (ev) => {
    state.pool = ev.target.value;
    for (const p of Object.values(panels)) p.reset();
  });
  window.addEventListener("resize", () => { for (const p of Object.values(panels)) p.resize(); });

  // Exposed for the browser test and for operators in devtools.
  globalThis.sluiceDashboard = {
    state,
    panels,
    summary: () => Object.fromEntries(Object.entries(panels).map(([k, p]) => [k, p.summary()])),
  };
  poll();
})();
