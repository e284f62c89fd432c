"""Integration tests of the admission layer in the live gateway: `sluice sim` replicas + `sluice serve -c`
with `tenants:` / `admission:` on loopback ephemeral ports. Standard library only, bounded in time.

Covers: 401 for a missing/unknown key; 429 with OpenAI's body, Retry-After and x-ratelimit-* when a token
budget is exhausted; "request too large" refused at once; x-ratelimit-* on success; a client that leaves
the queue (depth back to 0, cancellations{phase="queued"}); sheddable refused while critical queues when
saturated; a stream cut by the client is charged only what it received (sluice_tenant_tokens_total);
noisy neighbour: light tenant's TTFT p99 and token share with and without a 10x noisy tenant (figures
printed).

Run: python3 test_admission.py --sluice path/to/sluice"""
import argparse
import hashlib
import http.client
import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_fleet import Proc, metric, start_gateway as fleet_start_gateway, start_sim as fleet_start_sim  # noqa: E402

SLUICE = None
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


def start_sim(replicas, *args):
    return fleet_start_sim(SLUICE, replicas, *args)


def start_gateway(tmpdir, sim_ports, tenants_yaml, admission_yaml="", max_in_flight=256):
    return fleet_start_gateway(SLUICE, sim_ports, tmpdir, max_in_flight_per_endpoint=max_in_flight,
                               extra_yaml=f"tenants:\n{tenants_yaml}\n{admission_yaml}")


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode()
    finally:
        c.close()


def body(content="hello", max_tokens=8, stream=False, **extra):
    b = {"model": MODEL, "messages": [{"role": "user", "content": content}], "stream": stream}
    if max_tokens is not None:
        b["max_tokens"] = max_tokens
    b.update(extra)
    return json.dumps(b)


def post(port, data, key=None, headers=None, timeout=30):
    """Returns (status, headers dict lower-case, body bytes)."""
    h = {"content-type": "application/json"}
    if key is not None:
        h["authorization"] = f"Bearer {key}"
    h.update(headers or {})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", "/v1/chat/completions", body=data, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def raw_request(port, data, key):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer {key}\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data.encode())
    return s


def stream_ttft(port, key, content, max_tokens):
    """One streaming request; returns (status, ttft seconds or None, token events)."""
    t0 = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", "/v1/chat/completions", body=body(content, max_tokens, stream=True),
                  headers={"content-type": "application/json", "authorization": f"Bearer {key}"})
        r = c.getresponse()
        if r.status != 200:
            r.read()
            return r.status, None, 0
        ttft, events = None, 0
        for line in r:
            if line.startswith(b"data: {") and b'"content"' in line and b'"content":""' not in line:
                events += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
        return 200, ttft, events
    finally:
        c.close()


