#!/usr/bin/env python3
"""Live comparison over loopback: the same simulated fleet (`sluice sim`, restarted fresh, with a fresh
front end, for every target and every rate, so no cache, queue or policy state carries over from one
rate to the next: each rate starts cold, as each of fleetsim's runs does) behind each front end in
turn, loaded by `sluice bench`:

  sluice:<policy>    `sluice serve` with that pool policy
  haproxy:<balance>  HAProxy (Debian) in HTTP mode with `balance roundrobin|leastconn`
  direct             replica 0 alone (a baseline for one engine)

Writes OUT.json (one line per target and rate, `sluice bench --json` objects) and OUT.md.

usage: scripts/bench-live.py --sluice build-release/sluice [--out bench/results/live-4]
       [--targets sluice:round_robin,sluice:sluice,haproxy:roundrobin,haproxy:leastconn]
       [--replicas 4] [--kv-blocks 1500] [--time-scale 1] [--rates 20,40] [--requests 600]
       [--workload shared_prefix,groups=32,prompts=8,system=2000,question=200,output=100]
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import http.client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port}")


def stop(proc):
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_sim(a):
    args = [a.sluice, "sim", "--replicas", str(a.replicas), "--base-port", "0", "--time-scale", str(a.time_scale),
            "--seed", "1", "--jitter", str(a.sim_jitter), "--frontend-overhead-ms", str(a.sim_frontend_ms)]
    if a.kv_blocks:
        args += ["--kv-blocks", str(a.kv_blocks)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ports, ready = [], threading.Event()

    def read():
        for line in proc.stdout:
            if "listening on" in line:
                ports.append(int(line.rsplit(":", 1)[1]))
                if len(ports) == a.replicas:
                    ready.set()
    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(20):
        stop(proc)
        raise RuntimeError("sluice sim did not start")
    c = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=5)
    c.request("GET", "/v1/models")
    model = json.loads(c.getresponse().read())["data"][0]["id"]
    c.close()
    return proc, ports, model


def start_front(a, target, ports, model, tmp):
    kind, _, param = target.partition(":")
    port = free_port()
    if kind == "direct":
        return None, ports[0]
    if kind == "sluice":
        cfg = os.path.join(tmp, f"sluice-{param}.yaml")
        eps = "".join(f"      - 127.0.0.1:{p}\n" for p in ports)
        with open(cfg, "w") as f:
            f.write(f"listen: 127.0.0.1:{port}\nadmin: 127.0.0.1:{free_port()}\nworkers: 2\npools:\n"
                    f"  - name: chat\n    kind: chat\n    policy: {param}\n"
                    f"    max_in_flight_per_endpoint: {a.max_in_flight}\n    endpoints:\n{eps}"
                    f"models:\n  - name: {model}\n    pool: chat\n")
        proc = subprocess.Popen([a.sluice, "serve", "-c", cfg, "--access-log", "off", "--log-level", "warn"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port, proc, f"sluice serve ({param})")
        return proc, port
    if kind == "haproxy":
        if not shutil.which("haproxy"):
            raise RuntimeError("haproxy not installed (scripts/install-deps.sh)")
        cfg = os.path.join(tmp, f"haproxy-{param}.cfg")
        servers = "".join(f"    server s{i} 127.0.0.1:{p}\n" for i, p in enumerate(ports))
        with open(cfg, "w") as f:
            # option http-no-delay: without it HAProxy sends with MSG_MORE and the kernel holds a
            # stream's first small writes (the first token) up to its 200 ms cork timeout: TTFT
            # p50 212 ms against 79 ms through sluice's round_robin at 20 req/s (rounds 7-28).
            # The option is HAProxy's documented switch for interactive exchanges such as these.
            f.write("global\n    maxconn 4000\ndefaults\n    mode http\n    timeout connect 5s\n"
                    "    timeout client 10m\n    timeout server 10m\n    option http-no-delay\n"
                    f"frontend fe\n    bind 127.0.0.1:{port}\n    default_backend be\n"
                    f"backend be\n    balance {param}\n{servers}")
        proc = subprocess.Popen(["haproxy", "-f", cfg, "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port, proc, f"haproxy ({param})")
        return proc, port
    raise RuntimeError(f"unknown target {target}")


def fmt_s(x):
    return f"{x:.2f} s" if x >= 1 else f"{x * 1000:.0f} ms"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build-release", "sluice"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "live-4"))
    ap.add_argument("--targets", default="sluice:round_robin,sluice:least_request,sluice:cache_aware,"
                                         "sluice:llmd_default,sluice:sluice,haproxy:roundrobin,haproxy:leastconn")
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--kv-blocks", type=int, default=1500)
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--rates", default="20,40")
    ap.add_argument("--requests", type=int, default=600)
    ap.add_argument("--workload", default="shared_prefix,groups=32,prompts=8,system=2000,question=200,output=100")
    # The gateway's in-flight cap per endpoint (its default, 256): with it, the gateway also queues
    # requests while every endpoint's fresh signals show it saturated. fleetsim's --max-in-flight is
    # the same setting (its default there is 0, neither), so a comparison passes both the same value.
    ap.add_argument("--max-in-flight", type=int, default=256)
    # The simulated engines' step-time jitter and front-end overhead (`sluice sim`'s defaults: a real
    # engine's noise and its HTTP + tokenizer time). fleetsim has neither by default: a comparison
    # with it passes 0 and 0, so that both sides run the same engine.
    ap.add_argument("--sim-jitter", type=float, default=0.05)
    ap.add_argument("--sim-frontend-ms", type=float, default=20.0)
    a = ap.parse_args()
    if a.max_in_flight < 1:
        ap.error("--max-in-flight: the gateway's cap is at least 1")
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for target in a.targets.split(","):
            # One rate per fleet: with the rates of a sweep run back to back on one fleet, every rate
            # after the first started with the last one's caches, queues and policy state (fleetsim
            # starts each cold): cache_aware at 22 req/s on hot_prefix came out at 0.77 of fleetsim's
            # goodput that way, 0.99 started cold (bench/results/live-vs-fleetsim.md).
            for rate in a.rates.split(","):
                sim = front = None
                try:
                    sim, ports, model = start_sim(a)
                    front, port = start_front(a, target, ports, model, tmp)
                    out = os.path.join(tmp, "run.json")
                    cmd = [a.sluice, "bench", "--url", f"http://127.0.0.1:{port}", "--label", target, "--model", model,
                           "--workload", a.workload, "--rates", rate, "--requests", str(a.requests),
                           "--time-scale", str(a.time_scale), "--timeout", "300",
                           "--metrics-url", ",".join(f"http://127.0.0.1:{p}/metrics" for p in ports),
                           "--json-out", out]
                    print(f"== {target} @ {rate}", file=sys.stderr, flush=True)
                    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
                    with open(out) as f:
                        lines += [json.loads(l) for l in f if l.strip()]
                finally:
                    stop(front)
                    stop(sim)
    with open(a.out + ".json", "w") as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")
    command = " ".join(["scripts/bench-live.py"] + [f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items()
                                                    if k not in ("sluice", "out")])
    md = [f"# Live over loopback: {a.replicas} simulated replicas (`sluice sim`, {a.kv_blocks} KV blocks each, "
          f"time scale {a.time_scale:g}) behind each front end", "",
          f"Workload: {lines[0]['workload'] if lines else a.workload}. Figures in engine time. A fresh simulator "
          "fleet and front end for every target and rate; one shared 2-core machine, so absolute latencies include the load generator's "
          "and proxies' CPU contention.", "", "Made by:", "", "```", command, "```", "",
          "| target | rate | ok% | req/s | out tok/s | TTFT p50 | TTFT p90 | TTFT p99 | ITL p50 | E2E p90 | goodput | engine hit rate |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for l in sorted(lines, key=lambda l: (l["offered_rate"], a.targets.split(",").index(l["label"]))):
        f = l["figures"]
        hit = f["prefix_hit_rate"]
        md.append(f"| {l['label']} | {l['offered_rate']:g} | {100 * f['ok'] / max(1, f['requests']):.1f} | "
                  f"{f['requests_per_s']:.2f} | {f['output_tokens_per_s']:.0f} | {fmt_s(f['ttft_s']['p50'])} | "
                  f"{fmt_s(f['ttft_s']['p90'])} | {fmt_s(f['ttft_s']['p99'])} | {f['itl_s']['p50'] * 1000:.1f} ms | "
                  f"{fmt_s(f['e2e_s']['p90'])} | {f['goodput_rps']:.2f} | "
                  f"{'-' if hit is None else f'{hit * 100:.1f}%'} |")
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"bench-live: wrote {a.out}.md", file=sys.stderr)


if __name__ == "__main__":
    main()
