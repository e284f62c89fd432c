"""The engine's token ids for the prefix lookup (issue 15, item 3), real processes over loopback:
- `sluice sim` serves vLLM's render routes with its own template and tokenizer (the ids /tokenize
  gives; completions: one object per prompt in an array), and refuses bad bodies as vLLM does;
- a gateway pool with `token_ids: {source: render}` in front of two replicas that publish KV
  events with a tokenizer the gateway's estimate cannot predict (`--tokenizer foreign`, as a real
  tokenizer): a prompt served by one replica is found in the event index through the render's
  ids (/debug/pick: token_ids_source render, cached tokens on that replica), the second identical
  body is answered by the cache, and requests through the gateway count ok / cache_hit;
- an engine that answers render with garbage, a 500 or too slowly falls back to the estimate
  (which finds nothing here) and the request still succeeds, in less than the slow answer's delay;
  an engine without the render routes (404) is not asked again for a while;
- a client that leaves during the render call cancels it.
Standard library only."""
import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest

import sluice_fleet as fleet

SLUICE = None
SLOW = 3 if os.environ.get("SLUICE_SANITIZED") == "1" else 1
KV_CFG = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*",
          "replay_endpoint": "tcp://127.0.0.1:*", "topic": "kv@sim@m"}
TIMEOUT_MS = 300 * SLOW          # the pool's render deadline
SLOW_RENDER_MS = 3000 * SLOW     # the "slow" fault's delay, well past it
PROMPT = "The sluice render test: the engine's own token ids find its cached blocks. " * 10


def chat(prompt, **extra):
    return json.dumps(dict({"model": fleet.MODEL, "max_tokens": 4,
                            "messages": [{"role": "user", "content": prompt}]}, **extra))


