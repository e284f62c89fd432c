#!/usr/bin/env python3
"""A stand-in for sluice's admin listener, for the dashboard's browser test while (or where) the
real gateway is not available: serves canned, changing Prometheus text in the shape of
docs/metrics.md at /metrics, the built dashboard (web/dist) at /dashboard and /dashboard/*, and
knobs to make incidents happen:
  POST /stub/freeze?endpoint=NAME      that endpoint's metrics stop updating: stale=1, scrape age grows
  POST /stub/freeze?endpoint=NAME&silent=1   its engine counters and gauges stop moving but the gateway
                                       still reports it fresh (a metrics handler serving one body forever)
  POST /stub/rejects?per_s=X           rejects per second (queue_full), 0 by default
  POST /stub/scenario?name=N           normal | idle_queueing (requests wait ~2 s at the gateway while
                                       engines are 10% busy) | pegged (engines 97% busy, KV 95%, rejects)
Run by hand: python3 tests/integration/metrics_stub.py --port 9999  then open /dashboard.
Not a test itself (ctest runs tests/integration/test_*.py only)."""
import argparse
import http.server
import math
import os
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIST = os.path.join(ROOT, "web", "dist")
QUEUE_LE = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
TTFT_LE = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
RENDER_LE = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1]
OVERHEAD_LE = [1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 0.1, 0.25, 1, 2.5, 10]
# sluice_gateway_overhead_seconds: a typical time per phase (s); read_body is observed only for bodies
# that did not arrive with their head (none here).
OVERHEAD_PHASES = {"parse": 2e-5, "admit": 5e-6, "pick": 8e-6, "connect": 3e-6, "send_request": 1.5e-5,
                   "first_upstream_byte": 0.15}
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8"}


def fmt_le(le):
    return "+Inf" if le == math.inf else repr(float(le)).rstrip("0").rstrip(".") if le % 1 else str(int(le)) if le >= 1 else repr(le)