def p50(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else float("nan")


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else float("nan")


class BudgetsAndAuth(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.sim, ports = start_sim(1, "--time-scale", "20", "--output-len", "50")
        tenants = f"""  - name: tiny
    key_sha256: [{sha("key-tiny")}]
    limits: {{input_tokens_per_min: 400}}
  - name: roomy
    key_sha256: [{sha("key-roomy")}]
    limits: {{requests_per_min: 100000}}"""
        try:
            cls.gw, cls.port, cls.admin = start_gateway(cls.tmp.name, ports, tenants,
                                                        "admission: {default_max_output_tokens: 5}")
        except Exception:
            cls.sim.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.sim.stop()
        cls.tmp.cleanup()

    def test_default_output_bound_injected(self):
        # The sim would write 50 tokens; the gateway reserves and injects max_tokens = 5.
        s, h, b = post(self.port, body(max_tokens=None), key="key-roomy")
        self.assertEqual(s, 200, b)
        self.assertEqual(json.loads(b)["usage"]["completion_tokens"], 5)
        s, h, b = post(self.port, body(max_tokens=9), key="key-roomy")
        self.assertEqual(json.loads(b)["usage"]["completion_tokens"], 9)

    def stream_lines(self, **extra):
        s, h, b = post(self.port, body(max_tokens=6, stream=True, **extra), key="key-roomy")
        self.assertEqual(s, 200, b)
        self.assertIn("x-ratelimit-limit-requests", h)
        return [l for l in b.decode().split("\n") if l.startswith("data: ")]

    def test_stream_usage_requested_internally_and_stripped(self):
        m0 = get(self.admin, "/metrics")[1]
        lines = self.stream_lines()
        self.assertEqual(lines[-1], "data: [DONE]")
        self.assertFalse([l for l in lines if '"usage":{' in l], lines)  # the client did not ask for usage
        # Settlement runs on the gateway's completion path, just after the last byte reached us.
        deadline = time.time() + 3
        while True:
            m1 = get(self.admin, "/metrics")[1]
            charged = (metric(m1, "sluice_tenant_tokens_total", tenant="roomy", direction="output") or 0) - \
                      (metric(m0, "sluice_tenant_tokens_total", tenant="roomy", direction="output") or 0)
            if charged == 6 or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(charged, 6)  # settled with the engine's usage, not the reserved bound
        lines = self.stream_lines(stream_options={"include_usage": True})
        usage = [json.loads(l[6:]) for l in lines if '"choices":[]' in l]
        self.assertEqual(len(usage), 1)
        self.assertEqual(usage[0]["usage"]["completion_tokens"], 6)

    def assert_openai_error(self, raw, code=None):
        err = json.loads(raw)["error"]
        self.assertIn("message", err)
        self.assertIn("type", err)
        if code:
            self.assertEqual(err["code"], code)
        return err

    def test_missing_and_unknown_key_401(self):
        s, h, b = post(self.port, body())
        self.assertEqual(s, 401)
        self.assert_openai_error(b, "missing_api_key")
        s, h, b = post(self.port, body(), key="not-a-key")
        self.assertEqual(s, 401)
        err = self.assert_openai_error(b, "invalid_api_key")
        self.assertNotIn("not-a-key", err["message"])

    def test_success_carries_ratelimit_headers(self):
        s, h, b = post(self.port, body(), key="key-roomy")
        self.assertEqual(s, 200, b)
        self.assertIn("x-ratelimit-limit-requests", h)
        self.assertIn("x-ratelimit-remaining-requests", h)
        self.assertIn("x-ratelimit-reset-requests", h)

    def test_token_budget_exhausted_429_then_too_large(self):
        prompt = "word " * 240  # ~300 estimated input tokens of a 400/min bucket
        s, h, b = post(self.port, body(prompt), key="key-tiny")
        self.assertEqual(s, 200, b)
        self.assertIn("x-ratelimit-remaining-tokens", h)
        s, h, b = post(self.port, body(prompt), key="key-tiny")
        self.assertEqual(s, 429, b)
        err = self.assert_openai_error(b, "rate_limit_exceeded")
        self.assertIn("Limit 400", err["message"])
        self.assertIn("retry-after", h)
        self.assertIn("retry-after-ms", h)
        self.assertGreaterEqual(int(h["retry-after-ms"]), 1)
        self.assertIn("x-ratelimit-limit-tokens", h)
        # Alone larger than the bucket: refused at once, no retry.
        t0 = time.time()
        s, h, b = post(self.port, body("word " * 2000), key="key-tiny")
        self.assertLess(time.time() - t0, 2.0)
        self.assertEqual(s, 429, b)
        self.assert_openai_error(b, "rate_limit_exceeded")
        self.assertEqual(h.get("x-should-retry"), "false")
        # The completion path records the reject just after the response is written: poll for it.
        deadline = time.time() + 5
        while True:
            m = get(self.admin, "/metrics")[1]
            if (metric(m, "sluice_rejects_total", reason="too_large") or 0) >= 1 or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertGreaterEqual(metric(m, "sluice_rejects_total", reason="rate_limit") or 0, 1)
        self.assertGreaterEqual(metric(m, "sluice_rejects_total", reason="too_large") or 0, 1)
        self.assertGreaterEqual(metric(m, "sluice_rejects_total", reason="unauthorized") or 0, 0)
        self.assertGreaterEqual(metric(m, "sluice_admitted_total", pool="chat") or 0, 1)  # the first request went


class KeyNotForwarded(unittest.TestCase):
    """The bearer key authenticates at the gateway and never reaches the model server."""

    def test_authorization_stripped_upstream(self):
        tmp = tempfile.TemporaryDirectory()
        here = os.path.dirname(os.path.abspath(__file__))
        up = Proc([sys.executable, os.path.join(here, "fake_upstream.py")], "fake")
        gw = None
        try:
            line = up.p.stdout.readline()
            self.assertTrue(line.startswith("PORT "), line)
            up_port = int(line.split()[1])
            gw, port, admin = start_gateway(tmp.name, [up_port], f"""  - name: acme
    key_sha256: [{sha("secret-key-123")}]""")
            s, h, b = post(port, body(), key="secret-key-123", headers={"x-sluice-priority": "-1"})
            self.assertEqual(s, 200, b)
            s, log = get(up_port, "/_log")
            recs = json.loads(log)
            self.assertTrue(recs)
            headers = {k.lower(): v for k, v in recs[-1]["headers"].items()}
            self.assertNotIn("authorization", headers)
            self.assertNotIn("x-sluice-priority", headers)
            self.assertNotIn("secret-key-123", log)
        finally:
            if gw:
                gw.stop()
            up.stop()
            tmp.cleanup()


class Saturation(unittest.TestCase):
    """One replica, one request in flight at a time: everything else waits in the gateway's queue."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.sim, ports = start_sim(1, "--time-scale", "1")
        cls.sim_port = ports[0]
        tenants = f"""  - name: crit
    key_sha256: [{sha("key-crit")}]
    priority: 1
  - name: batch
    key_sha256: [{sha("key-batch")}]
    priority: -1
  - name: slow
    key_sha256: [{sha("key-slow")}]
    priority: 0"""
        admission = 'admission: {queue: {ttl_ms_by_priority: {"0": 300}}}'
        try:
            cls.gw, cls.port, cls.admin = start_gateway(cls.tmp.name, ports, tenants, admission, max_in_flight=1)
        except Exception:
            cls.sim.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.sim.stop()
        cls.tmp.cleanup()

    def occupy(self, max_tokens=150):
        """A critical stream that holds the only slot for a while (raw socket; returns it)."""
        s = raw_request(self.port, body("hold the slot", max_tokens, stream=True), "key-crit")
        s.recv(1)  # the response has started: the slot is taken
        return s

    def wait_metric(self, name, want, timeout=5, **labels):
        deadline = time.time() + timeout
        v = None
        while time.time() < deadline:
            v = metric(get(self.admin, "/metrics")[1], name, **labels) or 0
            if v == want:
                return v
            time.sleep(0.02)
        return v

    def test_sheddable_shed_critical_queued(self):
        holder = self.occupy()
        try:
            t0 = time.time()
            s, h, b = post(self.port, body("batch job"), key="key-batch")
            self.assertEqual(s, 429, b)
            self.assertLess(time.time() - t0, 1.0)
            self.assertEqual(json.loads(b)["error"]["code"], "shed")
            self.assertIn("retry-after-ms", h)
            result = {}
            th = threading.Thread(target=lambda: result.update(r=post(self.port, body("urgent", 4), key="key-crit")))
            th.start()
            self.assertEqual(self.wait_metric("sluice_queue_depth", 1, pool="chat", priority="1"), 1)
        finally:
            holder.close()
        th.join(20)
        self.assertEqual(result["r"][0], 200)
        self.assertEqual(self.wait_metric("sluice_queue_depth", 0, pool="chat"), 0)

    def test_queue_timeout_503(self):
        holder = self.occupy()
        try:
            t0 = time.time()
            s, h, b = post(self.port, body("patient", 4), key="key-slow")
            waited = time.time() - t0
        finally:
            holder.close()
        self.assertEqual(s, 503, b)
        self.assertEqual(json.loads(b)["error"]["code"], "queue_timeout")
        self.assertGreaterEqual(waited, 0.25)
        self.assertLess(waited, 3.0)
        self.assertIn("retry-after", h)
        self.assertGreaterEqual(int(h["retry-after-ms"]), 1000)
        self.assertEqual(self.wait_metric("sluice_queue_depth", 0, pool="chat"), 0)

    def test_client_leaving_the_queue(self):
        before = metric(get(self.admin, "/metrics")[1], "sluice_cancellations_total", phase="queued") or 0
        holder = self.occupy()
        try:
            q = raw_request(self.port, body("waiting", 4), "key-crit")
            self.assertEqual(self.wait_metric("sluice_queue_depth", 1, pool="chat"), 1)
            q.close()
            self.assertEqual(self.wait_metric("sluice_queue_depth", 0, pool="chat"), 0)
            self.assertEqual(self.wait_metric("sluice_cancellations_total", before + 1, phase="queued"), before + 1)
        finally:
            holder.close()
        m = get(self.admin, "/metrics")[1]
        deadline = time.time() + 5
        while metric(m, "sluice_reservations_outstanding") != 0 and time.time() < deadline:
            time.sleep(0.05)
            m = get(self.admin, "/metrics")[1]
        self.assertEqual(metric(m, "sluice_reservations_outstanding"), 0)

    def test_stream_cut_is_charged_what_was_delivered(self):
        m0 = get(self.admin, "/metrics")[1]
        out0 = metric(m0, "sluice_tenant_tokens_total", tenant="crit", direction="output") or 0
        e0 = get(self.sim_port, "/metrics")[1]
        gen0 = metric(e0, "vllm:generation_tokens_total") or 0
        abort0 = metric(e0, "vllm:request_success_total", finished_reason="abort") or 0
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("POST", "/v1/chat/completions", body=body("tell me a long story", 400, stream=True),
                  headers={"content-type": "application/json", "authorization": "Bearer key-crit"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        got = 0
        for line in r:
            # Tokens: the role chunk that opens the stream carries none (nor is it charged).
            if line.startswith(b"data: {") and b'"content"' in line and b'"role"' not in line:
                got += 1
                if got == 10:
                    break
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        deadline = time.time() + 5
        out = out0
        while time.time() < deadline:
            out = metric(get(self.admin, "/metrics")[1], "sluice_tenant_tokens_total", tenant="crit",
                         direction="output") or 0
            if out > out0:
                break
            time.sleep(0.05)
        charged = out - out0
        # The engine stopped at once: the request was aborted, having generated only a step or two
        # more than the client received (7.5 ms per step at time scale 1).
        deadline = time.time() + 5
        while time.time() < deadline:
            e1 = get(self.sim_port, "/metrics")[1]
            if (metric(e1, "vllm:request_success_total", finished_reason="abort") or 0) > abort0:
                break
            time.sleep(0.02)
        generated = (metric(e1, "vllm:generation_tokens_total") or 0) - gen0
        print(f"\n  stream cut after {got} token events: charged {charged:.0f} output tokens (bound 400); "
              f"the engine generated {generated:.0f} and aborted")
        self.assertEqual((metric(e1, "vllm:request_success_total", finished_reason="abort") or 0), abort0 + 1)
        self.assertLessEqual(generated, got + 5)
        self.assertGreaterEqual(charged, got)
        self.assertLess(charged, got + 30)


class NoisyNeighbour(unittest.TestCase):
    """Issue 5's acceptance: a noisy tenant sending ~10x the tokens of a light tenant at saturation leaves
    the light tenant's TTFT p99 within 1.5x of its solo run, and the light tenant gets the throughput it
    asks for (its demand is below its weight share). Run twice side by side: with the fair share of slots
    (fair_share.h, the default) and without it (VTC queue order only), to show what the reserve buys."""

    def scenario(self, fair_share):
        tmp = tempfile.TemporaryDirectory()
        sim, ports = start_sim(2, "--time-scale", "4")
        tenants = f"""  - name: light
    key_sha256: [{sha("key-light")}]
  - name: noisy
    key_sha256: [{sha("key-noisy")}]"""
        admission = "" if fair_share else "admission: {fair_share: {enabled: false}}"
        gw = None
        try:
            gw, port, admin = start_gateway(tmp.name, ports, tenants, admission, max_in_flight=4)
            light_prompt, light_out = "short question " * 8, 32

            def light_run(seconds):
                ttfts, tokens, stop = [], 0, time.time() + seconds
                while time.time() < stop:
                    s, t, ev = stream_ttft(port, "key-light", light_prompt, light_out)
                    if s == 200 and t is not None:
                        ttfts.append(t)
                        tokens += ev
                    time.sleep(0.05)
                return ttfts, tokens

            light_run(0.5)  # warm-up (connections, first scrape)
            solo, solo_tokens = light_run(4)
            stop = threading.Event()
            noisy_status = {}

            def noisy_loop():
                while not stop.is_set():
                    s, _, _ = stream_ttft(port, "key-noisy", "noisy prompt text " * 40, 128)
                    noisy_status[s] = noisy_status.get(s, 0) + 1

            threads = [threading.Thread(target=noisy_loop) for _ in range(24)]
            for t in threads:
                t.start()
            time.sleep(1.0)
            m0 = get(admin, "/metrics")[1]
            loaded, loaded_tokens = light_run(6)
            m1 = get(admin, "/metrics")[1]
            stop.set()
            for t in threads:
                t.join(60)
            tok = {}
            for tenant in ("light", "noisy"):
                tok[tenant] = sum((metric(m1, "sluice_tenant_tokens_total", tenant=tenant, direction=d) or 0) -
                                  (metric(m0, "sluice_tenant_tokens_total", tenant=tenant, direction=d) or 0)
                                  for d in ("input", "output"))
            return {"solo": solo, "loaded": loaded, "ratio": p99(loaded) / p99(solo), "tok": tok,
                    "solo_rate": solo_tokens / 4, "loaded_rate": loaded_tokens / 6, "noisy_status": noisy_status}
        finally:
            if gw:
                gw.stop()
            sim.stop()
            tmp.cleanup()

    def test_light_tenant_protected(self):
        runs = {"fair share on": self.scenario(True), "fair share off": self.scenario(False)}
        # The latency goal is a p99 over ~50 samples on a 2-core machine that CTest shares with another
        # test: one preempted sample decides it. A miss is measured once more and both runs are printed;
        # the goal holds if the second run meets it (a real lapse of the reserve fails both).
        def meets(r):
            return r["ratio"] <= 1.5 and r["loaded_rate"] > 0.85 * r["solo_rate"]
        if os.environ.get("SLUICE_SANITIZED") != "1" and not meets(runs["fair share on"]):
            runs["fair share on (first run, missed)"] = runs.pop("fair share on")
            runs["fair share on"] = self.scenario(True)
        print("\n  noisy neighbour (2 sim replicas, time scale 4, max_in_flight 4/endpoint, 24 noisy streams "
              "vs one light client):")
        for name, r in runs.items():
            tok = r["tok"]
            share = tok["light"] / (sum(tok.values()) or 1)
            print(f"    {name}: light TTFT p99 solo {p99(r['solo']) * 1000:.1f} ms ({len(r['solo'])} req), with noisy "
                  f"{p99(r['loaded']) * 1000:.1f} ms ({len(r['loaded'])} req): ratio {r['ratio']:.2f} (goal <= 1.5); "
                  f"p50 {p50(r['solo']) * 1000:.1f} -> {p50(r['loaded']) * 1000:.1f} ms"
                  f"\n      tokens charged: light {tok['light']:.0f}, noisy {tok['noisy']:.0f} "
                  f"(noisy/light {tok['noisy'] / max(tok['light'], 1):.1f}x), light share {share:.3f} of tokens "
                  f"(weight share 0.5; its demand is below it); light output {r['solo_rate']:.0f} tok/s solo, "
                  f"{r['loaded_rate']:.0f} with noisy ({r['loaded_rate'] / max(r['solo_rate'], 1):.0%}); "
                  f"noisy statuses {r['noisy_status']}")
        on, off = runs["fair share on"], runs["fair share off"]
        self.assertGreater(len(on["loaded"]), 10)
        self.assertGreater(on["tok"]["noisy"], 5 * on["tok"]["light"])  # the noisy tenant really was ~10x
        # The goal: within 1.5x of solo at p99, and the light tenant's demand met (below its weight share,
        # so all of it is owed: >= 85% of its solo throughput, the rest being the client's own TTFT).
        # Latency goals hold for the Release build; under the sanitizers (scripts/test-asan.sh sets
        # SLUICE_SANITIZED=1) the gateway is several times slower and the p99 ratio is noise.
        if os.environ.get("SLUICE_SANITIZED") != "1":
            self.assertLessEqual(on["ratio"], 1.5)
            self.assertGreater(on["loaded_rate"], 0.85 * on["solo_rate"])
        # In every build: no light request waited for a noisy stream to end (~240 ms at time scale 4),
        # which is what a lapse of the reserve looks like (it once did: the router frees a slot before
        # the ticket ends, and a noisy request took the light request's slot in between).
        # (0.1 s; 0.2 s under the sanitizers, still below one noisy stream's ~240 ms.)
        self.assertLess(p99(on["loaded"]), 0.2 if os.environ.get("SLUICE_SANITIZED") == "1" else 0.1)
        # Without the reserve the light request waits for a noisy stream to end.
        self.assertGreater(p50(off["loaded"]), p50(on["loaded"]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