class Render(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.procs = []
        sim = fleet.Proc([SLUICE, "sim", "--replicas", "2", "--base-port", "0", "--seed", "7", "--output-len", "4",
                          "--tokenizer", "foreign", "--kv-events-config", json.dumps(KV_CFG)], "sim")
        cls.procs.append(sim)
        cls.ports, kv = [], []
        deadline = time.time() + 30
        while len(kv) < 2 and time.time() < deadline:
            line = sim.p.stdout.readline()
            if not line:
                break
            if "listening on" in line:
                cls.ports.append(int(line.rsplit(":", 1)[1]))
            elif "kv events on" in line:
                parts = line.split()
                kv.append((parts[5], parts[7]))
        if len(kv) < 2:
            cls.tearDownClass()
            raise RuntimeError("sim did not report its addresses: " + "".join(sim.err[-10:]))
        threading.Thread(target=lambda: [None for _ in sim.p.stdout], daemon=True).start()
        cls.listen, cls.admin = fleet.free_port(), fleet.free_port()
        eps = "\n".join(f"      - {{address: 127.0.0.1:{p}, name: replica-{i}, kv_events: '{k[0]}', kv_events_replay: '{k[1]}'}}"
                        for i, (p, k) in enumerate(zip(cls.ports, kv)))
        cfg = os.path.join(cls.tmp.name, "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(f"""listen: 127.0.0.1:{cls.listen}
admin: 127.0.0.1:{cls.admin}
workers: 2
pools:
  - name: chat
    kind: chat
    endpoints:
{eps}
    scrape: {{interval_ms: 50, stale_after_ms: 500}}
    kv_events: {{stale_after_ms: 5000}}
    token_ids: {{source: render, timeout_ms: {TIMEOUT_MS}, cache_entries: 64}}
models:
  - {{name: {fleet.MODEL}, pool: chat}}
""")
        gw = fleet.Proc([SLUICE, "serve", "-c", cfg, "--access-log", "off", "--log-level", "warn"], "serve")
        cls.procs.append(gw)
        cls.gw = gw
        up = fleet.wait_for(lambda: gw.p.poll() is not None or cls._metrics_ok(), 30)
        if not up or gw.p.poll() is not None:
            err = "".join(gw.err[-10:])
            cls.tearDownClass()
            raise RuntimeError("gateway did not start: " + err)
        connected = fleet.wait_for(lambda: all(cls.m("sluice_kv_events_connected", endpoint=f"replica-{i}") == 1 for i in range(2)), 10)
        if not connected:
            cls.tearDownClass()
            raise RuntimeError("the gateway did not subscribe to the events")

    @classmethod
    def tearDownClass(cls):
        for p in reversed(cls.procs):
            p.stop()
        cls.tmp.cleanup()

    @classmethod
    def _metrics_ok(cls):
        try:
            return fleet.http_req(cls.admin, "GET", "/metrics")[0] == 200
        except OSError:
            return False

    @classmethod
    def m(cls, name, **labels):
        return fleet.metric(fleet.admin_metrics(cls.admin), name, **labels)

    def outcome(self, o):
        return self.m("sluice_render_requests_total", pool="chat", outcome=o) or 0

    def faults(self, body):
        for p in self.ports:
            status, raw = fleet.http_req(p, "POST", "/admin/faults", json.dumps(body))
            self.assertEqual(status, 200, raw)

    def serve_directly(self, replica, prompt):
        """A prompt served by one replica behind the gateway's back: the gateway learns it from the events only."""
        before = self.m("sluice_kv_index_blocks", endpoint=f"replica-{replica}") or 0
        status, raw = fleet.http_req(self.ports[replica], "POST", "/v1/chat/completions", chat(prompt), 30)
        self.assertEqual(status, 200, raw)
        self.assertTrue(fleet.wait_for(lambda: (self.m("sluice_kv_index_blocks", endpoint=f"replica-{replica}") or 0) > before, 5))

    def explain(self, body):
        status, raw = fleet.http_req(self.admin, "POST", "/debug/pick", body, 30)
        self.assertEqual(status, 200, raw)
        out = json.loads(raw)
        return out, {c["endpoint"]: c["predicted_cached_tokens"] for c in out["candidates"]}

    # ---- the simulator's render routes ----
    def test_sim_render_routes(self):
        port = self.ports[0]
        body = chat("hello render", max_tokens=7, stream=True)
        status, raw = fleet.http_req(port, "POST", "/v1/chat/completions/render", body)
        self.assertEqual(status, 200, raw)
        obj = json.loads(raw)
        for key in ("request_id", "token_ids", "sampling_params", "model"):
            self.assertIn(key, obj)
        self.assertEqual(obj["model"], fleet.MODEL)
        self.assertEqual(obj["sampling_params"]["max_tokens"], 7)
        # The ids are the replica's own tokenizer's, as /tokenize (and the KV events) have them.
        status, raw = fleet.http_req(port, "POST", "/tokenize", json.dumps(
            {"model": fleet.MODEL, "messages": [{"role": "user", "content": "hello render"}]}))
        self.assertEqual(status, 200, raw)
        self.assertEqual(obj["token_ids"], json.loads(raw)["tokens"])
        # Completions: an array, one object per prompt.
        status, raw = fleet.http_req(port, "POST", "/v1/completions/render",
                                     json.dumps({"model": fleet.MODEL, "prompt": "abcdefgh"}))
        self.assertEqual(status, 200, raw)
        arr = json.loads(raw)
        self.assertIsInstance(arr, list)
        self.assertEqual(len(arr), 1)
        self.assertEqual(len(arr[0]["token_ids"]), 2)  # 4 bytes per token
        status, raw = fleet.http_req(port, "POST", "/v1/completions/render",
                                     json.dumps({"model": fleet.MODEL, "prompt": ["abcd", "efghijkl"]}))
        self.assertEqual([len(o["token_ids"]) for o in json.loads(raw)], [1, 2])
        status, raw = fleet.http_req(port, "POST", "/v1/completions/render",
                                     json.dumps({"model": fleet.MODEL, "prompt": [5, 6, 7]}))
        self.assertEqual(json.loads(raw)[0]["token_ids"], [5, 6, 7])  # given ids come back as given
        # Bad bodies: vLLM-style errors.
        for path, bad, want in (("/v1/chat/completions/render", "{not json", 400),
                                ("/v1/chat/completions/render", json.dumps({"model": fleet.MODEL}), 400),
                                ("/v1/completions/render", json.dumps({"model": fleet.MODEL, "prompt": {"x": 1}}), 400),
                                ("/v1/chat/completions/render", chat("x", model="no-such-model"), 404)):
            status, raw = fleet.http_req(port, "POST", path, bad)
            self.assertEqual(status, want, raw)
            err = json.loads(raw)["error"]
            self.assertTrue(err["message"])
            self.assertEqual(err["code"], want)

    # ---- the gateway: render, cache, fallbacks ----
    def test_render_finds_the_blocks_and_the_cache_answers_again(self):
        self.faults({"reset": True})
        prompt = "[found] " + PROMPT
        self.serve_directly(0, prompt)
        full = 16 * ((len(prompt) // 4) // 16 - 1)
        ok0, hit0 = self.outcome("ok"), self.outcome("cache_hit")
        out, pred = self.explain(chat(prompt))
        self.assertEqual(out["token_ids_source"], "render", out)
        self.assertGreaterEqual(pred["replica-0"], full, out)  # the events, looked up by the engine's ids
        self.assertEqual(pred["replica-1"], 0, out)
        self.assertEqual(self.outcome("ok"), ok0 + 1)
        # The same prompt again, other sampling fields: the cache, the same prediction.
        out2, pred2 = self.explain(chat(prompt, temperature=0.2, stream=True))
        self.assertEqual(out2["token_ids_source"], "cache", out2)
        self.assertEqual(pred2["replica-0"], pred["replica-0"])
        self.assertEqual(self.outcome("cache_hit"), hit0 + 1)
        # Through the gateway: served, counted as a cache hit; a new body is rendered, then cached.
        status, raw = fleet.http_req(self.listen, "POST", "/v1/chat/completions", chat(prompt), 30)
        self.assertEqual(status, 200, raw)
        self.assertEqual(self.outcome("cache_hit"), hit0 + 2)
        fresh = chat("[fresh] " + PROMPT)
        for _ in range(2):
            status, raw = fleet.http_req(self.listen, "POST", "/v1/chat/completions", fresh, 30)
            self.assertEqual(status, 200, raw)
        self.assertEqual(self.outcome("ok"), ok0 + 2)
        self.assertEqual(self.outcome("cache_hit"), hit0 + 3)
        self.assertGreater(self.m("sluice_render_cache_entries", pool="chat"), 0)
        self.assertGreater(self.m("sluice_render_cache_hit_ratio", pool="chat"), 0)
        self.assertGreater(self.m("sluice_render_cache_tokens", pool="chat"), 0)
        self.assertGreater(self.m("sluice_render_duration_seconds_count", pool="chat"), 0)

    def test_faulty_render_falls_back_to_the_estimate(self):
        try:
            for fault, counted, tag in (("garbage", "error", "g"), ("error", "error", "e"), ("slow", "timeout", "s")):
                self.faults({"reset": True, "render": fault, "render_delay_ms": SLOW_RENDER_MS})
                prompt = f"[{tag}] " + PROMPT
                self.serve_directly(1, prompt)
                before = self.outcome(counted)
                out, pred = self.explain(chat(prompt))
                self.assertEqual(out["token_ids_source"], "estimate", out)
                self.assertTrue(out["render_error"], out)
                # The estimate does not know this engine's tokenizer: the blocks are not found.
                self.assertEqual(pred["replica-1"], 0, (fault, out))
                self.assertEqual(self.outcome(counted), before + 1, fault)
                # Through the gateway the request succeeds, without waiting for a slow render.
                t0 = time.time()
                status, raw = fleet.http_req(self.listen, "POST", "/v1/chat/completions", chat(f"[{tag}2] " + PROMPT), 30)
                self.assertEqual(status, 200, (fault, raw))
                self.assertLess(time.time() - t0, SLOW_RENDER_MS / 1000.0, fault)
                self.assertEqual(self.outcome(counted), before + 2, fault)
            self.assertIsNone(self.gw.p.poll())
        finally:
            self.faults({"reset": True})

    def test_client_leaving_cancels_the_render_call(self):
        try:
            self.faults({"reset": True, "render": "slow", "render_delay_ms": SLOW_RENDER_MS})
            before = self.outcome("cancelled")
            body = chat("[gone] " + PROMPT).encode()
            s = socket.create_connection(("127.0.0.1", self.listen), timeout=5)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(0.05 * SLOW)  # inside the render call (its deadline is TIMEOUT_MS)
            s.close()
            self.assertTrue(fleet.wait_for(lambda: self.outcome("cancelled") == before + 1, 2),
                            fleet.admin_metrics(self.admin))
        finally:
            self.faults({"reset": True})

    # Named to run last (unittest orders by name): the pool stops asking for 30 s.
    def test_without_a_render_route_the_engines_are_not_asked_again(self):
        try:
            self.faults({"reset": True, "render": "missing"})
            calls = self.m("sluice_render_duration_seconds_count", pool="chat")
            before = self.outcome("error")
            out, _ = self.explain(chat("[missing] " + PROMPT))
            self.assertEqual(out["token_ids_source"], "estimate", out)
            self.assertIn("404", out["render_error"])
            self.assertEqual(self.m("sluice_render_duration_seconds_count", pool="chat"), calls + 1)
            # Not asked again: estimated at once, counted, and the requests still succeed.
            out, _ = self.explain(chat("[missing2] " + PROMPT))
            self.assertIn("no render route", out["render_error"])
            status, raw = fleet.http_req(self.listen, "POST", "/v1/chat/completions", chat("[missing3] " + PROMPT), 30)
            self.assertEqual(status, 200, raw)
            self.assertEqual(self.m("sluice_render_duration_seconds_count", pool="chat"), calls + 1)
            self.assertEqual(self.outcome("error"), before + 3)
        finally:
            self.faults({"reset": True})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = args.sluice
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
