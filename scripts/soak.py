#!/usr/bin/env python3
"""Soak driver (scripts/soak.sh runs it): mixed streaming load through `sluice serve` in front of
`sluice sim` replicas (one process each, so each can be killed or stopped alone) while faults are
injected, then checks that the gateway survived and every gauge came back to zero.

Load: --clients closed-loop clients; each request is a chat completion, streaming 3 times in 4,
short or long output, from one of two tenants (admission: budgets, a queue, reservations); one in
--abort-every requests is cut by its client mid-stream (or before the answer).
Faults, one every --fault-every seconds, in turn: SIGKILL a replica (restarted on its port 3 s
later), SIGSTOP a replica for 4 s (then SIGCONT), SIGHUP the gateway with a config that changes
the pool (a new pool runtime), a burst of 50 client aborts.
Every --sample seconds: requests, errors by cause, the gateway's RSS and fds, active requests.
At the end (load stopped, 20 s to settle): 0 gateway crashes; sluice_active_requests,
sluice_endpoint_inflight_requests, sluice_reservations_outstanding, sluice_queue_depth all 0.
Exit status 0 only if all of that holds. Standard library only; 127.0.0.1 only."""
import argparse
import hashlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sha(k):
    return hashlib.sha256(k.encode()).hexdigest()


def metric(text, name):
    total = None
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total = (total or 0) + float(line.rsplit(" ", 1)[1])
    return total


class Replica:
    def __init__(self, sluice, port, time_scale):
        self.sluice, self.port, self.time_scale = sluice, port, time_scale
        self.proc = None
        self.stopped = False
        self.start()

    def start(self):
        self.proc = subprocess.Popen([self.sluice, "sim", "--replicas", "1", "--base-port", str(self.port), "--seed", str(self.port),
                                      "--time-scale", str(self.time_scale)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)

    def stop_signal(self, sig):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)


def gateway_config(listen, admin, ports, generation):
    eps = "\n".join(f"      - {{address: 127.0.0.1:{p}, name: replica-{i}}}" for i, p in enumerate(ports))
    return f"""listen: 127.0.0.1:{listen}
admin: 127.0.0.1:{admin}
workers: 2
timeouts: {{connect_ms: 500, first_byte_ms: 3000, idle_ms: 3000}}
pools:
  - name: chat
    kind: chat
    endpoints:
{eps}
    scrape: {{interval_ms: 100, stale_after_ms: 1000}}
    health: {{interval_ms: 500, timeout_ms: 300}}
    max_in_flight_per_endpoint: {48 + generation % 2}
models:
  - {{name: {MODEL}, pool: chat}}
tenants:
  - name: alpha
    key_sha256: [{sha("key-alpha")}]
    limits: {{requests_per_min: 1000000}}
  - name: beta
    key_sha256: [{sha("key-beta")}]
    priority: -1
admission: {{queue: {{max_requests: 200, ttl_ms: 3000}}}}
"""


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = 0
        self.ok = 0
        self.aborted = 0
        self.errors = {}

    def add(self, cause):
        with self.lock:
            self.requests += 1
            if cause == "ok":
                self.ok += 1
            elif cause == "client_abort":
                self.aborted += 1
            else:
                self.errors[cause] = self.errors.get(cause, 0) + 1


def one_request(port, rng, abort):
    stream = rng.random() < 0.75
    body = json.dumps({"model": MODEL, "stream": stream, "max_tokens": rng.choice([8, 32, 128]),
                       "messages": [{"role": "system", "content": "You are the soak test. " * 30},
                                    {"role": "user", "content": f"q{rng.randrange(50)}"}]})
    key = rng.choice(["key-alpha", "key-alpha", "key-beta"])
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    try:
        s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
                  + body.encode())
        if abort:
            if rng.random() < 0.5:
                s.recv(rng.choice([1, 200, 2000]))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
            return "client_abort"
        raw = b""
        while True:
            data = s.recv(65536)
            if not data:
                break
            raw += data
        if not raw.startswith(b"HTTP/1.1 "):
            return "no_answer"
        status = int(raw[9:12])
        if status == 200:
            if stream and b"data: [DONE]" not in raw:
                return "stream_cut"
            if b'"error"' in raw and stream:
                return "stream_error_event"
            return "ok"
        try:
            code = json.loads(raw.split(b"\r\n\r\n", 1)[1])["error"].get("code") or ""
        except (ValueError, KeyError, IndexError, AttributeError):
            code = ""
        return f"{status}{':' + code if code else ''}"
    except socket.timeout:
        return "client_timeout"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()


