#!/usr/bin/env python3
"""Quick mode of the benchmarks, as a smoke test: figures are produced and sane, never timings.

  1. `sluice fleetsim` compares three policies on a small shared-prefix workload (virtual time).
  2. `sluice sim` (2 replicas, time scale 10) + `sluice bench` straight at replica 0, with the
     replicas' /metrics for the engine-reported prefix hit rate.
  3. `sluice bench` at a closed port: every request is recorded as a failure, the run still reports.
  4. Bad arguments are refused with a message.
  5. `sluice bench` without --model at a gateway with tenants: /v1/models is read with --api-key and
     the key's first allowed model is sent; without a key it says the gateway wants one.
  6. bench/suite/margins.py sums acceptance.py's per-rate verdicts over a fleetsim sweep.
  7. bench/suite/p90_noise.py's percentile is fleetsim's (it restates it in Python).
  8. bench/suite/replace_rows.py replaces one policy's rows with a rerun's, and refuses a rerun that
     lacks a rate the file had (a file made by two commands would lose the other's rows).
  9. bench/suite/with_oracle.py's ratios are those of the same fleetsim sweep's figures.
 10. bench/suite/slow_causes.py sorts slow requests by cause (a hand-made trace with one of each),
     and its causes account for every slow request of a fleetsim trace.
 11. fleetsim's --long-prefill-token-threshold reaches the engines (long prompts take more, smaller
     steps), and a negative one is refused with a message.

Run: python3 tests/integration/test_bench.py --sluice build/sluice
"""
import argparse
import http.client
import json
import socket
import subprocess
import sys
import threading
import time


