#!/usr/bin/python3
"""Active-active routing over loopback (issue 15): G `sluice serve` replicas behind real HAProxy
(round robin) in front of 4 `sluice sim` replicas that publish KV events, on a shared-prefix
workload. For each row the engines' caches are reset (POST /reset_prefix_cache), the same request
sequence is sent, and the engine-reported prefix hit rate (vllm:prefix_cache_hits / queries, the
delta over the run, summed over the replicas) is printed with the client-side latency:

  gateways  index     engine hit  vs 1 gateway  e2e p50  e2e p90  predicted/engine cached
  1         learned   ...
  3         learned   ...          (each gateway sees 1/3 of the traffic: its index guesses)
  3         events    ...          (every gateway subscribes to every engine)

`predicted/engine cached` = the gateways' sluice_prefix_predicted_cached_tokens_total over the
engines' prefix-cache hits in the same run (1.0 = the picker predicted exactly what the engines
then reported). `--kv-blocks` small makes the engines evict (the KV-pressure check).

`--failover` instead runs the fault checks, on G gateways with events behind HAProxy (health checks on
each gateway's /readyz, retries with redispatch) in front of 4 single-replica `sluice sim` processes
(so that one engine can restart): at a third of the requests one engine is killed (SIGKILL) and
restarted on its ports, and the time until every gateway's index has dropped its blocks
(sluice_kv_index_blocks == 0, from the kill) and until every gateway has reconnected (from the
restart) is printed; at two thirds one gateway is killed (SIGKILL): the client's failures after it
and the surviving gateways' requests that did not end ok are printed (goal: none).

Run: /usr/bin/python3 bench/kv_replicas.py [--sluice build-release/sluice] [--gateways 3]
     [--prefixes 48] [--requests 600] [--concurrency 12] [--kv-blocks 0] [--failover] [--out FILE]
Standard library only (plus HAProxy from Debian). Loopback, ephemeral ports, bounded in time."""
import argparse
import http.client
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_req(port, method, path, body=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers={"content-type": "application/json"} if body else {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def wait_http(port, path, proc, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited")
        try:
            if http_req(port, "GET", path, timeout=2)[0] in (200, 404):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not answer")


def metric_sum(text, name):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def start_sim(a, tmp):
    cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*",
           "replay_endpoint": "tcp://127.0.0.1:*", "topic": "kv@sim@" + MODEL}
    cmd = [a.sluice, "sim", "--replicas", "4", "--base-port", "0", "--seed", "3", "--output-len", "8",
           "--time-scale", str(a.time_scale), "--kv-events-config", json.dumps(cfg)]
    if a.kv_blocks:
        cmd += ["--kv-blocks", str(a.kv_blocks)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ports, kv = [], []
    while len(kv) < 4:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError("sim did not start")
        if "listening on" in line:
            ports.append(int(line.rsplit(":", 1)[1]))
        elif "kv events on" in line:
            parts = line.split()
            kv.append((parts[5], parts[7]))
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    return p, ports, kv


def start_single_sims(a, n=4):
    """n `sluice sim --replicas 1` processes on fixed ports picked free (one can restart on them); the
    events bind IPv6 loopback (vLLM's rule: a fixed address binds only with a wildcard or "::")."""
    sims = []
    for i in range(n):
        port, ev, rp = free_port(), free_port(), free_port()
        cfg = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": f"tcp://[::1]:{ev}",
               "replay_endpoint": f"tcp://[::1]:{rp}", "topic": "kv@sim@" + MODEL}
        cmd = [a.sluice, "sim", "--replicas", "1", "--base-port", str(port), "--seed", str(3 + i),
               "--output-len", "8", "--time-scale", str(a.time_scale), "--kv-events-config", json.dumps(cfg)]
        if a.kv_blocks:
            cmd += ["--kv-blocks", str(a.kv_blocks)]
        sims.append({"cmd": cmd, "port": port, "kv": (f"tcp://[::1]:{ev}", f"tcp://[::1]:{rp}"), "proc": None})
    for s in sims:
        launch_sim(s)
    return sims


def launch_sim(s):
    s["proc"] = subprocess.Popen(s["cmd"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(s["port"], "/metrics", s["proc"], "sluice sim")


def gateway_metric(admin, name, **labels):
    """Sum of the samples of `name` whose labels include `labels` (None when there are none)."""
    text = http_req(admin, "GET", "/metrics", timeout=5)[1].decode()
    total, seen = 0.0, False
    want = [f'{k}="{v}"' for k, v in labels.items()]
    for line in text.splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and all(w in line for w in want):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None


def not_ok_by_label(admin):
    """{labels: count} of sluice_requests_total samples whose outcome is not ok."""
    out = {}
    for line in http_req(admin, "GET", "/metrics", timeout=5)[1].decode().splitlines():
        if line.startswith("sluice_requests_total{") and 'outcome="ok"' not in line:
            labels, v = line.rsplit(" ", 1)
            out[labels] = out.get(labels, 0.0) + float(v)
    return out


def failover(a, tmp, say):
    sims = start_single_sims(a)
    procs = []
    try:
        ports = [s["port"] for s in sims]
        gws = [start_gateway(a, tmp, ports, [s["kv"] for s in sims], True) for _ in range(a.gateways)]
        procs += [g[0] for g in gws]
        hp, front = start_haproxy(tmp, [g[1] for g in gws], [g[2] for g in gws])
        procs.append(hp)
        time.sleep(1.0)  # subscriptions, replays, first scrapes and health checks
        bodies = workload(a)
        say(f"# {' '.join(sys.argv)}")
        say(f"# {a.gateways} gateways with events behind HAProxy (health checks, retries, redispatch), 4 single-replica "
            f"sims (time scale {a.time_scale}, kv blocks {a.kv_blocks or 'profile'}), {a.requests} requests, "
            f"concurrency {a.concurrency}")
        state = {"done": 0, "errors": [], "phase": "before"}
        lock = threading.Lock()
        it = iter(list(enumerate(bodies)))

        def worker():
            while True:
                with lock:
                    nxt = next(it, None)
                    phase = state["phase"]
                if nxt is None:
                    return
                try:
                    status, _ = http_req(front, "POST", "/v1/chat/completions", nxt[1])
                except OSError:
                    status = 0
                with lock:
                    state["done"] += 1
                    if status != 200:  # the phase when it was sent, and when it ended
                        state["errors"].append((nxt[0], status, phase if phase == state["phase"] else
                                                f"{phase} -> {state['phase']}"))

        def wait_done(n):
            while True:
                with lock:
                    if state["done"] >= n:
                        return
                time.sleep(0.01)

        threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
        for t in threads:
            t.start()
        # 1. Restart engine 2 at a third of the run.
        wait_done(a.requests // 3)
        victim = 2
        name = f"r{victim}"
        held = [gateway_metric(g[2], "sluice_kv_index_blocks", endpoint=name) or 0 for g in gws]
        reconnects = [gateway_metric(g[2], "sluice_kv_events_reconnects_total", endpoint=name) or 0 for g in gws]
        with lock:
            state["phase"] = "engine restart"
        t_kill = time.time()
        sims[victim]["proc"].kill()
        sims[victim]["proc"].wait()
        cleared = [None] * len(gws)
        while time.time() - t_kill < 5 and None in cleared:
            for i, g in enumerate(gws):
                if cleared[i] is None and (gateway_metric(g[2], "sluice_kv_index_blocks", endpoint=name) or 0) == 0:
                    cleared[i] = time.time() - t_kill
            time.sleep(0.005)
        t_start = time.time()
        launch_sim(sims[victim])
        t_up = time.time()
        back = [None] * len(gws)
        while time.time() - t_up < 5 and None in back:
            for i, g in enumerate(gws):
                if back[i] is None and (gateway_metric(g[2], "sluice_kv_events_reconnects_total", endpoint=name) or 0) > reconnects[i]:
                    back[i] = time.time() - t_up
            time.sleep(0.005)
        fmt = lambda xs: ", ".join("never" if x is None else f"{x * 1000:.0f} ms" for x in xs)
        say(f"engine {name} killed: blocks held per gateway before {[int(h) for h in held]}; cleared in every "
            f"gateway's index after {fmt(cleared)} (goal < 1000 ms: "
            f"{'met' if None not in cleared and max(cleared) < 1.0 else 'NOT met'})")
        say(f"engine {name} restarted (its HTTP port answered {(t_up - t_start) * 1000:.0f} ms after launch): every "
            f"gateway reconnected after {fmt(back)} (from the HTTP port answering)")
        with lock:
            state["phase"] = "after engine restart"
        # 2. Kill gateway 1 at two thirds of the run.
        wait_done(2 * a.requests // 3)
        survivors = [g for i, g in enumerate(gws) if i != 1]
        # From one scrape each (total - ok from two scrapes races the requests finishing between them).
        not_ok = lambda g: sum(not_ok_by_label(g[2]).values())
        total = lambda g: gateway_metric(g[2], "sluice_requests_total") or 0
        before_bad = [not_ok(g) for g in survivors]
        before_lab = [not_ok_by_label(g[2]) for g in survivors]
        before_total = [total(g) for g in survivors]
        with lock:
            state["phase"] = "gateway kill"
            done_at_kill = state["done"]
        gws[1][0].kill()
        gws[1][0].wait()
        for t in threads:
            t.join()
        after_bad = [not_ok(g) for g in survivors]
        diff = {}
        for b, g in zip(before_lab, survivors):
            for k, v in not_ok_by_label(g[2]).items():
                if v - b.get(k, 0.0) > 0:
                    key = k[len("sluice_requests_total"):]
                    diff[key] = diff.get(key, 0.0) + v - b.get(k, 0.0)
        after_total = [total(g) for g in survivors]
        by_phase = {}
        for _, st, ph in state["errors"]:
            by_phase.setdefault(ph, []).append(st)
        at_kill = sum(len(v) for k, v in by_phase.items() if k.endswith("-> gateway kill"))
        say(f"gateway g1 killed after {done_at_kill} of {a.requests} requests: the surviving gateways received "
            f"{int(sum(after_total) - sum(before_total))} requests after it, of which did not end ok: "
            f"{int(sum(after_bad) - sum(before_bad))} {diff or ''} (goal 0); client failures of requests sent after "
            f"the kill: {len(by_phase.get('gateway kill', []))}, of requests in flight at the kill (HAProxy did not "
            f"retry them): {at_kill}")
        say(f"client failures by phase: " + (", ".join(f"{k}: {len(v)} {sorted(set(v))}" for k, v in by_phase.items())
                                              or "none") + f"; {a.requests - len(state['errors'])} of {a.requests} ok")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
            p.wait()
        for s in sims:
            if s["proc"] and s["proc"].poll() is None:
                s["proc"].terminate()
                s["proc"].wait()


def start_gateway(a, tmp, ports, kv, events):
    listen, admin = free_port(), free_port()
    eps = ""
    for i, p in enumerate(ports):
        extra = f", kv_events: '{kv[i][0]}', kv_events_replay: '{kv[i][1]}'" if events else ""
        eps += f"      - {{address: 127.0.0.1:{p}, name: r{i}{extra}}}\n"
    cfg = os.path.join(tmp, f"gw-{listen}.yaml")
    with open(cfg, "w") as f:
        f.write(f"listen: 127.0.0.1:{listen}\nadmin: 127.0.0.1:{admin}\nworkers: 1\npools:\n"
                f"  - name: chat\n    kind: chat\n    policy: sluice\n    endpoints:\n{eps}"
                f"models:\n  - name: {MODEL}\n    pool: chat\n")
    proc = subprocess.Popen([a.sluice, "serve", "-c", cfg, "--access-log", "off", "--log-level", "warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(admin, "/metrics", proc, "sluice serve")
    return proc, listen, admin


def start_haproxy(tmp, gw_ports, admin_ports=None):
    """Round robin over the gateways. With `admin_ports`: health checks on each gateway's /readyz
    (every 200 ms, down after 2 failures) and layer-7 retries on another gateway (retry-on
    conn-failure / empty-response / 502-504, redispatch): what a production deployment runs."""
    port = free_port()
    cfg = os.path.join(tmp, f"haproxy-{port}.cfg")
    if admin_ports:
        servers = "".join(f"    server g{i} 127.0.0.1:{p} check port {ap} inter 200 fall 2 rise 2\n"
                          for i, (p, ap) in enumerate(zip(gw_ports, admin_ports)))
        checks = ("    option httpchk GET /readyz\n    retries 3\n    option redispatch 1\n"
                  "    retry-on conn-failure empty-response response-timeout 502 503 504\n")
    else:
        servers = "".join(f"    server g{i} 127.0.0.1:{p}\n" for i, p in enumerate(gw_ports))
        checks = ""
    with open(cfg, "w") as f:
        f.write("global\n    maxconn 2000\ndefaults\n    mode http\n    timeout connect 5s\n"
                "    timeout client 5m\n    timeout server 5m\n"
                f"frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n"
                f"backend be\n    balance roundrobin\n{checks}{servers}")
    proc = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_http(port, "/v1/models", proc, "haproxy")
    return proc, port


def workload(a):
    """Shared-prefix chat: `prefixes` system prompts (~2 KB each, Zipf-ish popularity), each request
    one of them plus a unique question; the same sequence for every row."""
    rng = random.Random(11)
    prefixes = [f"[tenant {k}] " + " ".join(f"rule-{k}-{j} keep answers short and cite the runbook."
                                           for j in range(40)) for k in range(a.prefixes)]
    weights = [1.0 / (k + 1) ** 0.6 for k in range(a.prefixes)]
    out = []
    for i in range(a.requests):
        k = rng.choices(range(a.prefixes), weights)[0]
        out.append(json.dumps({"model": MODEL, "max_tokens": 8, "messages": [
            {"role": "system", "content": prefixes[k]}, {"role": "user", "content": f"question {i}: status?"}]}))
    return out


def run_row(a, sim_ports, front_port, bodies):
    before = [http_req(p, "GET", "/metrics")[1].decode() for p in sim_ports]
    lat, errors, lock = [], [0], threading.Lock()
    it = iter(list(enumerate(bodies)))

    def worker():
        while True:
            with lock:
                nxt = next(it, None)
            if nxt is None:
                return
            t0 = time.time()
            try:
                status, _ = http_req(front_port, "POST", "/v1/chat/completions", nxt[1])
            except OSError:
                status = 0
            with lock:
                if status == 200:
                    lat.append(time.time() - t0)
                else:
                    errors[0] += 1

    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    after = [http_req(p, "GET", "/metrics")[1].decode() for p in sim_ports]
    hits = sum(metric_sum(y, "vllm:prefix_cache_hits_total") - metric_sum(x, "vllm:prefix_cache_hits_total")
               for x, y in zip(before, after))
    queries = sum(metric_sum(y, "vllm:prefix_cache_queries_total") - metric_sum(x, "vllm:prefix_cache_queries_total")
                  for x, y in zip(before, after))
    lat.sort()
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] if lat else float("nan")
    return {"hit": hits / queries if queries else 0.0, "hits": hits, "p50": q(0.5), "p90": q(0.9),
            "errors": errors[0], "wall": wall}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build-release", "sluice"))
    ap.add_argument("--gateways", type=int, default=3)
    ap.add_argument("--prefixes", type=int, default=48)
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--concurrency", type=int, default=12)
    ap.add_argument("--kv-blocks", type=int, default=0)
    ap.add_argument("--time-scale", type=float, default=4.0)
    ap.add_argument("--failover", action="store_true", help="the fault checks instead of the comparison")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not shutil.which("haproxy"):
        sys.exit("haproxy not installed (scripts/install-deps.sh)")
    tmp = tempfile.mkdtemp(prefix="sluice-kvrep-")
    procs = []
    lines = []

    def say(s):
        print(s, flush=True)
        lines.append(s)

    try:
        if a.failover:
            failover(a, tmp, say)
            return
        sim, sim_ports, kv = start_sim(a, tmp)
        procs.append(sim)
        bodies = workload(a)
        say(f"# {' '.join(sys.argv)}")
        say(f"# 4 sim replicas (time scale {a.time_scale}, kv blocks {a.kv_blocks or 'profile'}), {a.requests} requests, "
            f"{a.prefixes} shared prefixes, concurrency {a.concurrency}, HAProxy round robin in front of the gateways")
        say(f"{'gateways':>8}  {'index':<8} {'engine hit':>10} {'vs 1 gw':>8} {'e2e p50':>8} {'e2e p90':>8} "
            f"{'pred/engine':>11} {'errors':>6}")
        base = None
        for n, events in ((1, False), (a.gateways, False), (1, True), (a.gateways, True)):
            for p in sim_ports:
                http_req(p, "POST", "/reset_prefix_cache")
            gws = [start_gateway(a, tmp, sim_ports, kv, events) for _ in range(n)]
            hp, front = start_haproxy(tmp, [g[1] for g in gws])
            time.sleep(0.5)  # subscriptions and first scrapes
            r = run_row(a, sim_ports, front, bodies)
            texts = [http_req(g[2], "GET", "/metrics")[1].decode() for g in gws]
            predicted = sum(metric_sum(t, "sluice_prefix_predicted_cached_tokens_total") for t in texts)
            # With events: the predicted cached tokens by the source of the prediction.
            by_src = {src: sum(float(l.rsplit(" ", 1)[1]) for t in texts for l in t.splitlines()
                               if l.startswith("sluice_kv_predicted_cached_tokens_total{") and f'source="{src}"' in l)
                      for src in ("events", "recent", "learned")} if events else {}
            hp.terminate()
            hp.wait()
            for g in gws:
                g[0].terminate()
                g[0].wait()
            if n == 1 and not events:
                base = r["hit"]
            ratio = r["hit"] / base if base else float("nan")
            pe = predicted / r["hits"] if r["hits"] else float("nan")
            say(f"{n:>8}  {'events' if events else 'learned':<8} {r['hit'] * 100:>9.1f}% {ratio:>8.2f} "
                f"{r['p50'] * 1000:>6.0f}ms {r['p90'] * 1000:>6.0f}ms {pe:>11.2f} {r['errors']:>6}"
                + ("  predicted by source: " + ", ".join(f"{k} {v / r['hits']:.2f}" for k, v in by_src.items())
                   if by_src and r["hits"] else ""))
    finally:
        for p in procs:
            p.terminate()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        if a.out:
            with open(a.out, "w") as f:
                f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
