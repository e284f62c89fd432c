#!/usr/bin/python3
"""What the engine render call costs per request (issue 15, item 3), over loopback, side by side in
one run: two `sluice serve` gateways in front of the same `sluice sim` replicas (KV events on),
one with `token_ids: {source: estimate}`, one with `token_ids: {source: render}`. The same
streaming chat requests (a shared system prompt + a distinct question, closed loop) go through
each, in interleaved rounds, three modes per prompt size:

  estimate new       the estimate gateway, every body new (no render call): the baseline
  render new (miss)  the render gateway, the same kind of new bodies: one render call per request
  estimate repeated  the estimate gateway, 16 bodies repeated (the engines cache them whole)
  render rep. (hit)  the render gateway, the same repeated bodies: answered by its render cache

Printed per mode: client TTFT (first content token) p50 / p99, the added TTFT against the
estimate row of the same bodies in the same run, the gateway's CPU per request (its /proc utime+stime over the
phase, minus its idle rate measured before: KV-event subscribers and 50 ms scrapes), and the
simulator's CPU per request (the engine side of the render call: template + tokenizer + JSON).

Run: /usr/bin/python3 bench/render_cost.py [--sluice build-release/sluice] [--requests 300]
     [--rounds 3] [--concurrency 4] [--sizes 2000,32000] [--out bench/results/render.txt]
Standard library only. Loopback, ephemeral ports, bounded in time."""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TICK = os.sysconf("SC_CLK_TCK")
KV_CFG = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*",
          "replay_endpoint": "tcp://127.0.0.1:*", "topic": "kv@sim@m"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100.0 * len(v)))] if v else float("nan")


class Conn:
    """One keep-alive HTTP/1.1 connection that sends a streaming chat and times its first token."""

    def __init__(self, port):
        self.port = port
        self.sock = None

    def request(self, body):
        for attempt in range(2):
            try:
                if self.sock is None:
                    self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
                    self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                t0 = time.perf_counter()
                self.sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
                buf, ttft = b"", None
                while True:
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        raise ConnectionError("closed")
                    buf += chunk
                    if ttft is None and b'"delta":{"content":' in buf:
                        ttft = time.perf_counter() - t0
                    if not buf.startswith(b"HTTP/1.1 200"):
                        if b"\r\n\r\n" in buf:
                            raise RuntimeError(buf[:300].decode(errors="replace"))
                        continue
                    if buf.endswith(b"0\r\n\r\n") and b"[DONE]" in buf:
                        return ttft
            except (OSError, ConnectionError):
                if self.sock:
                    self.sock.close()
                self.sock = None
                if attempt:
                    raise


def run_phase(port, bodies, concurrency):
    """Closed loop: `concurrency` connections take the bodies in order; returns the TTFTs."""
    ttfts, errors, lock = [], [], threading.Lock()
    it = iter(bodies)

    def worker():
        c = Conn(port)
        while True:
            with lock:
                body = next(it, None)
            if body is None:
                return
            try:
                t = c.request(body)
                with lock:
                    ttfts.append(t)
            except Exception as e:  # counted and shown, never hidden
                with lock:
                    errors.append(str(e)[:200])

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ttfts, errors


