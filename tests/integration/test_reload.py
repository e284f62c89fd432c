"""SIGHUP live config reload (issue 6): `sluice serve -c` in front of `sluice sim` replicas on loopback.

A valid config becomes a new generation swapped in atomically: a stream started before the reload
completes on its old endpoint, new requests follow the new config (endpoints, an alias moved to a new
target, a new model), a keep-alive connection opened before the reload keeps working, an unchanged pool
keeps its runtime (its pick counters and scraped signals carry over), a changed pool keeps the prefix
affinity learned for the replicas it still has (scale-out by reload), unchanged tenants keep their
token budgets (a spent budget stays spent), changed tenants get a rebuilt admission layer. An invalid
config is refused with a log line naming the field and the running generation keeps serving.

Run: python3 tests/integration/test_reload.py --sluice build/sluice
"""
import argparse
import hashlib
import http.client
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_fleet import Proc, admin_metrics, free_port, metric, start_sim  # noqa: E402

SLUICE = None
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SMALL = "meta-llama/Llama-3.2-1B-Instruct"


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


def config_text(listen, admin, chat_ports, small_ports, alias_target=MODEL, extra_model="", extra_tenant=""):
    chat = "\n".join(f"      - {{address: 127.0.0.1:{p}, name: chat-{p}}}" for p in chat_ports)
    small = "\n".join(f"      - {{address: 127.0.0.1:{p}, name: small-{p}}}" for p in small_ports)
    return f"""listen: 127.0.0.1:{listen}
admin: 127.0.0.1:{admin}
workers: 2
expose_routing_headers: true
pools:
  - name: chat
    endpoints:
{chat}
    scrape: {{interval_ms: 50, stale_after_ms: 500}}
  - name: small
    endpoints:
{small}
    scrape: {{interval_ms: 50, stale_after_ms: 500}}
models:
  - {{name: {MODEL}, pool: chat}}
  - {{name: {SMALL}, pool: small}}
  - {{name: llama-latest, alias_of: {alias_target}}}
{extra_model}
tenants:
  - name: acme
    key_sha256: [{sha("key-acme")}]
  - name: meter
    key_sha256: [{sha("key-meter")}]
    limits: {{requests_per_min: 2}}
{extra_tenant}
admission:
  default_max_output_tokens: 64
"""


def request(conn, model, max_tokens=8, stream=False, key="key-acme"):
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hello there"}],
                       "max_tokens": max_tokens, "stream": stream})
    conn.request("POST", "/v1/chat/completions", body=body,
                 headers={"content-type": "application/json", "authorization": f"Bearer {key}"})
    r = conn.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


