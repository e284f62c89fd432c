// Browser check of the live dashboard, driven by playwright-core with Debian's chromium.
//
//   node web/test/dashboard.spec.mjs --url http://127.0.0.1:PORT \
//        --freeze-url URL [--freeze-body JSON] --stale NAME [--fresh NAME,NAME]
//        [--silent-freeze-url URL --silent-stale NAME]
//        [--rejects-url URL] [--diagnoses '[["URL","REGEX"],...]'] [--kv] [--render] [--screenshot out.png]
//
// 1. loads URL/dashboard, waits until every chart has points (uPlot data, not just a canvas);
// 2. checks no stale warning is shown while all endpoints are fresh;
// 3. POSTs --freeze-url (freezes one replica's metrics), then waits for the stale warning naming
//    --stale and not naming the --fresh ones;
//    with --silent-freeze-url, a second freeze the gateway does not flag (counters stop, scrape
//    "fresh"): the warning must name --silent-stale too, from the page's own frozen-counter check;
// 4. with --rejects-url, POSTs it and waits for the rejects warning;
// 5. with --diagnoses, POSTs each URL in turn and waits for the diagnosis line to match REGEX.
// Prints one JSON line per step and exits non-zero on the first failure.
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

function args() {
  const out = {};
  const a = process.argv.slice(2);
  for (let i = 0; i < a.length; i++) if (a[i].startsWith("--")) out[a[i].slice(2)] = a[i + 1] && !a[i + 1].startsWith("--") ? a[++i] : "1";
  return out;
}
const opt = args();
if (!opt.url) { console.error("usage: dashboard.spec.mjs --url http://127.0.0.1:PORT [...]"); process.exit(2); }
const log = (step, data) => console.log(JSON.stringify({ step, ...data }));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function post(url, body) {
  const r = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: body || "" });
  const text = await r.text();
  if (!r.ok) throw new Error(`POST ${url} -> ${r.status} ${text}`);
  return text;
}

