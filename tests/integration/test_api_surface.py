"""The API surface clients call, through a real gateway in front of real `sluice sim` replicas
(issue 18): the Responses API (streaming and not, typed events relayed in order, usage, the alias
rewritten both ways), previous_response_id routed to the replica that stored the response (100 of
100 with 4 replicas; a clear error, not a hang, once that replica is gone), GET /v1/models/{id} with
slashed and percent-encoded ids, n > 1 (n choices, n indexed streams, usage and budgets counting
all of them), vLLM's extra routes (/tokenize, /detokenize, /v1/rerank, /rerank, /v2/rerank,
/v1/score) mapped to the pool of the body's model, HEAD without a body, the header-count limit.
Standard library only; loopback, ephemeral ports, bounded in time.

Run: python3 test_api_surface.py --sluice path/to/sluice"""
import argparse
import hashlib
import http.client
import json
import os
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_fleet import Proc, free_port, metric, start_sim  # noqa: E402

SLUICE = None
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ALIAS = "llama-3-8b"
EMBED = "BAAI/bge-reranker-v2-m3"
SLOW = 3 if os.environ.get("SLUICE_SANITIZED") == "1" else 1


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


def call(port, method, path, body=None, headers=None, timeout=15):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout * SLOW)
    try:
        h = {"content-type": "application/json"} if body is not None else {}
        h.update(headers or {})
        c.request(method, path, body=json.dumps(body) if isinstance(body, dict) else body, headers=h)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        c.close()


def sse_events(text):
    """[(event name, data)] of an event stream."""
    out = []
    for block in text.split("\n\n"):
        name, data = "", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if data:
            out.append((name, "\n".join(data)))
    return out


