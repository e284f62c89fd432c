// Prometheus text exposition (0.0.4) parsing and the PromQL-like arithmetic the dashboard needs:
// counter increases between two scrapes (reset-aware), summed over matching series, and
// histogram_quantile over bucket increases. A classic script: it defines globalThis.SluiceProm,
// which app.js uses in the browser and web/test/*.test.mjs imports under node.
(function () {
  "use strict";

  function parseValue(s) {
    const l = s.toLowerCase();
    if (l === "+inf" || l === "inf") return Infinity;
    if (l === "-inf") return -Infinity;
    if (l === "nan") return NaN;
    const v = Number(s);
    return s.length > 0 && !Number.isNaN(v) ? v : undefined;
  }

  // One sample line: name{a="b",c="d"} value [timestamp]. Returns null when malformed.
  function parseLine(line) {
    let i = 0;
    const n = line.length;
    while (i < n && /[A-Za-z0-9_:]/.test(line[i])) i++;
    if (i === 0) return null;
    const name = line.slice(0, i);
    const labels = {};
    if (line[i] === "{") {
      i++;
      for (;;) {
        while (line[i] === " " || line[i] === ",") i++;
        if (line[i] === "}") { i++; break; }
        const ks = i;
        while (i < n && /[A-Za-z0-9_]/.test(line[i])) i++;
        if (i === ks) return null;
        const key = line.slice(ks, i);
        while (line[i] === " ") i++;
        if (line[i] !== "=") return null;
        i++;
        while (line[i] === " ") i++;
        if (line[i] !== '"') return null;
        i++;
        let val = "";
        for (;;) {
          if (i >= n) return null;
          const c = line[i++];
          if (c === '"') break;
          if (c === "\\") {
            const e = line[i++];
            val += e === "n" ? "\n" : e;
          } else {
            val += c;
          }
        }
        labels[key] = val;
      }
    }
    const rest = line.slice(i).trim().split(/\s+/);
    const value = parseValue(rest[0] || "");
    if (value === undefined) return null;
    return { name, labels, value };
  }

  function seriesKey(name, labels) {
    const keys = Object.keys(labels).sort();
    return name + "{" + keys.map((k) => k + "=" + JSON.stringify(labels[k])).join(",") + "}";
  }

  // Parses a whole exposition into a snapshot: { t, series: Map key -> sample, byName: Map name -> [sample], errors }.
  function parse(text, t) {
    const series = new Map();
    const byName = new Map();
    let errors = 0;
    for (const raw of text.split("\n")) {
      const line = raw.trim();
      if (line === "" || line[0] === "#") continue;
      const s = parseLine(line);
      if (!s) { errors++; continue; }
      s.key = seriesKey(s.name, s.labels);
      series.set(s.key, s);
      let list = byName.get(s.name);
      if (!list) byName.set(s.name, (list = []));
      list.push(s);
    }
    return { t, series, byName, errors };
  }

  function samples(snap, name, filter) {
    const list = (snap && snap.byName.get(name)) || [];
    return filter ? list.filter((s) => filter(s.labels)) : list;
  }

  // Sum of a gauge (or counter's current value) over matching series; null when none match.
  function sum(snap, name, filter) {
    const list = samples(snap, name, filter);
    if (list.length === 0) return null;
    return list.reduce((a, s) => a + s.value, 0);
  }

  // Reset-aware increase of one series between two snapshots (null when it is new).
  function seriesIncrease(prev, s) {
    const p = prev.series.get(s.key);
    if (!p) return null;
    return s.value >= p.value ? s.value - p.value : s.value;  // a reset restarts from 0
  }

  // Summed increase of counter `name` over matching series; null when no series existed in both.
  function increase(prev, cur, name, filter) {
    if (!prev || !cur) return null;
    let total = null;
    for (const s of samples(cur, name, filter)) {
      const inc = seriesIncrease(prev, s);
      if (inc !== null) total = (total || 0) + inc;
    }
    return total;
  }

  // Per-second rate of counter `name` between two snapshots (t in ms).
  function rate(prev, cur, name, filter) {
    const inc = increase(prev, cur, name, filter);
    const dt = cur && prev ? (cur.t - prev.t) / 1000 : 0;
    return inc === null || dt <= 0 ? null : inc / dt;
  }

  // Increase per series, grouped by a label (e.g. endpoint): Map labelValue -> increase.
  function increaseBy(prev, cur, name, label, filter) {
    const out = new Map();
    if (!prev || !cur) return out;
    for (const s of samples(cur, name, filter)) {
      const inc = seriesIncrease(prev, s);
      if (inc === null) continue;
      const k = s.labels[label];
      out.set(k, (out.get(k) || 0) + inc);
    }
    return out;
  }

  // Bucket increases of histogram `name` (without _bucket) summed by `le` over matching series.
  function bucketIncrease(prev, cur, name, filter) {
    const byLe = new Map();
    if (!prev || !cur) return byLe;
    for (const s of samples(cur, name + "_bucket", filter)) {
      const le = parseValue(s.labels.le || "");
      if (le === undefined) continue;
      const inc = seriesIncrease(prev, s);
      if (inc === null) continue;
      byLe.set(le, (byLe.get(le) || 0) + inc);
    }
    return byLe;
  }

  // PromQL's histogram_quantile over cumulative bucket counts (Map le -> count). Returns null when
  // there were no observations (nothing to say), like Prometheus' NaN.
  function histogramQuantile(q, byLe) {
    const les = [...byLe.keys()].sort((a, b) => a - b);
    if (les.length === 0 || les[les.length - 1] !== Infinity) return null;
    // Cumulative counts must be monotonic; fix small violations the way Prometheus does.
    const counts = [];
    let running = 0;
    for (const le of les) { running = Math.max(running, byLe.get(le)); counts.push(running); }
    const total = counts[counts.length - 1];
    if (!(total > 0)) return null;
    const rank = q * total;
    let b = counts.findIndex((c) => c >= rank);
    if (b < 0) b = counts.length - 1;
    if (les[b] === Infinity) return les.length >= 2 ? les[les.length - 2] : null;
    const lower = b === 0 ? 0 : les[b - 1];
    const below = b === 0 ? 0 : counts[b - 1];
    const inBucket = counts[b] - below;
    if (inBucket <= 0) return les[b];
    return lower + (les[b] - lower) * ((rank - below) / inBucket);
  }

  globalThis.SluiceProm = { parse, parseLine, parseValue, samples, sum, increase, rate, increaseBy,
    bucketIncrease, histogramQuantile, seriesKey };
})();