def log(msg):
    print(msg, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def sane_figures(f, requests, what):
    check(f["requests"] == requests, f"{what}: {f['requests']} requests, expected {requests}")
    check(f["ok"] == requests, f"{what}: only {f['ok']} of {requests} ok: {f['by_status']}")
    for key in ("ttft_s", "e2e_s", "itl_s"):
        d = f[key]
        check(d["n"] > 0, f"{what}: no {key} samples")
        check(0 < d["p50"] <= d["p90"] <= d["p99"] <= d["max"] + 1e-9, f"{what}: {key} not ordered: {d}")
    check(f["ttft_s"]["p50"] <= f["e2e_s"]["p50"], f"{what}: TTFT above E2E")
    check(f["output_tokens_per_s"] > 0 and f["requests_per_s"] > 0, f"{what}: no throughput")
    check(0 <= f["slo_attainment"] <= 1, f"{what}: SLO attainment out of range")


def run_json(args, timeout=120):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    check(p.returncode == 0, f"{' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def test_fleetsim(sluice):
    runs = run_json([sluice, "fleetsim", "--policy", "round_robin,sluice,oracle", "--replicas", "4",
                     "--workload", "shared_prefix:small", "--rates", "20", "--requests", "200", "--json"])
    check([r["policy"] for r in runs] == ["round_robin", "sluice", "oracle"], f"policies: {runs}")
    for r in runs:
        sane_figures(r["figures"], 200, "fleetsim " + r["policy"])
        hit = r["fleet"]["prefix_hit_rate"]
        check(0 < hit <= 1, f"fleetsim {r['policy']}: hit rate {hit}")
        check(r["fleet"]["picks_min"] <= r["fleet"]["picks_max"], "picks")
    again = run_json([sluice, "fleetsim", "--policy", "sluice", "--replicas", "4", "--workload",
                      "shared_prefix:small", "--rates", "20", "--requests", "200", "--json"])
    check(again[0]["figures"] == runs[1]["figures"], "fleetsim is not deterministic for a seed")
    log("ok: fleetsim policies, figures sane and deterministic")


def test_margins(sluice):
    import os
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(root, "bench", "suite"))
    import acceptance
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "sweep.json")
        subprocess.run([sluice, "fleetsim", "--policy", "round_robin,cache_aware,sluice", "--replicas", "4",
                        "--workload", "shared_prefix:small", "--rates", "20,60,200", "--requests", "200", "--json-out", out],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
        res = acceptance.check(out)
        checked = [row for row in res["rows"] if row[1]]
        printed = subprocess.run([sys.executable, os.path.join(root, "bench", "suite", "margins.py"), out],
                                 check=True, capture_output=True, text=True, timeout=60).stdout
        row = [c.strip() for c in printed.strip().splitlines()[-1].strip("|").split("|")]
        check(row[0] == out and row[1] == "1", f"margins row: {row}")
        check(int(row[2]) == len(checked) and len(checked) >= 1, f"checked {row[2]} vs acceptance {len(checked)}")
        check(int(row[3]) == sum(1 for r in checked if not r[10]), f"fails {row[3]} vs acceptance {res['fails']}")
        gp = [r[5] for r in checked]
        want = 1.0
        for g in gp:
            want *= g
        want **= 1.0 / len(gp)
        check(abs(float(row[4]) - want) < 1e-3, f"goodput gmean {row[4]} vs {want}")
        # A pattern that matches nothing is an error, not an empty row.
        bad = subprocess.run([sys.executable, os.path.join(root, "bench", "suite", "margins.py"), os.path.join(d, "none-*.json")],
                             capture_output=True, text=True, timeout=60)
        check(bad.returncode != 0 and "no file matches" in bad.stderr, f"margins on no files: {bad.returncode} {bad.stderr}")
    log("ok: margins.py sums acceptance.py's verdicts")


def test_replace_rows(sluice):
    import os
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = os.path.join(root, "bench", "suite", "replace_rows.py")
    base_args = ["--replicas", "4", "--workload", "shared_prefix:small", "--requests", "100", "--json"]

    def rows(path):
        return [json.loads(line) for line in open(path) if line.strip()]

    with tempfile.TemporaryDirectory() as d:
        base, rerun, out = (os.path.join(d, n) for n in ("base.json", "rerun.json", "out.json"))
        with open(base, "w") as f:
            subprocess.run([sluice, "fleetsim", "--policy", "round_robin,sluice", "--rates", "20,60"] + base_args,
                           check=True, stdout=f, timeout=120)
        # A rerun of sluice at one of the two rates: refused, nothing written.
        with open(rerun, "w") as f:
            subprocess.run([sluice, "fleetsim", "--policy", "sluice", "--rates", "20", "--seed", "2"] + base_args,
                           check=True, stdout=f, timeout=120)
        p = subprocess.run([sys.executable, script, base, rerun, out, "sluice"], capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and "[60]" in p.stderr and not os.path.exists(out), f"partial rerun: {p.returncode} {p.stderr}")
        # At both rates (another seed, so the rows differ): sluice's rows are the rerun's, round_robin's kept.
        with open(rerun, "w") as f:
            subprocess.run([sluice, "fleetsim", "--policy", "sluice", "--rates", "20,60", "--seed", "2"] + base_args,
                           check=True, stdout=f, timeout=120)
        subprocess.run([sys.executable, script, base, rerun, out, "sluice"], check=True, timeout=60)
        got = rows(out)
        check([r["policy"] for r in got] == ["round_robin", "round_robin", "sluice", "sluice"], f"rows: {[r['policy'] for r in got]}")
        check(got[:2] == [r for r in rows(base) if r["policy"] == "round_robin"], "round_robin's rows changed")
        check(got[2:] == rows(rerun) and all(r["seed"] == 2 for r in got[2:]), "sluice's rows are not the rerun's")
    log("ok: replace_rows.py replaces a policy's rows, refuses a rerun missing a rate")


def test_with_oracle(sluice):
    import os
    import re
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ["--replicas", "4", "--workload", "shared_prefix:small", "--rates", "20,60", "--requests", "200"]
    printed = subprocess.run([sys.executable, os.path.join(root, "bench", "suite", "with_oracle.py"), sluice, *args],
                             check=True, capture_output=True, text=True, timeout=120).stdout.splitlines()
    runs = run_json([sluice, "fleetsim", *args, "--policy",
                     "round_robin,random,least_request,power_of_two,cache_aware,llmd_default,sluice,oracle", "--json"])
    check(len(printed) == 2, f"with_oracle.py printed {printed}")
    for line, rate in zip(printed, (20, 60)):
        f = {r["policy"]: r["figures"] for r in runs if r["offered_rate"] == rate}
        others = [k for k in f if k not in ("sluice", "oracle")]
        best = min(f[k]["ttft_s"]["p90"] for k in others)
        bg = max(f[k]["goodput_rps"] for k in others)
        m = re.search(r"TTFT p90 sluice ([0-9.]+)x oracle ([0-9.]+)x .*goodput sluice ([0-9.]+)x oracle ([0-9.]+)x", line)
        check(line.startswith(f"@{rate} req/s") and m, f"with_oracle.py line: {line}")
        want = (f["sluice"]["ttft_s"]["p90"] / best, f["oracle"]["ttft_s"]["p90"] / best,
                f["sluice"]["goodput_rps"] / bg, f["oracle"]["goodput_rps"] / bg)
        for got, w in zip(m.groups(), want):
            check(abs(float(got) - w) < 1e-3, f"with_oracle.py {line}: {got} vs {w:.4f}")
    log("ok: with_oracle.py's ratios are the sweep's")


def test_p90_noise_percentile(sluice):
    """bench/suite/p90_noise.py restates fleetsim's percentile rule (src/model/workload/stats.cpp) in
    Python so that its full-run ratios are the committed ones: the two must agree, on TTFTs that vary."""
    import os
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(root, "bench", "suite"))
    import p90_noise
    with tempfile.TemporaryDirectory() as d:
        trace = os.path.join(d, "trace.jsonl")
        runs = run_json([sluice, "fleetsim", "--policy", "round_robin,least_request", "--replicas", "2",
                         "--workload", "shared_prefix:small", "--rates", "60", "--requests", "203", "--json",
                         "--trace", trace])
        ttft = {}
        for line in open(trace):
            r = json.loads(line)
            if r.get("status") == 200:
                ttft.setdefault(r["policy"], []).append(r["ttft_ms"])
    for r in runs:
        xs = sorted(ttft[r["policy"]])
        check(len(set(xs)) > 20, f"{r['policy']}: TTFTs too alike to tell percentile rules apart")
        want = r["figures"]["ttft_s"]["p90"] * 1000
        got = p90_noise.p90(xs)
        # The trace's TTFTs are rounded to 1 us.
        check(abs(got - want) < 0.002, f"{r['policy']}: p90_noise.p90 {got:.4f} ms, fleetsim {want:.4f} ms")
    log("ok: p90_noise.py's percentile is fleetsim's")


