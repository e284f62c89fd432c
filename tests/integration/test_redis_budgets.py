"""Integration tests of shared token budgets (`redis:`): a real redis-server on a unix socket in a
temp dir, one `sluice sim`, three `sluice serve` replicas, all on loopback ephemeral ports.

Covers: a tenant offered ~3x its output-token budget through 3 replicas gets its budget (within
the GCRA allowance + 5%) with shared buckets vs ~3x with local buckets (printed side by side); a
second tenant under its budget is never refused; x-ratelimit-remaining falls as the tenant spends
from another replica; the replicas' held units in Redis return to 0 when idle; killing and
restarting redis-server mid-run (fail-open): every request ends 200 or 429, the gateway counts the
outage and recovers; fail-closed against a peer that answers garbage: a clear 429, counted, no crash.

Run: python3 test_redis_budgets.py --sluice path/to/sluice"""
import argparse
import hashlib
import http.client
import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_fleet import RedisServer, Proc, admin_metrics, metric, start_gateway, start_sim  # noqa: E402

SLUICE = None
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SCALE = 3.0 if os.environ.get("SLUICE_SANITIZED") else 1.0
B = 3000          # heavy tenant: output tokens per minute
MAX_TOKENS = 50


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


TENANTS = f"""tenants:
  - name: heavy
    key_sha256: [{sha("key-heavy")}]
    limits: {{output_tokens_per_min: {B}}}
  - name: light
    key_sha256: [{sha("key-light")}]
    limits: {{output_tokens_per_min: 1000000}}
  - name: meter
    key_sha256: [{sha("key-meter")}]
    limits: {{output_tokens_per_min: 6000}}
"""


class Redis(RedisServer):
    """The shared redis-server, plus what these tests read from it."""

    def held_total(self):
        """Units every replica holds in Redis (the sum of all sluice:held:* hashes)."""
        total = 0
        for key in self.cli("--scan", "--pattern", "sluice:held:*").split():
            vals = self.cli("HVALS", key).split()
            total += sum(int(v) for v in vals)
        return total


def redis_yaml(url, on_error="open", extra=""):
    return f"redis: {{url: {url}, on_error: {on_error}, timeout_ms: 200{extra}}}\n"