class ApiSurface(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.sim, cls.ports = start_sim(SLUICE, 4, "--time-scale", "20", "--output-len", "12",
                                       "--frontend-overhead-ms", "2")
        try:
            cls.esim, eports = start_sim(SLUICE, 1, "--profile", "embedding", "--model", EMBED,
                                         "--frontend-overhead-ms", "2")
        except Exception:
            cls.sim.stop()
            raise
        cls.listen, cls.admin = free_port(), free_port()
        eps = "\n".join(f"      - {{address: 127.0.0.1:{p}, name: replica-{i}}}" for i, p in enumerate(cls.ports))
        cfg = os.path.join(cls.tmp.name, "api.yaml")
        with open(cfg, "w") as f:
            f.write(f"""listen: 127.0.0.1:{cls.listen}
admin: 127.0.0.1:{cls.admin}
workers: 2
expose_routing_headers: true
limits: {{max_header_count: 40}}
pools:
  - name: chat
    kind: chat
    endpoints:
{eps}
    scrape: {{interval_ms: 50, stale_after_ms: 500}}
    health: {{interval_ms: 100, unhealthy_threshold: 1}}
  - name: pooling
    kind: embedding
    endpoints:
      - {{address: 127.0.0.1:{eports[0]}, name: embed-0}}
models:
  - {{name: {MODEL}, pool: chat}}
  - {{name: {ALIAS}, alias_of: {MODEL}}}
  - {{name: {EMBED}, pool: pooling}}
tenants:
  - name: open
    limits: {{requests_per_min: 1000000}}
  - name: tight
    key_sha256: [{sha("key-tight")}]
    limits: {{output_tokens_per_min: 40}}
  - name: metered
    key_sha256: [{sha("key-metered")}]
    limits: {{requests_per_min: 100000}}
admission: {{anonymous_tenant: open}}
""")
        cls.gw = Proc([SLUICE, "serve", "-c", cfg, "--access-log", "off", "--log-level", "warn"], "serve")
        deadline = time.time() + 30 * SLOW
        while time.time() < deadline:
            try:
                if call(cls.listen, "GET", "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            if cls.gw.p.poll() is not None:
                break
            time.sleep(0.1)
        err = "".join(cls.gw.err[-10:])
        cls.tearDownClass()
        raise RuntimeError("gateway did not become ready: " + err)

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.sim.stop()
        cls.esim.stop()
        cls.tmp.cleanup()

    def assert_error(self, body, code=None):
        err = json.loads(body)["error"]
        for k in ("message", "type", "param", "code"):
            self.assertIn(k, err)
        if code is not None:
            self.assertEqual(err["code"], code, body)
        return err

    # ---- the Responses API ----
    def test_responses_non_streaming_through_an_alias(self):
        s, h, b = call(self.listen, "POST", "/v1/responses",
                       {"model": ALIAS, "input": "Hello there", "instructions": "Be brief.", "max_output_tokens": 6})
        self.assertEqual(s, 200, b)
        r = json.loads(b)
        self.assertEqual(r["object"], "response")
        self.assertTrue(r["id"].startswith("resp_"))
        self.assertEqual(r["model"], ALIAS)  # the target rewritten back to the name the client used
        self.assertEqual(r["instructions"], "Be brief.")
        text = r["output"][0]["content"][0]["text"]
        self.assertGreater(len(text), 0)
        self.assertEqual(r["usage"]["output_tokens"], 6)
        self.assertGreater(r["usage"]["input_tokens"], 0)
        self.assertEqual(r["usage"]["total_tokens"], r["usage"]["input_tokens"] + 6)
        self.assertEqual(r["status"], "incomplete")  # stopped at max_output_tokens
        self.assertIn("x-sluice-endpoint", h)

    def test_responses_streaming_typed_events_in_order(self):
        s, h, b = call(self.listen, "POST", "/v1/responses",
                       {"model": ALIAS, "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
                        "stream": True, "max_output_tokens": 5})
        self.assertEqual(s, 200, b)
        self.assertTrue(h["content-type"].startswith("text/event-stream"))
        events = sse_events(b)
        names = [n for n, _ in events]
        self.assertEqual(names[:4], ["response.created", "response.in_progress", "response.output_item.added",
                                     "response.content_part.added"])
        self.assertEqual(names[-4:], ["response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"])
        datas = [json.loads(d) for _, d in events]
        self.assertEqual([d["sequence_number"] for d in datas], list(range(len(datas))))
        for n, d in zip(names, datas):
            self.assertEqual(d["type"], n)
        self.assertEqual(datas[0]["response"]["model"], ALIAS)
        self.assertEqual(datas[-1]["response"]["model"], ALIAS)
        deltas = "".join(d["delta"] for d in datas if d["type"] == "response.output_text.delta")
        self.assertEqual(names.count("response.output_text.delta"), 5)
        final = datas[-1]["response"]
        self.assertEqual(final["output"][0]["content"][0]["text"], deltas)
        self.assertEqual(final["usage"]["output_tokens"], 5)
        self.assertNotIn("[DONE]", b)

    def test_previous_response_id_lands_on_the_replica_that_stored_it(self):
        results = []

        def conversation(i):
            s, h, b = call(self.listen, "POST", "/v1/responses",
                           {"model": MODEL, "input": f"user {i} says hi", "max_output_tokens": 2})
            if s != 200:
                results.append(("first", s, b))
                return
            first = json.loads(b)["id"]
            s2, h2, b2 = call(self.listen, "POST", "/v1/responses",
                              {"model": MODEL, "input": "and again", "previous_response_id": first,
                               "max_output_tokens": 2})
            results.append(("follow-up", s2, h["x-sluice-endpoint"], h2.get("x-sluice-endpoint"),
                             json.loads(b2).get("previous_response_id") if s2 == 200 else b2))

        threads = []
        for i in range(100):
            t = threading.Thread(target=conversation, args=(i,))
            threads.append(t)
            t.start()
            if len(threads) >= 8:
                threads.pop(0).join()
        for t in threads:
            t.join()
        self.assertEqual(len(results), 100)
        same = sum(1 for r in results if r[0] == "follow-up" and r[1] == 200 and r[2] == r[3])
        spread = {r[2] for r in results if r[0] == "follow-up"}
        print(f"\n    previous_response_id: {same}/100 follow-ups on the storing replica; "
              f"first responses spread over {len(spread)} replicas")
        self.assertEqual(same, 100, [r for r in results if not (r[1] == 200 and r[2] == r[3])][:3])
        self.assertGreater(len(spread), 1)  # the test would pass trivially on one replica

    def test_zz_previous_response_on_a_dead_replica_is_a_clear_error(self):
        # (Named to run last: it kills a replica.)
        s, h, b = call(self.listen, "POST", "/v1/responses", {"model": MODEL, "input": "remember me",
                                                              "max_output_tokens": 2})
        self.assertEqual(s, 200, b)
        rid, endpoint = json.loads(b)["id"], h["x-sluice-endpoint"]
        port = self.ports[int(endpoint.rsplit("-", 1)[1])]
        call(port, "POST", "/admin/faults", {"exit": "replica"})
        for attempt in range(2):  # before and after the health checker noticed
            t0 = time.time()
            s, h, b = call(self.listen, "POST", "/v1/responses",
                           {"model": MODEL, "input": "still there?", "previous_response_id": rid})
            elapsed = time.time() - t0
            self.assertIn(s, (404, 502), b)
            err = self.assert_error(b)
            self.assertIn("previous_response_id", err["message"])
            self.assertEqual(err["param"], "previous_response_id")
            self.assertLess(elapsed, 3 * SLOW)
            time.sleep(0.5)
        self.assertEqual(s, 404, b)  # by now the replica is known unhealthy
        self.assertEqual(json.loads(b)["error"]["code"], "previous_response_unavailable")
        # An id the gateway never saw goes to some replica, which answers 404 itself.
        s, _, b = call(self.listen, "POST", "/v1/responses",
                       {"model": MODEL, "input": "x", "previous_response_id": "resp_unknown"})
        self.assertEqual(s, 404, b)
        self.assertIn("not found", self.assert_error(b)["message"])

    # ---- models ----
    def test_model_lookup(self):
        for path in (f"/v1/models/{MODEL}", "/v1/models/" + MODEL.replace("/", "%2F")):
            s, _, b = call(self.listen, "GET", path)
            self.assertEqual(s, 200, b)
            m = json.loads(b)
            self.assertEqual(m["id"], MODEL)
            self.assertEqual(m["object"], "model")
        s, _, b = call(self.listen, "GET", f"/v1/models/{ALIAS}")
        self.assertEqual(json.loads(b)["root"], MODEL)
        s, _, b = call(self.listen, "GET", "/v1/models/meta-llama/nope")
        self.assertEqual(s, 404)
        self.assertEqual(self.assert_error(b, "model_not_found")["param"], "model")
        s, _, _ = call(self.listen, "POST", f"/v1/models/{MODEL}", {})
        self.assertEqual(s, 405)

    def test_head_has_no_body(self):
        s, h, b = call(self.listen, "HEAD", "/v1/models")
        self.assertEqual(s, 200)
        self.assertEqual(b, "")
        self.assertGreater(int(h["content-length"]), 0)
        c = http.client.HTTPConnection("127.0.0.1", self.listen, timeout=5)
        try:  # the connection stays usable: no stray body bytes
            c.request("HEAD", "/healthz")
            r = c.getresponse()
            self.assertEqual(r.read(), b"")
            c.request("GET", "/healthz")
            r = c.getresponse()
            self.assertEqual(json.loads(r.read())["status"], "ok")
        finally:
            c.close()

    # ---- n > 1 ----
    def test_n_choices_and_usage(self):
        s, _, b = call(self.listen, "POST", "/v1/chat/completions",
                       {"model": MODEL, "n": 2, "max_tokens": 4, "messages": [{"role": "user", "content": "two please"}]})
        self.assertEqual(s, 200, b)
        r = json.loads(b)
        self.assertEqual([c["index"] for c in r["choices"]], [0, 1])
        self.assertEqual(r["usage"]["completion_tokens"], 8)
        s, _, b = call(self.listen, "POST", "/v1/completions",
                       {"model": MODEL, "n": 3, "max_tokens": 3, "prompt": "three", "stream": True,
                        "stream_options": {"include_usage": True}})
        self.assertEqual(s, 200, b)
        chunks = [json.loads(d) for _, d in sse_events(b) if d != "[DONE]"]
        by_index = {}
        for c in chunks:
            for ch in c["choices"]:
                by_index.setdefault(ch["index"], []).append(ch)
        self.assertEqual(sorted(by_index), [0, 1, 2])
        for i, chs in by_index.items():
            self.assertEqual(chs[-1]["finish_reason"], "length")
            self.assertEqual(sum(1 for ch in chs if ch["text"]), 3)
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], 9)

    def test_budgets_charge_n_completions_and_responses_usage(self):
        def charged():
            return metric(call(self.admin, "GET", "/metrics")[2], "sluice_tenant_tokens_total",
                          tenant="metered", direction="output") or 0

        def settle(expected):
            deadline = time.time() + 5 * SLOW
            while charged() < expected and time.time() < deadline:
                time.sleep(0.05)
            return charged()

        key = {"authorization": "Bearer key-metered"}
        before = charged()
        s, _, b = call(self.listen, "POST", "/v1/chat/completions",
                       {"model": MODEL, "n": 3, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}, key)
        self.assertEqual(s, 200, b)
        self.assertEqual(settle(before + 12), before + 12)  # n x the tokens
        s, _, b = call(self.listen, "POST", "/v1/responses",
                       {"model": MODEL, "input": "y", "max_output_tokens": 5, "stream": True}, key)
        self.assertEqual(s, 200, b)
        self.assertEqual(settle(before + 17), before + 17)  # the Responses API's usage
        # The reservation covers n completions: 40 output tokens/min, n=6 x 8 = 48 does not fit.
        tight = {"authorization": "Bearer key-tight"}
        s, _, b = call(self.listen, "POST", "/v1/chat/completions",
                       {"model": MODEL, "n": 6, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}, tight)
        self.assertEqual(s, 429, b)
        self.assert_error(b, "rate_limit_exceeded")
        s, _, b = call(self.listen, "POST", "/v1/chat/completions",
                       {"model": MODEL, "n": 4, "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}, tight)
        self.assertEqual(s, 200, b)

    # ---- vLLM's extra routes ----
    def test_extra_routes_map_to_the_pool_of_the_model(self):
        s, h, b = call(self.listen, "POST", "/tokenize", {"model": ALIAS, "prompt": "hello world!"})
        self.assertEqual(s, 200, b)
        t = json.loads(b)
        self.assertEqual(t["count"], 3)
        self.assertTrue(h["x-sluice-endpoint"].startswith("replica-"))
        s, _, b = call(self.listen, "POST", "/detokenize", {"model": MODEL, "tokens": t["tokens"]})
        self.assertEqual(s, 200, b)
        self.assertGreater(len(json.loads(b)["prompt"]), 0)
        s, h, b = call(self.listen, "POST", "/tokenize", {"model": EMBED, "prompt": "abcd"})
        self.assertEqual((s, h.get("x-sluice-endpoint")), (200, "embed-0"), b)
        for path in ("/v1/rerank", "/rerank", "/v2/rerank"):
            s, h, b = call(self.listen, "POST", path, {"model": EMBED, "query": "q", "documents": ["a", "b", "c"], "top_n": 2})
            self.assertEqual(s, 200, b)
            self.assertEqual(h["x-sluice-endpoint"], "embed-0")
            res = json.loads(b)["results"]
            self.assertEqual(len(res), 2)
            self.assertGreaterEqual(res[0]["relevance_score"], res[1]["relevance_score"])
        s, _, b = call(self.listen, "POST", "/v1/score", {"model": EMBED, "text_1": "q", "text_2": ["a", "b"]})
        self.assertEqual(s, 200, b)
        self.assertEqual([d["index"] for d in json.loads(b)["data"]], [0, 1])
        # vLLM's render routes (issue 15) go to the pool of the body's model too (whatever the
        # engine answers: this simulator does not serve them yet).
        for path, model, want in (("/v1/chat/completions/render", EMBED, "embed-0"), ("/v1/completions/render", MODEL, "replica-")):
            body = {"model": model, "messages": [{"role": "user", "content": "x"}]} if "chat" in path else {"model": model, "prompt": "x"}
            s, h, b = call(self.listen, "POST", path, body)
            self.assertTrue(h.get("x-sluice-endpoint", "").startswith(want), (path, s, h, b))
        # The wrong kind of pool: the same error as embeddings on a chat model.
        s, _, b = call(self.listen, "POST", "/v1/rerank", {"model": MODEL, "query": "q", "documents": ["a"]})
        self.assertEqual(s, 400, b)
        self.assert_error(b, "model_not_supported")
        s, _, b = call(self.listen, "POST", "/v1/responses", {"model": EMBED, "input": "x"})
        self.assertEqual(s, 400, b)
        self.assert_error(b, "model_not_supported")
        s, _, b = call(self.listen, "POST", "/v1/score", {"model": "nope", "text_1": "q", "text_2": "a"})
        self.assertEqual(s, 404, b)
        self.assert_error(b, "model_not_found")
        s, _, b = call(self.listen, "POST", "/v1/rerank", {"model": EMBED, "query": "q"})
        self.assertEqual(s, 400, b)
        self.assertEqual(self.assert_error(b)["param"], "documents")

    def test_header_count_limit(self):
        headers = {f"x-extra-{i}": "v" for i in range(60)}
        s, _, b = call(self.listen, "GET", "/healthz", headers=headers)
        self.assertEqual(s, 431, b)
        self.assert_error(b, "headers_too_large")
        s, _, _ = call(self.listen, "GET", "/healthz", headers={f"x-extra-{i}": "v" for i in range(10)})
        self.assertEqual(s, 200)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