class Fleet:
    """Counters and gauges of a gateway in front of three endpoints, advanced by wall time."""

    def __init__(self, endpoints=("e1", "e2", "e3"), pool="chat", rps=30.0):
        self.lock = threading.Lock()
        self.pool = pool
        self.endpoints = list(endpoints)
        self.rps = rps
        self.reject_per_s = 0.0
        self.scenario = "normal"
        self.frozen = {}  # endpoint -> time it froze
        self.silent = set()  # frozen endpoints the gateway (wrongly) still reports fresh
        self.t0 = self.last = time.monotonic()
        self.c = {}  # counters: key tuple -> value
        self.queue_b = [0.0] * (len(QUEUE_LE) + 1)
        self.ttft_b = [0.0] * (len(TTFT_LE) + 1)
        self.render_b = [0.0] * (len(RENDER_LE) + 1)
        self.overhead_b = {ph: [0.0] * (len(OVERHEAD_LE) + 1) for ph in OVERHEAD_PHASES}
        self.gauges = {e: {"kv": 0.2, "waiting": 0, "running": 0, "duty": 0.3, "inflight": 0} for e in self.endpoints}

    def add(self, key, v):
        self.c[key] = self.c.get(key, 0.0) + v

    def observe(self, buckets, les, value, n):
        for i, le in enumerate(les):
            if value <= le:
                buckets[i] += n
        buckets[-1] += n

    def advance(self):
        now = time.monotonic()
        dt = now - self.last
        if dt <= 0:
            return now
        self.last = now
        t = now - self.t0
        n = self.rps * dt
        self.add(("requests", "ok"), n)
        rej = self.reject_per_s * dt
        if rej:
            self.add(("requests", "rejected"), rej)
            self.add(("rejects", "queue_full"), rej)
        # Queue time mostly small, with a slow wave; TTFT around 200-400 ms.
        q = 0.004 + 0.02 * (1 + math.sin(t / 7))
        if self.scenario == "idle_queueing":
            q = 2.0
        if self.scenario == "pegged":
            rej = 8.0 * dt
            self.add(("requests", "rejected"), rej)
            self.add(("rejects", "shed"), rej)
        self.observe(self.queue_b, QUEUE_LE, q, n * 0.98)
        self.observe(self.queue_b, QUEUE_LE, q * 20, n * 0.02)
        self.observe(self.ttft_b, TTFT_LE, 0.2 + 0.1 * math.sin(t / 5), n)
        for ph, typical in OVERHEAD_PHASES.items():
            self.observe(self.overhead_b[ph], OVERHEAD_LE, typical * (1.2 + 0.5 * math.sin(t / 6)), n)
        # Engine render (token_ids.source render): a third of the bodies from the cache, a trickle of fallbacks.
        self.add(("render", "ok"), n * 0.6)
        self.add(("render", "cache_hit"), n * 0.35)
        self.add(("render", "timeout"), n * 0.03)
        self.add(("render", "error"), n * 0.02)
        self.observe(self.render_b, RENDER_LE, 0.002 + 0.001 * math.sin(t / 7), n * 0.65)
        live = [e for e in self.endpoints if e not in self.frozen]
        for i, e in enumerate(self.endpoints):
            share = n / len(self.endpoints)
            self.add(("picks", e), share)
            self.add(("prompt", e), share * 800)
            self.add(("predicted", e), share * 800 * (0.55 + 0.05 * math.sin(t / 9 + i)))
            # Engine KV events: ~20 events per request, a trickle of bad ones, predictions by source.
            self.add(("kv_events", e), share * 20)
            self.add(("kv_decode_errors", e), 0.2 * dt)
            self.add(("kv_gaps", e), 0.05 * dt)
            self.add(("kv_prompt", e), share * 800)
            self.add(("kv_pred_events", e), share * 800 * (0.5 + 0.05 * math.sin(t / 9 + i)))
            self.add(("kv_pred_recent", e), share * 800 * 0.04)
            self.add(("kv_pred_learned", e), share * 800 * 0.01)
            if e in live:
                g = self.gauges[e]
                g["kv"] = 0.45 + 0.3 * math.sin(t / 6 + i)
                g["waiting"] = max(0, round(3 + 3 * math.sin(t / 4 + i)))
                g["running"] = 8 + i
                g["duty"] = 0.5 + 0.35 * math.sin(t / 8 + i)
                if self.scenario == "idle_queueing":
                    g["duty"], g["waiting"] = 0.1, 0
                elif self.scenario == "pegged":
                    g["duty"], g["kv"], g["waiting"] = 0.97, 0.95, 20
                g["inflight"] = 10 + i
                self.add(("queries", e), share * 800)
                self.add(("hits", e), share * 800 * (0.5 + 0.1 * math.sin(t / 9 + i)))
        return now

    def text(self):
        with self.lock:
            now = self.advance()
            p = self.pool
            out = []

            def fam(name, kind, help_):
                out.append(f"# HELP {name} {help_}")
                out.append(f"# TYPE {name} {kind}")

            fam("sluice_requests_total", "counter", "Finished requests.")
            out.append(f'sluice_requests_total{{pool="{p}",model="m",status="200",outcome="ok"}} {self.c.get(("requests", "ok"), 0):.0f}')
            out.append(f'sluice_requests_total{{pool="{p}",model="m",status="429",outcome="rejected"}} {self.c.get(("requests", "rejected"), 0):.0f}')
            fam("sluice_rejects_total", "counter", "Rejected requests by reason.")
            for reason in ("queue_full", "shed"):
                out.append(f'sluice_rejects_total{{pool="{p}",reason="{reason}"}} {self.c.get(("rejects", reason), 0):.0f}')
            for name, les, b in (("sluice_queue_time_seconds", QUEUE_LE, self.queue_b),
                                 ("sluice_ttft_seconds", TTFT_LE, self.ttft_b)):
                fam(name, "histogram", "Seconds.")
                extra = ',priority="0"' if "queue" in name else ""
                for le, v in zip(les + [math.inf], b):
                    out.append(f'{name}_bucket{{pool="{p}"{extra},le="{fmt_le(le)}"}} {v:.0f}')
                out.append(f'{name}_sum{{pool="{p}"{extra}}} {b[-1] * 0.05:.3f}')
                out.append(f'{name}_count{{pool="{p}"{extra}}} {b[-1]:.0f}')
            fam("sluice_gateway_overhead_seconds", "histogram", "What the gateway itself costs a request, by phase.")
            for ph, b in self.overhead_b.items():
                for le, v in zip(OVERHEAD_LE + [math.inf], b):
                    out.append(f'sluice_gateway_overhead_seconds_bucket{{phase="{ph}",le="{fmt_le(le)}"}} {v:.0f}')
                out.append(f'sluice_gateway_overhead_seconds_sum{{phase="{ph}"}} {b[-1] * OVERHEAD_PHASES[ph]:.6f}')
                out.append(f'sluice_gateway_overhead_seconds_count{{phase="{ph}"}} {b[-1]:.0f}')
            fam("sluice_queue_depth", "gauge", "Requests waiting in the gateway queue.")
            out.append(f'sluice_queue_depth{{pool="{p}",priority="0"}} 2')
            per_ep = [
                ("sluice_picks_total", "counter", "picks"),
                ("sluice_prefix_prompt_tokens_total", "counter", "prompt"),
                ("sluice_prefix_predicted_cached_tokens_total", "counter", "predicted"),
                ("sluice_engine_prefix_cache_queries_tokens_total", "counter", "queries"),
                ("sluice_engine_prefix_cache_hits_tokens_total", "counter", "hits"),
            ]
            for name, kind, key in per_ep:
                fam(name, kind, "Per endpoint.")
                for e in self.endpoints:
                    out.append(f'{name}{{pool="{p}",endpoint="{e}"}} {self.c.get((key, e), 0):.0f}')
            gauges = [("sluice_endpoint_inflight_requests", "inflight"), ("sluice_endpoint_waiting_requests", "waiting"),
                      ("sluice_endpoint_running_requests", "running"), ("sluice_endpoint_kv_usage_ratio", "kv"),
                      ("sluice_endpoint_duty_cycle_ratio", "duty")]
            for name, key in gauges:
                fam(name, "gauge", "Per endpoint.")
                for e in self.endpoints:
                    out.append(f'{name}{{pool="{p}",endpoint="{e}"}} {self.gauges[e][key]:.4g}')
            # The pool's most asked-for prefixes: one hot prefix on 2 of the endpoints, two lighter ones.
            hot = ((12.5, 2), (3.0, 1), (1.5, 1))
            fam("sluice_hot_prefix_requests_per_second", "gauge", "Most asked-for prefixes by rank.")
            for rank, (rps, _) in enumerate(hot, start=1):
                out.append(f'sluice_hot_prefix_requests_per_second{{pool="{p}",rank="{rank}"}} {rps}')
            fam("sluice_hot_prefix_holders", "gauge", "Endpoints holding them.")
            for rank, (_, holders) in enumerate(hot, start=1):
                out.append(f'sluice_hot_prefix_holders{{pool="{p}",rank="{rank}"}} {holders}')
            fam("sluice_endpoint_scrape_age_seconds", "gauge", "Age of the last good scrape.")
            for e in self.endpoints:
                age = now - self.frozen[e] if e in self.frozen and e not in self.silent else 0.03
                out.append(f'sluice_endpoint_scrape_age_seconds{{pool="{p}",endpoint="{e}"}} {age:.3f}')
            fam("sluice_endpoint_stale", "gauge", "1 when stale.")
            for e in self.endpoints:
                stale = 1 if e in self.frozen and e not in self.silent and now - self.frozen[e] > 0.5 else 0
                out.append(f'sluice_endpoint_stale{{pool="{p}",endpoint="{e}"}} {stale}')
            kv = [("sluice_kv_events_total", "kv_events"), ("sluice_kv_events_decode_errors_total", "kv_decode_errors"),
                  ("sluice_kv_events_skipped_total", None), ("sluice_kv_events_gaps_total", "kv_gaps"),
                  ("sluice_kv_events_resyncs_total", None)]
            for name, key in kv:
                fam(name, "counter", "KV events per endpoint.")
                for e in self.endpoints:
                    out.append(f'{name}{{pool="{p}",endpoint="{e}"}} {self.c.get((key, e), 0):.0f}')
            for name, v in (("sluice_kv_events_connected", "1"), ("sluice_kv_events_lag_seconds", "0.004")):
                fam(name, "gauge", "KV events per endpoint.")
                for e in self.endpoints:
                    out.append(f'{name}{{pool="{p}",endpoint="{e}"}} {v}')
            fam("sluice_kv_prompt_tokens_total", "counter", "By source.")
            fam("sluice_kv_predicted_cached_tokens_total", "counter", "By source.")
            for e in self.endpoints:
                out.append(f'sluice_kv_prompt_tokens_total{{pool="{p}",endpoint="{e}",source="events"}} '
                           f'{self.c.get(("kv_prompt", e), 0):.0f}')
                for src in ("events", "recent", "learned"):
                    out.append(f'sluice_kv_predicted_cached_tokens_total{{pool="{p}",endpoint="{e}",source="{src}"}} '
                               f'{self.c.get(("kv_pred_" + src, e), 0):.0f}')
            fam("sluice_render_requests_total", "counter", "Render lookups by outcome.")
            for o in ("ok", "cache_hit", "timeout", "error", "cancelled"):
                out.append(f'sluice_render_requests_total{{pool="{p}",outcome="{o}"}} {self.c.get(("render", o), 0):.0f}')
            fam("sluice_render_duration_seconds", "histogram", "Seconds.")
            for le, v in zip(RENDER_LE + [math.inf], self.render_b):
                out.append(f'sluice_render_duration_seconds_bucket{{pool="{p}",le="{fmt_le(le)}"}} {v:.0f}')
            out.append(f'sluice_render_duration_seconds_sum{{pool="{p}"}} {self.render_b[-1] * 0.002:.3f}')
            out.append(f'sluice_render_duration_seconds_count{{pool="{p}"}} {self.render_b[-1]:.0f}')
            fam("sluice_endpoint_healthy", "gauge", "1 when taking traffic.")
            for e in self.endpoints:
                out.append(f'sluice_endpoint_healthy{{pool="{p}",endpoint="{e}"}} 1')
            fam("sluice_endpoint_scrape_errors_total", "counter", "Failed scrapes.")
            for e in self.endpoints:
                out.append(f'sluice_endpoint_scrape_errors_total{{pool="{p}",endpoint="{e}"}} 0')
            return "\n".join(out) + "\n"


