// Unit tests of the dashboard's Prometheus text parsing and rate/quantile arithmetic (node --test).
import test from "node:test";
import assert from "node:assert/strict";
import "../src/prom.js";

const P = globalThis.SluiceProm;

test("parses names, labels with escapes, special values and timestamps", () => {
  const snap = P.parse([
    "# HELP x_total help",
    "# TYPE x_total counter",
    'x_total{a="1",b="q\\"uote\\\\ \\n"} 42 1700000000000',
    "up 1",
    'h_bucket{le="+Inf"} +Inf',
    "nan_gauge NaN",
    "garbage line with {",
    'bad{a=1} 3',
    "",
  ].join("\n"), 1000);
  assert.equal(snap.errors, 2);
  const x = P.samples(snap, "x_total")[0];
  assert.deepEqual(x.labels, { a: "1", b: 'q"uote\\ \n' });
  assert.equal(x.value, 42);
  assert.equal(P.sum(snap, "up"), 1);
  assert.equal(P.samples(snap, "h_bucket")[0].value, Infinity);
  assert.ok(Number.isNaN(P.samples(snap, "nan_gauge")[0].value));
  assert.equal(P.sum(snap, "missing"), null);
});

test("rate sums matching series, ignores new series and survives counter resets", () => {
  const a = P.parse('c{pool="p",e="1"} 100\nc{pool="p",e="2"} 50\nc{pool="q",e="3"} 7\n', 0);
  const b = P.parse('c{pool="p",e="1"} 110\nc{pool="p",e="2"} 5\nc{pool="q",e="3"} 9\nc{pool="p",e="4"} 1000\n', 2000);
  // e1: +10, e2 reset: +5, e3 (other pool) excluded, e4 new: ignored.
  assert.equal(P.increase(a, b, "c", (l) => l.pool === "p"), 15);
  assert.equal(P.rate(a, b, "c", (l) => l.pool === "p"), 7.5);
  assert.equal(P.rate(a, b, "c"), 8.5);
  assert.deepEqual([...P.increaseBy(a, b, "c", "e")], [["1", 10], ["2", 5], ["3", 2]]);
  assert.equal(P.rate(null, b, "c"), null);
  assert.equal(P.rate(a, b, "absent"), null);
});

test("histogram_quantile matches Prometheus on bucket increases summed across series", () => {
  const mk = (t, n) => P.parse([
    `q_bucket{pool="a",priority="0",le="1"} 0`,
    `q_bucket{pool="a",priority="0",le="2.5"} ${n}`,
    `q_bucket{pool="a",priority="0",le="+Inf"} ${n}`,
    `q_bucket{pool="a",priority="1",le="1"} 0`,
    `q_bucket{pool="a",priority="1",le="2.5"} ${n}`,
    `q_bucket{pool="a",priority="1",le="+Inf"} ${n}`,
  ].join("\n"), t);
  const inc = P.bucketIncrease(mk(0, 10), mk(1000, 110), "q");
  assert.deepEqual([...inc.entries()].sort((x, y) => x[0] - y[0]), [[1, 0], [2.5, 200], [Infinity, 200]]);
  // Same figure promtool computes for the alert unit test: 1 + 1.5 * 0.99.
  assert.ok(Math.abs(P.histogramQuantile(0.99, inc) - 2.485) < 1e-9);
  assert.equal(P.histogramQuantile(0.5, new Map([[1, 0], [Infinity, 0]])), null);      // no observations
  assert.equal(P.histogramQuantile(0.99, new Map([[1, 1], [Infinity, 10]])), 1);       // in +Inf: last finite bound
  assert.equal(P.histogramQuantile(0.5, new Map([[1, 5]])), null);                     // no +Inf bucket
  assert.ok(Math.abs(P.histogramQuantile(0.5, new Map([[0.1, 0], [0.2, 10], [Infinity, 10]])) - 0.15) < 1e-12);
});