def test_slow_causes(sluice):
    """bench/suite/slow_causes.py's classify(): one request of each cause in a hand-made trace (two
    replicas, groups a and b), then on a real fleetsim trace the causes add up to the slow requests."""
    import os
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, os.path.join(root, "bench", "suite"))
    import slow_causes

    def req(i, group, at, endpoint, cached, ttft, tokens=1000):
        return {"id": i, "group": group, "arrival_ms": at, "queue_ms": 0.0, "endpoint": endpoint,
                "input_tokens": tokens, "engine_cached_tokens": cached, "ttft_ms": ttft}
    trace = [
        req(1, "a", 0, 0, 0, 300),       # first of a: cold everywhere
        req(2, "a", 400, 0, 900, 20),    # warm, fast
        req(3, "b", 500, 0, 0, 300),     # first of b, on replica 0: a cold prefill until 800
        req(4, "a", 600, 0, 900, 220),   # warm but behind b's cold prefill: blocked (by a first)
        req(5, "a", 900, 1, 0, 310),     # a again, cold on replica 1: cold again
        req(6, "a", 1300, 0, 900, 150),  # warm, nothing cold in front: warm (a queue)
        req(7, "b", 1400, 0, 900, 30),   # warm, fast
    ]
    causes, by_first, on_busy = slow_causes.classify(trace, 100)
    want = {"first": 2, "blocked": 1, "warm": 1, "cold again": 1}
    check(dict(causes) == want, f"slow_causes.classify: {dict(causes)}, expected {want}")
    check(by_first == 1, f"blocked by a first: {by_first}")
    check(on_busy == 1.0, f"first-of-group prefills on the busier half: {on_busy}")  # replica 0 served 6 of 7
    causes, _, _ = slow_causes.classify(trace, 250)
    check(dict(causes) == {"first": 2, "cold again": 1}, f"over 250 ms: {dict(causes)}")
    # Times on the replica run from dispatch (arrival + gateway queue) to the first token (counted from
    # arrival): b's first request queued 200 ms at the gateway is on replica 0 from 700 to 800, so a
    # warm request dispatched at 650 is not behind it, one dispatched at 750 is.
    queued = [dict(r, queue_ms=200.0) if r["id"] == 3 else r for r in trace]
    queued[3] = dict(queued[3], arrival_ms=650.0)
    causes, _, _ = slow_causes.classify(queued, 100)
    check(causes["blocked"] == 0 and causes["warm"] == 2, f"dispatched before the queued prefill: {dict(causes)}")
    queued[3] = dict(queued[3], arrival_ms=650.0, queue_ms=100.0)
    causes, _, _ = slow_causes.classify(queued, 100)
    check(causes["blocked"] == 1, f"dispatched during the queued prefill: {dict(causes)}")

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.jsonl")
        run_json([sluice, "fleetsim", "--policy", "cache_aware", "--replicas", "4", "--workload", "tool_agent",
                  "--rates", "20", "--requests", "400", "--json", "--trace", path])
        rs = [json.loads(line) for line in open(path)]
        rs = [r for r in rs if r.get("status") == 200]
    threshold = 50.0
    causes, by_first, _ = slow_causes.classify(rs, threshold)
    slow = sum(r["ttft_ms"] > threshold for r in rs)
    check(slow > 0 and sum(causes.values()) == slow, f"causes {dict(causes)} against {slow} slow requests")
    groups = len({r["group"] for r in rs})
    check(0 < causes["first"] <= groups, f"slow first requests {causes['first']} of {groups} groups: {dict(causes)}")
    check(by_first <= causes["blocked"], f"blocked by a first {by_first} > blocked {causes['blocked']}")
    log("ok: slow_causes.py sorts the slow requests by cause")


