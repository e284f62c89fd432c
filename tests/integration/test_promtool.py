#!/usr/bin/env python3
"""deploy/prometheus/ passes promtool: the scrape config and alert rules are valid, the alert rules'
unit tests (deploy/prometheus/tests/) fire exactly the alerts they claim, and every sluice_* series
the rules use is in the metrics contract (docs/metrics.md).

With --sluice, also runs `promtool check metrics` on the real gateway's /metrics (sluice sim + serve
under a short chat load).

Run: python3 tests/integration/test_promtool.py [--sluice path]
promtool comes from Debian's `prometheus` package (scripts/install-deps.sh); without it the test
skips with a message and exit code 0.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROM_DIR = os.path.join(ROOT, "deploy", "prometheus")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_contract  # noqa: E402
import sluice_fleet  # noqa: E402


def run(args):
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


def check_real_metrics(promtool, sluice):
    procs = []
    stop = threading.Event()
    tmp = tempfile.mkdtemp(prefix="sluice-promtool-")
    try:
        sim, ports = sluice_fleet.start_sim(sluice, replicas=2)
        procs.append(sim)
        try:
            gw, listen, admin = sluice_fleet.start_gateway(sluice, ports, tmp)
        except RuntimeError as e:
            print(f"note: real /metrics not checked: {e}")
            return []
        procs.append(gw)
        counts = {}
        workers = [threading.Thread(target=sluice_fleet.load_loop, args=(listen, stop, sluice_fleet.MODEL, counts),
                                    daemon=True) for _ in range(2)]
        for w in workers:
            w.start()
        time.sleep(3)
        stop.set()
        for w in workers:
            w.join(timeout=35)
        status, body = sluice_fleet.http_req(admin, "GET", "/metrics")
        text = body.decode()
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        families = sorted({line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")})
        print(f"promtool check metrics on sluice's /metrics ({len(families)} families, load {counts}): "
              f"{'ok' if p.returncode == 0 else 'FAILED'}")
        out = []
        if status != 200 or not any(f.startswith("sluice_") for f in families):
            out.append(f"/metrics answered {status} without sluice_ families")
        if p.returncode != 0:
            out.append("promtool check metrics on the gateway's output:\n" + p.stdout + p.stderr)
        # The load shares one system prompt: the sluice policy reports it as the pool's most asked-for
        # prefix, with the replicas its index holds it on.
        def sample(name):
            m = re.search(r'^' + name + r'\{pool="chat",rank="1"\} (\S+)$', text, re.M)
            return float(m.group(1)) if m else None
        rps, holders = sample("sluice_hot_prefix_requests_per_second"), sample("sluice_hot_prefix_holders")
        print(f"hot prefix rank 1: {rps} requests/s on {holders} holders")
        if rps is None or rps <= 0 or holders is None or not 1 <= holders <= 2:
            out.append(f"sluice_hot_prefix_* rank 1 after a shared-prompt load: {rps} requests/s, {holders} holders")
        # Each replica's learned speed, the sluice policy's (1 for replicas as fast as the fastest;
        # the calibration never under 1).
        for name in ("sluice_endpoint_pace_ratio", "sluice_endpoint_itl_calibration_ratio"):
            values = [float(v) for v in re.findall(r'^' + name + r'\{pool="chat",endpoint="[^"]+"\} (\S+)$', text, re.M)]
            print(f"{name}: {values}")
            if len(values) != 2 or not all(1.0 <= v <= 4.0 for v in values):
                out.append(f"{name} per replica after the load: {values} (two values in [1, 4] expected)")
        return out
    finally:
        stop.set()
        for pr in reversed(procs):
            pr.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=None)
    opts = ap.parse_args()
    promtool = shutil.which("promtool")
    if not promtool:
        print("SKIP: promtool not found (install Debian's `prometheus` package: scripts/install-deps.sh)")
        return 0

    failures = []
    checks = [
        ("check config", [promtool, "check", "config", os.path.join(PROM_DIR, "prometheus.yml")]),
        ("check rules", [promtool, "check", "rules", os.path.join(PROM_DIR, "sluice-alerts.yml")]),
        ("test rules", [promtool, "test", "rules", os.path.join(PROM_DIR, "tests", "sluice-alerts-test.yml")]),
    ]
    for name, args in checks:
        rc, out = run(args)
        print(f"promtool {name}: {'ok' if rc == 0 else 'FAILED'}")
        if rc != 0:
            failures.append(f"promtool {name} exited {rc}:\n{out}")

    # Every sluice_* name the rules mention must be a contract series (or one of its histogram parts).
    known = metrics_contract.exposed_names()
    rules = open(os.path.join(PROM_DIR, "sluice-alerts.yml")).read()
    used = set(re.findall(r"(?<![:\w])sluice_[a-z0-9_]+(?![:\w])", rules))
    unknown = sorted(n for n in used if n not in known)
    print(f"sluice_* names used by the rules: {len(used)}, not in docs/metrics.md: {unknown}")
    if unknown:
        failures.append(f"alert rules use series not in docs/metrics.md: {unknown}")
    if len(used) < 8:
        failures.append(f"expected the rules to use at least 8 sluice series, found {sorted(used)}")

    # Each required alert family is present.
    for alert in ["SluiceEngineMetricsStale", "SluiceEngineMetricsFrozen", "SluiceRejectRateHigh", "SluiceRejectsRising",
                  "SluiceQueueTimeP99High", "SluiceKVCachePressure", "SluiceEngineScrapeErrors",
                  "SluicePrometheusTargetDown", "SluiceQueueingWhileEnginesIdle", "SluiceUpstreamErrorRateHigh",
                  "SluiceTTFTSLOBreached", "SluiceConfigReloadFailed", "SluiceClientRetryStorm",
                  "SluiceEnginesSlowToTakeRequests"]:
        if f"alert: {alert}\n" not in rules:
            failures.append(f"alert {alert} missing from sluice-alerts.yml")

    # `promtool check metrics` on the real gateway's /metrics, after some load through a simulated fleet.
    if opts.sluice and os.path.exists(opts.sluice):
        failures += check_real_metrics(promtool, opts.sluice)
    else:
        print(f"note: no sluice binary ({opts.sluice}): real /metrics not checked")

    # Every runbook link in the rules points at a heading of docs/operations.md.
    ops = open(os.path.join(ROOT, "docs", "operations.md"), encoding="utf-8").read()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", ops, re.M)}
    for a in sorted(set(re.findall(r"docs/operations\.md#([a-z0-9-]+)", rules))):
        if a not in anchors:
            failures.append(f"alert rules link docs/operations.md#{a}, which has no such heading")
    # Every alert has a runbook_url: its own section (the alert's name as the heading).
    alerts = re.split(r"(?=^      - alert: )", rules, flags=re.M)[1:]
    for block in alerts:
        name = re.match(r"      - alert: (\S+)", block).group(1)
        url = re.search(r'^          runbook_url: "([^"]*)"', block, re.M)
        if not url:
            failures.append(f"alert {name} has no runbook_url annotation")
        elif url.group(1) != f"docs/operations.md#{name.lower()}":
            failures.append(f"alert {name}: runbook_url {url.group(1)} is not docs/operations.md#{name.lower()}")
        elif name.lower() not in anchors:
            failures.append(f"alert {name}: docs/operations.md has no section '### {name}'")
    print(f"alerts with a runbook section in docs/operations.md: {len(alerts)}")
    if len(alerts) < 12:
        failures.append(f"expected at least 12 alerts, found {len(alerts)}")

    if failures:
        print("\n".join(failures))
        print("0 passed, 1 failed")
        return 1
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
