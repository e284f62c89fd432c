#!/usr/bin/python3
"""Shared token budgets across gateway replicas, live over loopback (issue 16's acceptance run).

One redis-server (unix socket in a temp dir), one `sluice sim` with 2 replicas, 3 `sluice serve`
replicas behind real HAProxy (balance roundrobin). Tenant "heavy" has a budget of B output
tokens/min and is offered about 3x that by 3 clients through HAProxy; tenant "light" sends a little
and must never be refused. Accepted tokens are counted from the engines' usage in the responses.
The same run with local buckets (no `redis:`) follows, side by side. Then the admission-latency and
memory-per-bucket microbenchmark (sluice_redis_bench: 1,000 tenants x 3 dimensions, 16 threads).

  bench/redis_budgets.py [--seconds 120] [--budget 6000] [--sluice build-release/sluice]
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

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from sluice_fleet import free_port, start_gateway, start_sim  # noqa: E402
from test_redis_budgets import Redis, chat, sha  # noqa: E402


def tenants(budget):
    return f"""tenants:
  - name: heavy
    key_sha256: [{sha("key-heavy")}]
    limits: {{output_tokens_per_min: {budget}}}
  - name: light
    key_sha256: [{sha("key-light")}]
    limits: {{output_tokens_per_min: 1000000}}
"""


def haproxy(ports, tmp):
    port = free_port()
    cfg = os.path.join(tmp, "haproxy.cfg")
    servers = "".join(f"    server s{i} 127.0.0.1:{p}\n" for i, p in enumerate(ports))
    with open(cfg, "w") as f:
        f.write("global\n    maxconn 4000\ndefaults\n    mode http\n    timeout connect 5s\n"
                "    timeout client 10m\n    timeout server 10m\n"
                f"frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n"
                f"backend be\n    balance roundrobin\n{servers}")
    proc = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc, port


def run(port, seconds, clients=3, threads=4):
    stop = threading.Event()
    lock = threading.Lock()
    out = {"heavy": 0, "heavy_status": {}, "light_status": {}}

    def heavy():
        while not stop.is_set():
            try:
                st, _, tok, _ = chat(port, "key-heavy")
            except OSError as e:
                st, tok = type(e).__name__, 0
            with lock:
                out["heavy"] += tok
                out["heavy_status"][st] = out["heavy_status"].get(st, 0) + 1
            if st != 200:
                time.sleep(0.02)

    def light():
        while not stop.is_set():
            try:
                st = chat(port, "key-light")[0]
            except OSError as e:
                st = type(e).__name__
            with lock:
                out["light_status"][st] = out["light_status"].get(st, 0) + 1
            time.sleep(0.2)

    ts = [threading.Thread(target=heavy, daemon=True) for _ in range(clients * threads)]
    ts.append(threading.Thread(target=light, daemon=True))
    t0 = time.time()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join(timeout=60)
    out["elapsed"] = time.time() - t0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build-release", "sluice"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build-release", "sluice_redis_bench"))
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--budget", type=int, default=6000)
    a = ap.parse_args()
    print(f"# command: bench/redis_budgets.py --seconds {a.seconds:g} --budget {a.budget}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        redis = Redis()
        sim, sim_ports = start_sim(a.sluice, 2, "--time-scale", "20", "--frontend-overhead-ms", "1")
        try:
            for mode in ("shared (redis)", "local buckets"):
                extra = tenants(a.budget)
                if mode.startswith("shared"):
                    extra += f"redis: {{url: unix://{redis.sock}, on_error: open}}\n"
                gws = [start_gateway(a.sluice, sim_ports, tmp, extra_yaml=extra) for _ in range(3)]
                hp, port = haproxy([p for _, p, _ in gws], tmp)
                try:
                    r = run(port, a.seconds)
                finally:
                    hp.terminate()
                    hp.wait(timeout=10)
                    for gw, _, _ in gws:
                        gw.stop()
                allowance = a.budget + a.budget * r["elapsed"] / 60.0
                rows.append((mode, r, allowance))
                print(f"{mode:15s} heavy accepted {r['heavy']:7d} tokens in {r['elapsed']:.1f} s = "
                      f"{r['heavy'] / allowance:.3f}x the GCRA allowance ({allowance:.0f} = B + B x t/60) "
                      f"= {r['heavy'] / (a.budget * r['elapsed'] / 60.0):.3f}x B per minute; heavy statuses "
                      f"{r['heavy_status']}; light statuses {r['light_status']}", flush=True)
            print(f"held units in Redis after the run: {redis.held_total()}")
        finally:
            sim.stop()
        if os.path.exists(a.bench):
            for share in ("0.25", "0"):
                cmd = [a.bench, "--redis", f"unix://{redis.sock}", "--threads", "16", "--tenants", "1000",
                       "--seconds", "5", "--share", share]
                print("# command: " + " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd))
                res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                print(res.stdout, end="", flush=True)
        redis.stop()


if __name__ == "__main__":
    main()