class Reload(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        # Replica ports: chat A, chat B, small S. Time scale 2: a 300-token stream lasts ~1 s.
        cls.sim, (cls.a, cls.b) = start_sim(SLUICE, 2, "--time-scale", "2")
        cls.sim_small, (cls.s,) = start_sim(SLUICE, 1, "--time-scale", "2", "--model", SMALL)
        cls.listen, cls.admin = free_port(), free_port()
        cls.path = os.path.join(cls.tmp.name, "sluice.yaml")
        cls.write(config_text(cls.listen, cls.admin, [cls.a], [cls.s]))
        cls.gw = Proc([SLUICE, "serve", "-c", cls.path, "--access-log", "off", "--log-level", "info"], "serve")
        deadline = time.time() + 30
        while time.time() < deadline and not any("listening on" in l for l in cls.gw.err):
            time.sleep(0.05)
        if not any("listening on" in l for l in cls.gw.err):
            cls.gw.stop()
            cls.sim.stop()
            cls.sim_small.stop()
            raise RuntimeError("sluice serve did not start: " + "".join(cls.gw.err[-10:]))

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.sim.stop()
        cls.sim_small.stop()
        cls.tmp.cleanup()

    @classmethod
    def write(cls, text):
        with open(cls.path + ".tmp", "w") as f:
            f.write(text)
        os.replace(cls.path + ".tmp", cls.path)

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.listen, timeout=timeout)

    def metrics(self):
        return admin_metrics(self.admin)

    def reload(self, text, expect):
        """SIGHUP with `text` as the config; returns the first new log line containing `expect`."""
        before = set(l for l in self.gw.err if "config reload" in l)
        self.write(text)
        self.gw.p.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline:
            hit = [l for l in list(self.gw.err) if "config reload" in l and expect in l and l not in before]
            if hit:
                return hit[-1]
            time.sleep(0.05)
        self.fail(f"no '{expect}' reload line; log tail: {''.join(self.gw.err[-10:])}")

    def test_reload_applies_live_without_dropping_anything(self):
        gen0 = metric(self.metrics(), "sluice_config_generation")
        # Before: chat on A; llama-latest -> MODEL (chat).
        keep = self.conn()
        s, h, b = request(keep, MODEL)
        self.assertEqual(s, 200, b)
        self.assertEqual(h["x-sluice-endpoint"], f"chat-{self.a}")
        s, h, _ = request(self.conn(), SMALL)
        self.assertEqual(s, 200)
        small_picks = metric(self.metrics(), "sluice_picks_total", pool="small", endpoint=f"small-{self.s}")
        self.assertGreaterEqual(small_picks, 1)
        # Spend the meter tenant's request budget (2 per minute).
        for _ in range(2):
            self.assertEqual(request(self.conn(), MODEL, max_tokens=2, key="key-meter")[0], 200)

        # A long stream in flight across the reload.
        result = {}

        def long_stream():
            c = self.conn(60)
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "tell a long story"}],
                               "max_tokens": 300, "stream": True})
            c.request("POST", "/v1/chat/completions", body=body,
                      headers={"content-type": "application/json", "authorization": "Bearer key-acme"})
            r = c.getresponse()
            result["endpoint"] = r.getheader("x-sluice-endpoint")
            data = r.read().decode()
            result["status"] = r.status
            result["done"] = data.rstrip().endswith("data: [DONE]")
            result["tokens"] = data.count('"content":"') - data.count('"content":""')
        t = threading.Thread(target=long_stream)
        t.start()
        time.sleep(0.3)

        # Invalid config: refused, naming the field; the current generation keeps serving.
        bad = config_text(self.listen, self.admin, [self.b], [self.s]).replace("name: small\n", "name: small\n    policy: nope\n")
        line = self.reload(bad, "refused")
        self.assertIn("pools[1].policy", line)
        self.assertEqual(metric(self.metrics(), "sluice_config_generation"), gen0)

        # Valid: chat moves to B, llama-latest moves to SMALL, a new model name appears; small and tenants unchanged.
        good = config_text(self.listen, self.admin, [self.b], [self.s], alias_target=SMALL,
                           extra_model=f"  - {{name: small-v2, alias_of: {SMALL}}}")
        line = self.reload(good, "applied")
        self.assertIn("pools kept [small]", line)
        self.assertIn("new or changed [chat]", line)
        self.assertIn("admission kept", line)
        self.assertEqual(metric(self.metrics(), "sluice_config_generation"), gen0 + 1)

        # The stream started before the reload ends complete, on its old endpoint.
        t.join(30)
        self.assertEqual(result.get("status"), 200, result)
        self.assertTrue(result.get("done"), result)
        self.assertEqual(result["endpoint"], f"chat-{self.a}")
        self.assertGreater(result["tokens"], 100)

        # The keep-alive connection opened before the reload still works, now routed by the new config.
        s, h, b = request(keep, MODEL, max_tokens=4)
        self.assertEqual(s, 200, b)
        self.assertEqual(h["x-sluice-endpoint"], f"chat-{self.b}")
        keep.close()
        # The alias moved: answered by the small pool, the response names the alias.
        s, h, b = request(self.conn(), "llama-latest", max_tokens=4)
        self.assertEqual(s, 200, b)
        self.assertEqual(h["x-sluice-endpoint"], f"small-{self.s}")
        self.assertEqual(json.loads(b)["model"], "llama-latest")
        # The new model name is served and listed.
        self.assertEqual(request(self.conn(), "small-v2", max_tokens=4)[0], 200)
        c = self.conn()
        c.request("GET", "/v1/models", headers={"authorization": "Bearer key-acme"})  # tenants: a key
        self.assertIn("small-v2", [m["id"] for m in json.loads(c.getresponse().read())["data"]])
        # The unchanged pool kept its runtime: its pick counter was not reset.
        m = self.metrics()
        self.assertGreater(metric(m, "sluice_picks_total", pool="small", endpoint=f"small-{self.s}"), small_picks)
        # Budgets carried over: the meter tenant's 2 requests/min are still spent.
        s, h, b = request(self.conn(), MODEL, max_tokens=2, key="key-meter")
        self.assertEqual(s, 429, b)
        self.assertEqual(json.loads(b)["error"]["code"], "rate_limit_exceeded")

        # Tenants changed: the admission layer is rebuilt (budgets start full).
        rebuilt = config_text(self.listen, self.admin, [self.b], [self.s], alias_target=SMALL,
                              extra_model=f"  - {{name: small-v2, alias_of: {SMALL}}}",
                              extra_tenant=f"  - name: beta\n    key_sha256: [{sha('key-beta')}]")
        line = self.reload(rebuilt, "applied")
        self.assertIn("admission rebuilt", line)
        self.assertIn("pools kept [chat,small]", line)
        self.assertEqual(request(self.conn(), MODEL, max_tokens=2, key="key-meter")[0], 200)
        self.assertEqual(request(self.conn(), MODEL, max_tokens=4, key="key-beta")[0], 200)

        # Scaling out (a replica added to a changed pool) keeps the cache affinity learned for the
        # replicas the pool still has: a long prompt learned on B is still predicted cached on B.
        doc = "a long shared document about sluice gateways. " * 120
        def send_doc(conn):
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": doc}], "max_tokens": 2})
            conn.request("POST", "/v1/chat/completions", body=body,
                         headers={"content-type": "application/json", "authorization": "Bearer key-acme"})
            r = conn.getresponse()
            r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}
        self.assertEqual(send_doc(self.conn())[0], 200)
        s, h = send_doc(self.conn())
        self.assertEqual(h["x-sluice-endpoint"], f"chat-{self.b}")
        self.assertGreater(int(h["x-sluice-predicted-cached-tokens"]), 0)
        scaled = config_text(self.listen, self.admin, [self.a, self.b], [self.s], alias_target=SMALL,
                             extra_model=f"  - {{name: small-v2, alias_of: {SMALL}}}",
                             extra_tenant=f"  - name: beta\n    key_sha256: [{sha('key-beta')}]")
        line = self.reload(scaled, "applied")
        self.assertIn("new or changed [chat]", line)
        self.assertTrue(any("learned of 1 endpoint(s) (prefix index, pace) carried over" in l for l in self.gw.err), self.gw.err[-5:])
        s, h = send_doc(self.conn())
        self.assertEqual(s, 200)
        self.assertEqual(h["x-sluice-endpoint"], f"chat-{self.b}")
        self.assertGreater(int(h["x-sluice-predicted-cached-tokens"]), 0)

        # Nothing leaked: in flight and reservations back to zero once everything ended.
        deadline = time.time() + 5
        while time.time() < deadline:
            m = self.metrics()
            inflight = sum(float(l.rsplit(" ", 1)[1]) for l in m.splitlines()
                           if l.startswith("sluice_endpoint_inflight_requests{"))
            if inflight == 0 and metric(m, "sluice_reservations_outstanding") == 0:
                break
            time.sleep(0.1)
        self.assertEqual(inflight, 0)
        self.assertEqual(metric(m, "sluice_reservations_outstanding"), 0)
        self.assertIsNone(self.gw.p.poll())


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