async function waitFor(what, fn, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await fn();
    if (last && last.ok) return last;
    await sleep(250);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${JSON.stringify(last)}`);
}

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-chromium-"));
let context;
let failed = false;
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: opt.chromium || "/usr/bin/chromium",
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1400, height: 1800 },
    timeout: 60000,
  });
  const page = context.pages()[0] || (await context.newPage());
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") pageErrors.push(m.text()); });
  const external = [];
  page.on("request", (r) => { if (!r.url().startsWith(opt.url)) external.push(r.url()); });

  const resp = await page.goto(opt.url + "/dashboard", { waitUntil: "load", timeout: 30000 });
  if (!resp || resp.status() !== 200) throw new Error(`GET /dashboard -> ${resp && resp.status()}`);
  log("loaded", { status: resp.status(), title: await page.title() });

  // Every chart has a rendered uPlot with at least 3 points in each of its key series.
  const wanted = {
    hit: ["prefix hit (engine)", "prefix hit (predicted)", "duty cycle (avg)"],
    reject: ["rejects/s", "client retries/s", "reject ratio", "duty cycle (avg)"],
    queue: ["queue time p99"],
    ttft: ["TTFT p99"],
    kv: null, waiting: null, picks: null, duty: null,   // per endpoint: every series
    hot: ["#1 holders", "#1 requests/s"],   // the load's shared system prompt
    upstream: ["upstream errors + timeouts", "retries", "retries refused"],
    tokens: ["streamed token events/s"],
    freshness: null,
    overhead: ["parse p99", "admit p99", "pick p99", "connect p99", "send_request p99", "first_upstream_byte p99"],
  };
  // --kv: the gateway exports KV-event metrics (pools with kv_events): their two panels must draw.
  if (opt.kv) {
    wanted.kvEvents = ["events/s", "decode errors + skipped/s", "gaps/s", "event lag (max)"];
    wanted.kvSource = ["predicted from events", "predicted from recent dispatches", "prefix hit (engine)"];
  }
  // --render: the gateway exports the render series (pools with token_ids.source render).
  if (opt.render) {
    wanted.render = ["rendered by the engine/s", "cache hits/s", "timeouts + errors (estimated)/s", "render p99"];
    wanted.renderCache = ["render cache hit rate"];
  }
  const charts = await waitFor("charts with data", async () => {
    const s = await page.evaluate(() => {
      const d = globalThis.sluiceDashboard;
      if (!d) return null;
      const canvases = {};
      for (const [k, p] of Object.entries(d.panels)) {
        canvases[k] = !!(p.chart && p.chart.root && p.chart.root.querySelector("canvas")) ? p.chart.data[0].length : 0;
      }
      return { polls: d.state.polls, summary: d.summary(), canvases };
    });
    if (!s) return { ok: false, reason: "no sluiceDashboard yet" };
    const missing = [];
    for (const [panel, series] of Object.entries(wanted)) {
      const got = s.summary[panel] || {};
      const names = series || Object.keys(got);
      if (names.length === 0) missing.push(`${panel}: no series`);
      for (const n of names) if (!((got[n] || 0) >= 3)) missing.push(`${panel}/${n}=${got[n] || 0}`);
      if (!(s.canvases[panel] >= 3)) missing.push(`${panel}: uPlot has ${s.canvases[panel]} x points`);
    }
    return { ok: missing.length === 0, polls: s.polls, missing, summary: s.summary };
  }, Number(opt["data-timeout-ms"] || 45000));
  log("charts", { polls: charts.polls, summary: charts.summary });

  const staleBefore = await page.evaluate(() => ({ hidden: document.getElementById("stale-banner").hidden,
    stale: globalThis.sluiceDashboard.state.stale }));
  if (!staleBefore.hidden) throw new Error(`stale warning shown before any freeze: ${JSON.stringify(staleBefore)}`);
  log("no-stale-warning-before-freeze", staleBefore);
  if (opt.screenshot) await page.screenshot({ path: opt.screenshot.replace(/\.png$/, "") + "-before.png", fullPage: true });

  if (opt["freeze-url"]) {
    await post(opt["freeze-url"], opt["freeze-body"]);
    const t0 = Date.now();
    const fresh = (opt.fresh || "").split(",").filter(Boolean);
    const banner = await waitFor(`stale warning naming ${opt.stale}`, async () => {
      const b = await page.evaluate(() => {
        const el = document.getElementById("stale-banner");
        const r = el.getBoundingClientRect();
        return { hidden: el.hidden, visible: !el.hidden && r.height > 0, text: el.textContent };
      });
      const named = opt.stale ? b.text.includes(opt.stale) : true;
      const wrong = fresh.filter((f) => new RegExp(`(^|[^\\w-])${f.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}([^\\w-]|$)`).test(b.text));
      return { ok: b.visible && named && wrong.length === 0, ...b, wrongly_named: wrong };
    }, Number(opt["stale-timeout-ms"] || 20000));
    log("stale-warning", { after_ms: Date.now() - t0, text: banner.text });
    const row = await page.evaluate(() => [...document.querySelectorAll("#endpoint-table tr.stale td:nth-child(2)")].map((td) => td.textContent));
    log("stale-rows", { rows: row });
    if (opt.stale && !row.includes(opt.stale)) throw new Error(`endpoint table does not mark ${opt.stale} stale: ${row}`);
    if (opt.screenshot) await page.screenshot({ path: opt.screenshot.replace(/\.png$/, "") + "-stale.png", fullPage: true });
  }

  if (opt["silent-freeze-url"]) {
    await post(opt["silent-freeze-url"]);
    const t0 = Date.now();
    const b = await waitFor(`stale warning naming ${opt["silent-stale"]}`, async () => {
      const r = await page.evaluate(() => ({ hidden: document.getElementById("stale-banner").hidden,
        text: document.getElementById("stale-banner").textContent, stale: globalThis.sluiceDashboard.state.stale }));
      return { ok: !r.hidden && r.stale.includes(opt["silent-stale"]) && (!opt.stale || r.stale.includes(opt.stale)), ...r };
    }, 20000);
    log("silent-freeze-warning", { after_ms: Date.now() - t0, text: b.text });
  }

  if (opt["rejects-url"]) {
    await post(opt["rejects-url"], opt["rejects-body"]);
    const b = await waitFor("rejects warning", async () => {
      const r = await page.evaluate(() => ({ hidden: document.getElementById("reject-banner").hidden,
        text: document.getElementById("reject-banner").textContent }));
      return { ok: !r.hidden && /Rejects (rising|high)/.test(r.text), ...r };
    }, 20000);
    log("reject-warning", { text: b.text });
  }

  for (const [url, regex] of JSON.parse(opt.diagnoses || "[]")) {
    await post(url);
    const t0 = Date.now();
    const d = await waitFor(`diagnosis /${regex}/`, async () => {
      const r = await page.evaluate(() => ({ hidden: document.getElementById("diagnosis").hidden,
        text: document.getElementById("diagnosis").textContent }));
      return { ok: !r.hidden && new RegExp(regex).test(r.text), ...r };
    }, 25000);
    log("diagnosis", { after_ms: Date.now() - t0, text: d.text });
    if (opt.screenshot) await page.screenshot({ path: opt.screenshot.replace(/\.png$/, "") + `-diag-${regex.replace(/\W+/g, "_").slice(0, 20)}.png`, fullPage: true });
  }

  if (external.length) throw new Error(`the page fetched from other origins: ${external.slice(0, 5)}`);
  if (pageErrors.length) throw new Error(`page errors: ${pageErrors.slice(0, 5).join(" | ")}`);
  log("done", { ok: true });
} catch (e) {
  failed = true;
  log("failed", { error: String(e && e.stack ? e.stack : e) });
} finally {
  if (context) await context.close().catch(() => {});
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
