#!/usr/bin/env python3
"""The live dashboard in a real browser (Debian's chromium, driven headless by playwright-core from
web/node_modules through web/test/dashboard.spec.mjs).

Two runs:
  stub  the page served by tests/integration/metrics_stub.py (canned, changing /metrics text in the
        shape of docs/metrics.md): charts show data, freezing endpoint e2 raises the stale warning
        naming e2 only, a "silent" freeze of e3 (counters stop, the gateway still says fresh) is
        caught by the page's own frozen-counter check, turning rejects on raises the rejects warning, and the diagnosis line names
        the two classic incidents (engines pegged + rejects; queueing while engines idle).
  real  `sluice sim` (3 replicas) + `sluice serve` under chat load: /dashboard from the admin
        listener, charts show data, and after `POST /admin/faults {"metrics":"freeze"}` on replica 1
        the stale warning names replica-1 and not the others. While the admin listener does not
        serve /dashboard itself, the page is served from web/dist by a small proxy that forwards
        /metrics to the real admin listener (said in the output; --require-real fails instead).

Run: python3 tests/integration/test_dashboard.py --sluice build/sluice [--require-real] [--screenshots DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WEB = os.path.join(ROOT, "web")
SPEC = os.path.join(WEB, "test", "dashboard.spec.mjs")
sys.path.insert(0, HERE)
import metrics_stub  # noqa: E402
import sluice_fleet  # noqa: E402
from sluice_fleet import http_req, load_loop, start_sim  # noqa: E402


# Series the page needs to draw every chart (docs/metrics.md). Not sluice_queue_time_seconds: the
# gateway observes it only for requests that waited, and the page draws 0 while nothing waits.
PAGE_SERIES = ["sluice_requests_total",
               "sluice_ttft_seconds_bucket", "sluice_picks_total", "sluice_prefix_prompt_tokens_total",
               "sluice_prefix_predicted_cached_tokens_total", "sluice_engine_prefix_cache_queries_tokens_total",
               "sluice_engine_prefix_cache_hits_tokens_total", "sluice_endpoint_waiting_requests",
               "sluice_endpoint_kv_usage_ratio", "sluice_endpoint_duty_cycle_ratio",
               "sluice_endpoint_scrape_age_seconds", "sluice_endpoint_stale"]


def log(msg):
    print(msg, flush=True)


def ensure_browser_tooling():
    problems = []
    if not shutil.which("node"):
        problems.append("node not found")
    if not os.path.exists("/usr/bin/chromium"):
        problems.append("/usr/bin/chromium not found (Debian package chromium)")
    if problems:
        raise SystemExit("FAILED: " + "; ".join(problems) + " -- run scripts/install-deps.sh")
    if not os.path.isdir(os.path.join(WEB, "node_modules", "playwright-core")) or \
            not os.path.exists(os.path.join(WEB, "dist", "index.html")):
        log("web/node_modules or web/dist missing: running scripts/build-web.sh")
        subprocess.run([os.path.join(ROOT, "scripts", "build-web.sh")], check=True, timeout=300)


def run_spec(args, timeout=150):
    cmd = ["node", SPEC] + args
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, cwd=WEB, capture_output=True, text=True, timeout=timeout)
    for line in p.stdout.splitlines():
        log("  " + line[:2000])
    if p.stderr.strip():
        log("  stderr: " + p.stderr.strip()[-3000:])
    return p.returncode == 0


def stub_run(shots):
    srv, _ = metrics_stub.serve(0)
    port = srv.server_address[1]
    try:
        base = f"http://127.0.0.1:{port}"
        args = ["--url", base, "--freeze-url", f"{base}/stub/freeze?endpoint=e2", "--stale", "e2",
                "--fresh", "e1,e3", "--silent-freeze-url", f"{base}/stub/freeze?endpoint=e3&silent=1",
                "--silent-stale", "e3", "--rejects-url", f"{base}/stub/rejects?per_s=8", "--kv", "--render",
                "--diagnoses", json.dumps([[f"{base}/stub/scenario?name=pegged", "Engines are pegged"],
                                           [f"{base}/stub/scenario?name=idle_queueing", "engines look idle"]])]
        if shots:
            args += ["--screenshot", os.path.join(shots, "stub.png")]
        return run_spec(args)
    finally:
        srv.shutdown()
        srv.server_close()


class MetricsProxy:
    """web/dist at /dashboard*, and GET /metrics forwarded to the real admin listener."""

    def __init__(self, admin_port):
        import http.server

        class Handler(metrics_stub.make_handler(None)):
            def do_GET(self):
                if self.path.split("?")[0] == "/metrics":
                    try:
                        status, body = http_req(admin_port, "GET", "/metrics")
                    except OSError as e:
                        return self.send(502, f"admin listener: {e}\n")
                    return self.send(status, body, "text/plain; version=0.0.4; charset=utf-8")
                return super().do_GET()

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


def real_run(sluice, shots, require_real, fault="freeze"):
    """Returns True (passed), False (failed) or None (skipped: the gateway does not serve /dashboard)."""
    model = sluice_fleet.MODEL
    procs = []
    stop = threading.Event()
    tmp = tempfile.mkdtemp(prefix="sluice-dash-")
    try:
        sim, ports = start_sim(sluice)
        procs.append(sim)
        try:
            # Two in flight per replica and six clients: requests also wait in the gateway's queue.
            gw, listen, admin = sluice_fleet.start_gateway(sluice, ports, tmp, max_in_flight_per_endpoint=2)
        except RuntimeError as e:
            if require_real:
                log(f"FAILED: {e}")
                return False
            log(f"SKIP real run: {e}")
            return None
        procs.append(gw)
        page_port = admin
        status, body = http_req(admin, "GET", "/dashboard")
        if status != 200 or b"sluiceDashboard" not in http_req(admin, "GET", "/dashboard/app.js")[1]:
            msg = (f"the admin listener does not serve the dashboard yet (GET /dashboard -> {status}); "
                   "wire it to find_dashboard_asset() (src/gateway/dashboard_assets.h)")
            if require_real:
                log("FAILED: " + msg)
                return False
            log("NOTE: " + msg + "; serving web/dist through a proxy to the real /metrics instead")
            proxy = MetricsProxy(admin)
            procs.append(proxy)
            page_port = proxy.port

        counts = {}
        workers = [threading.Thread(target=load_loop, args=(listen, stop, model, counts), daemon=True) for _ in range(6)]
        for w in workers:
            w.start()
        # Wait for traffic to reach every replica and the gateway to report every series the page
        # draws. Once the admin listener serves /dashboard itself, the gateway is expected to be
        # complete and a missing series fails the run; before that it is a skip.
        deadline = time.time() + 40
        missing = PAGE_SERIES
        while time.time() < deadline:
            text = http_req(admin, "GET", "/metrics")[1].decode()
            missing = [n for n in PAGE_SERIES if n not in text]
            missing += [f'endpoint="replica-{i}"' for i in range(3) if f'endpoint="replica-{i}"' not in text]
            if not missing:
                break
            time.sleep(0.5)
        if missing:
            msg = f"the gateway's /metrics lacks series the page draws: {missing}"
            if page_port == admin or require_real:
                log("FAILED: " + msg)
                return False
            log("SKIP real run: " + msg)
            return None
        log(f"load so far: {counts}")
        args = ["--url", f"http://127.0.0.1:{page_port}",
                "--freeze-url", f"http://127.0.0.1:{ports[1]}/admin/faults", "--freeze-body", json.dumps({"metrics": fault}),
                "--stale", "replica-1", "--fresh", "replica-0,replica-2"]
        if shots:
            args += ["--screenshot", os.path.join(shots, "real.png")]
        passed = run_spec(args, timeout=200)
        log(f"load requests by status: {counts}")
        if not passed:
            log("gateway stderr tail:\n" + "".join(gw.err[-20:]))
        return passed
    finally:
        stop.set()
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=None)
    ap.add_argument("--require-real", action="store_true", help="fail when sluice does not serve /dashboard")
    ap.add_argument("--screenshots", default=None, help="directory for before/stale screenshots")
    ap.add_argument("--only", choices=["stub", "real"], default=None)
    ap.add_argument("--real-fault", choices=["freeze", "fail", "slow"], default="freeze",
                    help="the sim metrics fault applied to replica 1 (POST /admin/faults {\"metrics\": ...})")
    a = ap.parse_args()
    ensure_browser_tooling()
    if a.screenshots:
        os.makedirs(a.screenshots, exist_ok=True)
    passed = failed = skipped = 0
    if a.only in (None, "stub"):
        log("== dashboard against the /metrics stub")
        if stub_run(a.screenshots):
            passed += 1
        else:
            failed += 1
    if a.only in (None, "real"):
        log("== dashboard against sluice sim + sluice serve")
        if not a.sluice or not os.path.exists(a.sluice):
            if a.require_real:
                log(f"FAILED: no sluice binary at {a.sluice}")
                failed += 1
            else:
                log(f"SKIP real run: no sluice binary ({a.sluice})")
                skipped += 1
        else:
            r = real_run(a.sluice, a.screenshots, a.require_real, a.real_fault)
            if r is None:
                skipped += 1
            elif r:
                passed += 1
            else:
                failed += 1
    log(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