def make_handler(fleet, dist=DIST):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def send(self, code, body, ctype="text/plain; charset=utf-8"):
            data = body.encode() if isinstance(body, str) else body
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/metrics":
                return self.send(200, fleet.text(), "text/plain; version=0.0.4; charset=utf-8")
            if url.path in ("/dashboard", "/dashboard/") or url.path.startswith("/dashboard/"):
                name = url.path[len("/dashboard/"):] or "index.html"
                f = os.path.join(dist, os.path.basename(name))
                if os.path.isfile(f):
                    with open(f, "rb") as fh:
                        return self.send(200, fh.read(), CONTENT_TYPES.get(os.path.splitext(f)[1], "application/octet-stream"))
            return self.send(404, "not found\n")

        def do_POST(self):
            url = urllib.parse.urlsplit(self.path)
            q = dict(urllib.parse.parse_qsl(url.query))
            with fleet.lock:
                fleet.advance()
                if url.path == "/stub/freeze" and q.get("endpoint") in fleet.endpoints:
                    fleet.frozen.setdefault(q["endpoint"], time.monotonic())
                    if q.get("silent") == "1":
                        fleet.silent.add(q["endpoint"])
                    return self.send(200, "frozen\n")
                if url.path == "/stub/scenario" and q.get("name") in ("normal", "idle_queueing", "pegged"):
                    fleet.scenario = q["name"]
                    return self.send(200, "ok\n")
                if url.path == "/stub/rejects":
                    fleet.reject_per_s = float(q.get("per_s", "0"))
                    return self.send(200, "ok\n")
            return self.send(404, "not found\n")

    return Handler


def serve(port=0, fleet=None):
    """Starts the stub on 127.0.0.1 in a thread; returns (server, fleet). server.server_address[1] is the port."""
    fleet = fleet or Fleet()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), make_handler(fleet))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, fleet


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=9999)
    args = ap.parse_args()
    srv, _ = serve(args.port)
    print(f"metrics stub on http://127.0.0.1:{srv.server_address[1]}/dashboard")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.shutdown()