def metric(admin, name, **labels):
    c = socket.create_connection(("127.0.0.1", admin), timeout=10)
    c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        chunk = c.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    c.close()
    total = 0.0
    for line in data.decode(errors="replace").splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build-release", "sluice"))
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--requests", type=int, default=300, help="per mode, per round, per size")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--sizes", default="2000,32000", help="prompt characters (system + question)")
    ap.add_argument("--tokenizer", default="sluice", help="the sim's: sluice (the estimate is exact) or foreign")
    ap.add_argument("--out")
    args = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    procs = []
    lines = []

    def say(s=""):
        print(s, flush=True)
        lines.append(s)

    try:
        # Near-instant engines (no front-end delay, fast clock): what is left of TTFT is the path.
        sim = subprocess.Popen([args.sluice, "sim", "--replicas", str(args.replicas), "--base-port", "0", "--seed", "7",
                                "--output-len", "2", "--frontend-overhead-ms", "0", "--time-scale", "20",
                                "--tokenizer", args.tokenizer,
                                "--kv-events-config", json.dumps(KV_CFG)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(sim)
        ports, kv = [], []
        deadline = time.time() + 30
        while len(kv) < args.replicas and time.time() < deadline:
            line = sim.stdout.readline()
            if "listening on" in line:
                ports.append(int(line.rsplit(":", 1)[1]))
            elif "kv events on" in line:
                p = line.split()
                kv.append((p[5], p[7]))
        if len(kv) < args.replicas:
            raise RuntimeError("sim did not start")
        threading.Thread(target=lambda: [None for _ in sim.stdout], daemon=True).start()
        gws = {}
        for source in ("estimate", "render"):
            listen, admin = free_port(), free_port()
            eps = "\n".join(f"      - {{address: 127.0.0.1:{p}, name: replica-{i}, kv_events: '{k[0]}', kv_events_replay: '{k[1]}'}}"
                            for i, (p, k) in enumerate(zip(ports, kv)))
            cfg = os.path.join(tmp.name, f"{source}.yaml")
            with open(cfg, "w") as f:
                f.write(f"""listen: 127.0.0.1:{listen}
admin: 127.0.0.1:{admin}
workers: 1
pools:
  - name: chat
    endpoints:
{eps}
    token_ids: {{source: {source}, timeout_ms: 200}}
models:
  - {{name: {MODEL}, pool: chat}}
""")
            gw = subprocess.Popen([args.sluice, "serve", "-c", cfg, "--access-log", "off", "--log-level", "warn"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(gw)
            gws[source] = (gw, listen, admin)
        for gw, listen, admin in gws.values():
            deadline = time.time() + 30
            while True:
                try:
                    metric(admin, "sluice_kv_events_connected")
                    break
                except OSError:
                    if time.time() > deadline:
                        raise RuntimeError("gateway did not start")
                    time.sleep(0.1)
        time.sleep(1.0)
        # Idle CPU rates (background loops), to subtract.
        idle = {}
        t0 = time.time()
        c0 = {s: cpu_seconds(g[0].pid) for s, g in gws.items()}
        time.sleep(3.0)
        for s, g in gws.items():
            idle[s] = (cpu_seconds(g[0].pid) - c0[s]) / (time.time() - t0)

        say(f"render cost, {args.replicas} sluice sim replicas (KV events, --tokenizer {args.tokenizer}, --frontend-overhead-ms 0, --time-scale 20), "
            f"2 gateways (1 worker each), closed loop x{args.concurrency}, {args.requests} requests per mode per round, "
            f"{args.rounds} rounds interleaved; idle gateway CPU: estimate {idle['estimate'] * 1e3:.1f} ms/s, "
            f"render {idle['render'] * 1e3:.1f} ms/s (subtracted)")
        say(f"command: /usr/bin/python3 bench/render_cost.py --requests {args.requests} --rounds {args.rounds} "
            f"--concurrency {args.concurrency} --sizes {args.sizes} --tokenizer {args.tokenizer}")
        say()
        say(f"{'prompt':>8} {'mode':<18} {'n':>5} {'err':>4} {'TTFT p50':>9} {'TTFT p99':>9} {'added p50':>10} {'added p99':>10} "
            f"{'gw CPU/req':>11} {'sim CPU/req':>12} {'predicted':>10} {'of events':>10} {'call mean':>10} {'render ok/hit/timeout/error':>28}")
        seq = 0
        for size in [int(x) for x in args.sizes.split(",")]:
            system = ("You are the sluice render benchmark's assistant; answer from the attached notes only. " * 400)[: max(0, size - 80)]
            modes = ("estimate new", "render new (miss)", "estimate repeated", "render rep. (hit)")
            res = {m: {"ttft": [], "gw": 0.0, "sim": 0.0, "n": 0, "err": 0, "pred": 0.0, "prompt": 0.0, "call_s": 0.0,
                        "calls": 0.0, "pred_ev": 0.0} for m in modes}
            hit_bodies = [json.dumps({"model": MODEL, "stream": True, "max_tokens": 2, "messages": [
                {"role": "system", "content": system}, {"role": "user", "content": f"repeated question {i}"}]}).encode()
                for i in range(16)]
            # Warm the render cache with the repeated bodies (misses not measured).
            run_phase(gws["render"][1], hit_bodies, args.concurrency)
            before = {o: metric(gws["render"][2], "sluice_render_requests_total", outcome=o)
                      for o in ("ok", "cache_hit", "timeout", "error")}
            for rnd in range(args.rounds):
                for mode in modes:
                    if "rep" in mode:
                        bodies = [hit_bodies[i % len(hit_bodies)] for i in range(args.requests)]
                    else:
                        bodies = []
                        for i in range(args.requests):
                            seq += 1
                            bodies.append(json.dumps({"model": MODEL, "stream": True, "max_tokens": 2, "messages": [
                                {"role": "system", "content": system},
                                {"role": "user", "content": f"question {seq}: what do the notes say?"}]}).encode())
                    source = "estimate" if mode.startswith("estimate") else "render"
                    gw = gws[source]
                    k0 = (metric(gw[2], "sluice_kv_predicted_cached_tokens_total"), metric(gw[2], "sluice_kv_prompt_tokens_total"),
                          metric(gw[2], "sluice_render_duration_seconds_sum"), metric(gw[2], "sluice_render_duration_seconds_count"),
                          metric(gw[2], "sluice_kv_predicted_cached_tokens_total", source="events"))
                    g0, s0, t0 = cpu_seconds(gw[0].pid), cpu_seconds(sim.pid), time.time()
                    ttfts, errors = run_phase(gw[1], bodies, args.concurrency)
                    dt = time.time() - t0
                    r = res[mode]
                    r["gw"] += cpu_seconds(gw[0].pid) - g0 - idle[source] * dt
                    r["sim"] += cpu_seconds(sim.pid) - s0
                    r["pred"] += metric(gw[2], "sluice_kv_predicted_cached_tokens_total") - k0[0]
                    r["prompt"] += metric(gw[2], "sluice_kv_prompt_tokens_total") - k0[1]
                    r["call_s"] += metric(gw[2], "sluice_render_duration_seconds_sum") - k0[2]
                    r["calls"] += metric(gw[2], "sluice_render_duration_seconds_count") - k0[3]
                    r["pred_ev"] += metric(gw[2], "sluice_kv_predicted_cached_tokens_total", source="events") - k0[4]
                    r["ttft"] += ttfts
                    r["n"] += len(ttfts)
                    r["err"] += len(errors)
                    if errors:
                        print("errors:", errors[:3], file=sys.stderr)
            after = {o: metric(gws["render"][2], "sluice_render_requests_total", outcome=o)
                     for o in ("ok", "cache_hit", "timeout", "error")}
            counts = "/".join(str(int(after[o] - before[o])) for o in ("ok", "cache_hit", "timeout", "error"))
            for mode, r in res.items():
                base = res["estimate repeated" if "rep" in mode else "estimate new"]["ttft"]
                base50, base99 = pct(base, 50), pct(base, 99)
                p50, p99 = pct(r["ttft"], 50), pct(r["ttft"], 99)
                call = f"{r['call_s'] / r['calls'] * 1e3:.2f}ms" if r["calls"] else ""
                added = "" if mode.startswith("estimate") else f"{(p50 - base50) * 1e3:+9.2f}ms {(p99 - base99) * 1e3:+9.2f}ms"
                say(f"{size:>8} {mode:<18} {r['n']:>5} {r['err']:>4} {p50 * 1e3:>7.2f}ms {p99 * 1e3:>7.2f}ms "
                    f"{added:>21} {r['gw'] / max(1, r['n']) * 1e6:>9.0f}us {r['sim'] / max(1, r['n']) * 1e6:>10.0f}us "
                    f"{r['pred'] / r['prompt'] if r['prompt'] else float('nan'):>10.3f} "
                    f"{r['pred_ev'] / r['prompt'] if r['prompt'] else float('nan'):>10.3f} "
                    f"{call:>10} "
                    f"{counts if mode == modes[-1] else '':>28}")
        say()
        say("added = this mode's TTFT percentile minus the estimate gateway's on the same bodies in the same run; CPU per request = the "
            "process's utime+stime over its phases / requests (gateway: minus its idle rate); predicted = the picker's "
            "predicted cached tokens / prompt tokens of the phase (sluice_kv_predicted_cached_tokens_total, every source: "
            "the engines' events and the gateway's own recent dispatches); of events = the part predicted from the engines' "
            "KV events (source events), the part that needs the engine's token ids.")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        tmp.cleanup()
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