def client(port, stop, stats, seed, abort_every, burst):
    rng = random.Random(seed)
    while not stop.is_set():
        abort = rng.random() < 1.0 / abort_every or burst.is_set()
        stats.add(one_request(port, rng, abort))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--clients", type=int, default=48)
    ap.add_argument("--fault-every", type=float, default=8)
    ap.add_argument("--sample", type=float, default=15)
    ap.add_argument("--abort-every", type=int, default=20)
    ap.add_argument("--time-scale", type=float, default=20)
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="sluice-soak-")
    ports = [free_port() for _ in range(args.replicas)]
    replicas = [Replica(args.sluice, p, args.time_scale) for p in ports]
    listen, admin = free_port(), free_port()
    cfg = os.path.join(tmp, "config.yaml")
    generation = 0
    with open(cfg, "w") as f:
        f.write(gateway_config(listen, admin, ports, generation))
    gw_err = open(os.path.join(tmp, "gateway.stderr"), "w")
    gw = subprocess.Popen([args.sluice, "serve", "-c", cfg, "--access-log", "off", "--log-level", "warn"],
                          stdout=subprocess.DEVNULL, stderr=gw_err)
    stop, burst = threading.Event(), threading.Event()
    stats = Stats()
    threads = []
    failures = []
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", admin, timeout=2)
                c.request("GET", "/metrics")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        print(f"soak: {args.minutes} min, {args.replicas} sim replicas (time-scale {args.time_scale}), {args.clients} clients, "
              f"a fault every {args.fault_every} s, 1 in {args.abort_every} requests aborted by its client", flush=True)

        def admin_metrics():
            c = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
            try:
                c.request("GET", "/metrics")
                return c.getresponse().read().decode()
            finally:
                c.close()

        def rss_fds():
            with open(f"/proc/{gw.pid}/status") as f:
                rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
            return rss >> 10, len(os.listdir(f"/proc/{gw.pid}/fd"))

        for i in range(args.clients):
            t = threading.Thread(target=client, args=(listen, stop, stats, i, args.abort_every, burst), daemon=True)
            t.start()
            threads.append(t)

        t0 = time.time()
        end = t0 + args.minutes * 60
        next_fault, next_sample = t0 + args.fault_every, t0
        faults = {"kill": 0, "hang": 0, "reload": 0, "abort_burst": 0}
        pending = []  # (when, action)
        fault_no = 0
        peak_rss = peak_fds = 0
        print(f"{'t_s':>5} {'requests':>9} {'ok':>8} {'aborted':>8} {'errors':>7} {'rss_mib':>8} {'fds':>5} {'active':>6}  errors by cause",
              flush=True)
        while time.time() < end:
            now = time.time()
            if gw.poll() is not None:
                failures.append(f"gateway exited with {gw.returncode}")
                break
            for item in [p for p in pending if p[0] <= now]:
                pending.remove(item)
                item[1]()
            if now >= next_fault:
                kind = ["kill", "hang", "reload", "abort_burst"][fault_no % 4]
                fault_no += 1
                faults[kind] += 1
                r = replicas[fault_no % len(replicas)]
                if kind == "kill":
                    r.kill()
                    pending.append((now + 3, r.start))
                elif kind == "hang":
                    r.stop_signal(signal.SIGSTOP)
                    pending.append((now + 4, lambda r=r: r.stop_signal(signal.SIGCONT)))
                elif kind == "reload":
                    generation += 1
                    with open(cfg, "w") as f:
                        f.write(gateway_config(listen, admin, ports, generation))
                    gw.send_signal(signal.SIGHUP)
                else:
                    burst.set()
                    pending.append((now + 0.5, burst.clear))
                next_fault = now + args.fault_every
            if now >= next_sample:
                rss, fds = rss_fds()
                peak_rss, peak_fds = max(peak_rss, rss), max(peak_fds, fds)
                active = metric(admin_metrics(), "sluice_active_requests")
                with stats.lock:
                    errs = sum(stats.errors.values())
                    top = ", ".join(f"{k} {v}" for k, v in sorted(stats.errors.items(), key=lambda kv: -kv[1])[:6])
                    print(f"{now - t0:5.0f} {stats.requests:9d} {stats.ok:8d} {stats.aborted:8d} {errs:7d} {rss:8d} {fds:5d} "
                          f"{active or 0:6.0f}  {top}", flush=True)
                next_sample = now + args.sample
            time.sleep(0.05)

        stop.set()
        for item in pending:  # restart what is down, wake what is stopped
            item[1]()
        for r in replicas:
            r.stop_signal(signal.SIGCONT)
            if r.proc.poll() is not None:
                r.start()
        for t in threads:
            t.join(30)
        # Settle: every gauge back to zero.
        gauges = ["sluice_active_requests", "sluice_endpoint_inflight_requests", "sluice_reservations_outstanding", "sluice_queue_depth"]
        values = {}
        settle_end = time.time() + 20
        while time.time() < settle_end:
            if gw.poll() is not None:
                break
            text = admin_metrics()
            values = {g: metric(text, g) or 0 for g in gauges}
            if all(v == 0 for v in values.values()):
                break
            time.sleep(0.25)
        elapsed = time.time() - t0
        crashed = gw.poll() is not None
        rss, fds = (0, 0) if crashed else rss_fds()
        print("\n== soak summary ==")
        print(f"duration {elapsed:.0f} s; requests {stats.requests} ({stats.requests / max(1, elapsed):.0f}/s); ok {stats.ok}; "
              f"client aborts {stats.aborted}")
        print(f"faults injected: {faults['kill']} replica kills, {faults['hang']} SIGSTOP hangs, {faults['reload']} SIGHUP reloads, "
              f"{faults['abort_burst']} abort bursts")
        print("errors by cause: " + (", ".join(f"{k} {v}" for k, v in sorted(stats.errors.items(), key=lambda kv: -kv[1])) or "none"))
        print(f"gateway RSS {rss} MiB at the end (peak sampled {peak_rss} MiB); fds {fds} at the end (peak sampled {peak_fds})")
        print(f"gateway crashes: {1 if crashed else 0}")
        print("gauges after the load: " + ", ".join(f"{g} {v:g}" for g, v in values.items()))
        if crashed:
            failures.append(f"gateway crashed (exit {gw.returncode})")
        for g, v in values.items():
            if v != 0:
                failures.append(f"{g} is {v} after the load")
        print("RESULT: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
        return 0 if not failures else 1
    finally:
        stop.set()
        if gw.poll() is None:
            gw.terminate()
            try:
                gw.wait(10)
            except subprocess.TimeoutExpired:
                gw.kill()
                gw.wait(5)
        for r in replicas:
            r.stop_signal(signal.SIGCONT)
            r.kill()
        gw_err.close()


if __name__ == "__main__":
    sys.exit(main())