def chat(port, key, timeout=30):
    """One non-streaming request; returns (status, headers, completion tokens from the engine's usage)."""
    body = json.dumps({"model": MODEL, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": "hi"}]})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/chat/completions", body=body,
                  headers={"content-type": "application/json", "authorization": f"Bearer {key}"})
        r = c.getresponse()
        data = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        tokens = 0
        if r.status == 200:
            tokens = json.loads(data).get("usage", {}).get("completion_tokens", 0)
        return r.status, hdrs, tokens, data
    finally:
        c.close()


def offer(ports, key, seconds, threads_per_port=4):
    """Closed-loop load on every port; returns (accepted completion tokens, statuses, elapsed)."""
    stop = threading.Event()
    lock = threading.Lock()
    out = {"tokens": 0, "status": {}}

    def loop(port):
        while not stop.is_set():
            try:
                st, _, tok, _ = chat(port, key)
            except OSError as e:
                st, tok = type(e).__name__, 0
            with lock:
                out["tokens"] += tok
                out["status"][st] = out["status"].get(st, 0) + 1
            if st != 200:
                time.sleep(0.02)

    ts = [threading.Thread(target=loop, args=(p,), daemon=True) for p in ports for _ in range(threads_per_port)]
    t0 = time.time()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join(timeout=60)
    return out["tokens"], out["status"], time.time() - t0


class SharedBudgets(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.redis = Redis()
        cls.sim, cls.sim_ports = start_sim(SLUICE, 2, "--time-scale", "20", "--frontend-overhead-ms", "1")
        cls.gws = []
        try:
            for _ in range(3):
                cls.gws.append(start_gateway(SLUICE, cls.sim_ports, cls.tmp.name,
                                             extra_yaml=TENANTS + redis_yaml(f"unix://{cls.redis.sock}")))
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for gw, _, _ in cls.gws:
            gw.stop()
        cls.sim.stop()
        cls.redis.stop()
        cls.tmp.cleanup()

    def test_1_budget_holds_across_replicas_vs_local_buckets(self):
        ports = [p for _, p, _ in self.gws]
        secs = 5.0 * SCALE
        light = {"status": {}}

        def light_loop():
            end = time.time() + secs
            while time.time() < end:
                st, _, _, _ = chat(ports[len(light["status"]) % 3], "key-light")
                light["status"][st] = light["status"].get(st, 0) + 1
                time.sleep(0.1)

        lt = threading.Thread(target=light_loop, daemon=True)
        lt.start()
        shared, st_shared, el = offer(ports, "key-heavy", secs)
        lt.join(timeout=60)
        allowance = B + B * el / 60.0
        # The same load against 3 replicas with local buckets (no redis:).
        local_gws = [start_gateway(SLUICE, self.sim_ports, self.tmp.name, extra_yaml=TENANTS) for _ in range(3)]
        try:
            local, st_local, el_l = offer([p for _, p, _ in local_gws], "key-heavy", secs)
        finally:
            for gw, _, _ in local_gws:
                gw.stop()
        print(f"\n  heavy tenant, budget {B} output tokens/min, 3 replicas, {el:.1f} s: GCRA allowance "
              f"{allowance:.0f}; shared (Redis) accepted {shared} ({shared / allowance:.2f}x) statuses {st_shared}; "
              f"local buckets accepted {local} ({local / (B + B * el_l / 60.0):.2f}x) statuses {st_local}; "
              f"light tenant statuses {light['status']}", flush=True)
        self.assertLessEqual(shared, allowance * 1.05)
        self.assertGreaterEqual(shared, allowance * 0.8)
        # The overshoot of local buckets needs the load to reach 3x the budget: the sanitized gateways
        # (several times slower) cannot offer that much, so the comparison is checked in Release only;
        # the shared bound above holds in every build.
        if not os.environ.get("SLUICE_SANITIZED"):
            self.assertGreaterEqual(local, 2.2 * shared)
        self.assertEqual(set(light["status"]), {200}, light)
        self.assertEqual(set(st_shared) - {200, 429}, set())
        m = admin_metrics(self.gws[0][2])
        self.assertGreater(metric(m, "sluice_shared_budget_reservations_total", path="lease") or 0, 0)
        self.assertGreater(metric(m, "sluice_shared_budget_reservations_total", path="redis") or 0, 0)
        self.assertEqual(metric(m, "sluice_redis_up"), 1)

    def test_2_remaining_falls_when_spent_from_another_replica(self):
        # Tenant meter: 6000 output tokens/min (refills 100/s), lease slices of 300 per replica.
        (_, p0, _), (_, p1, _) = self.gws[0], self.gws[1]
        _, h, _, _ = chat(p1, "key-meter")
        before, t0 = int(h["x-ratelimit-remaining-tokens"]), time.time()
        for _ in range(30):  # 1500 tokens spent through replica 0
            self.assertEqual(chat(p0, "key-meter")[0], 200)
        time.sleep(1.2)  # replica 1's view is older than lease.refresh (1 s) now
        chat(p1, "key-meter")  # served from its lease; marks the bucket for a refresh
        time.sleep(0.5)  # the next sync reads the shared state
        _, h, _, _ = chat(p1, "key-meter")
        after, elapsed = int(h["x-ratelimit-remaining-tokens"]), time.time() - t0
        print(f"\n  meter tenant remaining seen on replica 1: {before} -> {after} after 30 x 50 tokens on replica 0 "
              f"in {elapsed:.1f} s", flush=True)
        # Replica 0 spent 1500; the bucket refilled 100/s meanwhile (the sanitized gateways take
        # several times longer), and up to a lease slice (300) may sit unsynced. Without the shared
        # state replica 1 would see its own 100 tokens spent at most (the bucket is nearly full).
        self.assertLess(elapsed, 11, "too slow for the drop to tell shared from local state")
        self.assertGreater(before - after, 1500 - 100 * elapsed - 400)

    def test_3_held_units_return_to_zero_when_idle(self):
        deadline = time.time() + 6 * SCALE
        held = None
        while time.time() < deadline:
            held = self.redis.held_total()
            if held == 0:
                break
            time.sleep(0.2)
        self.assertEqual(held, 0)
        for _, _, admin in self.gws:
            self.assertEqual(metric(admin_metrics(admin), "sluice_shared_budget_held_units"), 0)

    def test_4_kill_and_restart_redis_fail_open(self):
        ports = [p for _, p, _ in self.gws]
        res = {}
        t = threading.Thread(target=lambda: res.update(zip(("tok", "st", "el"), offer(ports, "key-heavy", 4 * SCALE, 2))))
        t.start()
        time.sleep(1.0 * SCALE)
        self.redis.kill()
        time.sleep(1.0 * SCALE)
        self.redis.start()  # empty, same socket
        t.join(timeout=60)
        print(f"\n  redis killed and restarted mid-run: accepted {res['tok']} statuses {res['st']}", flush=True)
        self.assertEqual(set(res["st"]) - {200, 429}, set(), res["st"])
        # Overshoot bound with fail-open: the allowance + one bucket per restart (lease_policy.h).
        self.assertLessEqual(res["tok"], (2 * B + B * res["el"] / 60.0) * 1.05)
        m = admin_metrics(self.gws[0][2])
        self.assertGreaterEqual(metric(m, "sluice_redis_down_total") or 0, 1)
        deadline = time.time() + 5 * SCALE
        while time.time() < deadline and metric(admin_metrics(self.gws[0][2]), "sluice_redis_up") != 1:
            time.sleep(0.1)
        self.assertEqual(metric(admin_metrics(self.gws[0][2]), "sluice_redis_up"), 1)
        self.assertEqual(chat(ports[0], "key-light")[0], 200)
        deadline = time.time() + 6 * SCALE
        while time.time() < deadline and self.redis.held_total() != 0:
            time.sleep(0.2)
        self.assertEqual(self.redis.held_total(), 0)


class Garbage(unittest.TestCase):
    """A peer that answers every byte with garbage; on_error: closed."""

    def test_fail_closed_on_garbage_replies(self):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        port = srv.getsockname()[1]
        stop = threading.Event()

        def serve():
            srv.settimeout(0.2)
            while not stop.is_set():
                try:
                    c, _ = srv.accept()
                except OSError:
                    continue
                try:
                    c.settimeout(1)
                    c.recv(65536)
                    c.sendall(b"?this is not RESP\r\n\x00\xff*-3\r\n")
                except OSError:
                    pass
                finally:
                    c.close()

        threading.Thread(target=serve, daemon=True).start()
        tmp = tempfile.TemporaryDirectory()
        sim, sim_ports = start_sim(SLUICE, 1, "--time-scale", "20")
        gw = None
        try:
            gw, gport, admin = start_gateway(SLUICE, sim_ports, tmp.name,
                                             extra_yaml=TENANTS + redis_yaml(f"redis://127.0.0.1:{port}", "closed"))
            statuses = {}
            for _ in range(10):
                st, h, _, data = chat(gport, "key-light", timeout=10)
                statuses[st] = statuses.get(st, 0) + 1
                if st == 429:
                    self.assertIn(b"rate_limit_unavailable", data)
                    self.assertIn("retry-after", h)
            self.assertEqual(statuses, {429: 10})
            m = admin_metrics(admin)
            self.assertGreaterEqual(metric(m, "sluice_redis_errors_total", kind="protocol") or 0, 1)
            self.assertEqual(metric(m, "sluice_redis_up"), 0)
            self.assertIsNone(gw.p.poll())
        finally:
            stop.set()
            if gw:
                gw.stop()
            sim.stop()
            srv.close()
            tmp.cleanup()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    if not shutil.which("redis-server"):
        print("redis-server is not installed (scripts/install-deps.sh)")
        sys.exit(1)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