def test_long_prefill_cap(sluice):
    def run(cap):
        return run_json([sluice, "fleetsim", "--policy", "round_robin", "--replicas", "2", "--workload", "tool_agent",
                         "--rates", "4", "--requests", "120", "--json", "--long-prefill-token-threshold", str(cap)])[0]
    off, on = run(0), run(1024)
    # 8k-16k-token prompts: at least 8 steps each with the cap, 1-2 without (decode steps are shared).
    check(on["fleet"]["steps"] > off["fleet"]["steps"] * 1.1,
          f"steps with a 1,024-token cap {on['fleet']['steps']} against {off['fleet']['steps']} without")
    check(on["figures"]["ok"] == off["figures"]["ok"] == 120, f"requests served: {on['figures']['ok']}, {off['figures']['ok']}")
    p = subprocess.run([sluice, "fleetsim", "--requests", "10", "--long-prefill-token-threshold", "-5"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and "long_prefill_token_threshold must be >= 0" in p.stdout + p.stderr,
          f"a negative cap: {p.returncode} {p.stdout[-300:]} {p.stderr[-300:]}")
    log("ok: fleetsim's long-prefill cap reaches the engines")


class Sim:
    def __init__(self, sluice, replicas):
        self.proc = subprocess.Popen([sluice, "sim", "--replicas", str(replicas), "--base-port", "0",
                                      "--time-scale", "10", "--seed", "3"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.ports = []
        self.lines = []
        found = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.lines.append(line)
                if "listening on" in line:
                    self.ports.append(int(line.rsplit(":", 1)[1]))
                    if len(self.ports) == replicas:
                        found.set()
        threading.Thread(target=read, daemon=True).start()
        if not found.wait(20):
            self.stop()
            raise AssertionError("sluice sim did not report its ports: " + "".join(self.lines[-10:]))

    def model(self):
        c = http.client.HTTPConnection("127.0.0.1", self.ports[0], timeout=5)
        c.request("GET", "/v1/models")
        body = json.loads(c.getresponse().read())
        c.close()
        return body["data"][0]["id"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def test_live(sluice):
    sim = Sim(sluice, 2)
    try:
        model = sim.model()
        metrics = ",".join(f"http://127.0.0.1:{p}/metrics" for p in sim.ports)
        runs = run_json([sluice, "bench", "--url", f"http://127.0.0.1:{sim.ports[0]}", "--model", model,
                         "--workload", "shared_prefix:small", "--rates", "10", "--requests", "40",
                         "--time-scale", "10", "--metrics-url", metrics, "--timeout", "60", "--json"])
        check(len(runs) == 1, f"one rate, one run: {runs}")
        f = runs[0]["figures"]
        sane_figures(f, 40, "bench")
        hit = f["prefix_hit_rate"]
        check(hit is not None and 0 < hit <= 1, f"bench: engine hit rate {hit}")
        # 40 requests over 10 groups x 10 prompts: prompts repeat their group's 100-token system prompt.
        closed = run_json([sluice, "bench", "--url", f"http://127.0.0.1:{sim.ports[1]}", "--model", model,
                           "--workload", "multi_turn,users=4,rounds=3,system=50,question=20,answer=10",
                           "--arrival", "concurrency", "--concurrency", "3", "--requests", "12",
                           "--time-scale", "10", "--json"])
        sane_figures(closed[0]["figures"], 12, "bench closed loop")
        log(f"ok: bench against sluice sim: ttft p50 {f['ttft_s']['p50'] * 1000:.0f} ms, hit rate {hit:.2f}")
    finally:
        sim.stop()


def test_failures(sluice):
    port = free_port()
    runs = run_json([sluice, "bench", "--url", f"http://127.0.0.1:{port}", "--rates", "50", "--requests", "5",
                     "--timeout", "5", "--json"])
    f = runs[0]["figures"]
    check(f["requests"] == 5 and f["ok"] == 0 and f["by_status"].get("0") == 5, f"closed port: {f}")
    check(f["reject_rate"] == 1, "closed port: reject rate")
    for args, want in ((["bench", "--url", "ftp://x"], "http://"),
                       (["bench", "--url", "http://127.0.0.1:1", "--workload", "nope"], "unknown name"),
                       (["fleetsim", "--workload", "shared_prefix,groups=-1"], "outside"),
                       (["fleetsim", "--policy", "nope", "--requests", "5"], "unknown policy")):
        p = subprocess.run([sluice] + args, capture_output=True, text=True, timeout=30)
        check(p.returncode != 0 and want in p.stderr, f"{args}: rc {p.returncode}, stderr {p.stderr!r}")
    log("ok: failures recorded, bad arguments refused")


def test_tenant_gateway(sluice):
    import hashlib
    import os
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gateway_harness import FakeUpstream, Gateway
    up = FakeUpstream()
    key_hash = hashlib.sha256(b"bench-key").hexdigest()
    gw = None
    try:
        gw = Gateway(sluice, f"""listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: 1
pools:
  - {{name: p, endpoints: [127.0.0.1:{up.port}]}}
models:
  - {{name: m-a, pool: p}}
  - {{name: m-b, pool: p}}
tenants:
  - {{name: t, key_sha256: {key_hash}, allowed_models: [m-b]}}
""")
        url = f"http://127.0.0.1:{gw.port}"
        p = subprocess.run([sluice, "bench", "--url", url, "--api-key", "bench-key", "--rates", "20", "--requests", "3",
                            "--json"], capture_output=True, text=True, timeout=60)
        check(p.returncode == 0 and "sending `m-b`" in p.stderr, f"with a key: rc {p.returncode}, {p.stderr[-1000:]!r}")
        f = json.loads(p.stdout.splitlines()[0])["figures"]
        check(f["ok"] == 3, f"with a key: {f['by_status']}")
        p = subprocess.run([sluice, "bench", "--url", url, "--rates", "20", "--requests", "1", "--json"],
                           capture_output=True, text=True, timeout=60)
        check("status 401" in p.stderr and "--api-key" in p.stderr, f"without a key: {p.stderr[-1000:]!r}")
    finally:
        if gw:
            gw.stop()
        up.stop()
    log("ok: bench reads the key's models from a gateway with tenants")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    a = ap.parse_args()
    t0 = time.time()
    test_fleetsim(a.sluice)
    test_margins(a.sluice)
    test_replace_rows(a.sluice)
    test_with_oracle(a.sluice)
    test_p90_noise_percentile(a.sluice)
    test_slow_causes(a.sluice)
    test_long_prefill_cap(a.sluice)
    test_live(a.sluice)
    test_failures(a.sluice)
    test_tenant_gateway(a.sluice)
    log(f"PASSED in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
