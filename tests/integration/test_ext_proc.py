"""The Endpoint Picker over Envoy ext_proc (issue 17), end to end: a real gateway (`sluice serve` with
`ext_proc:`) in front of real `sluice sim` replicas, and a Python gRPC client in Envoy's role
(ext_proc_client.py: stubs generated from the repository's protos at test time) that sends headers
and body chunks in FULL_DUPLEX_STREAMED, reads the picker's destination, forwards the request to that
replica itself and streams the response back through the ext_proc stream.

Covers: chat, completions and streaming routed (destination header == envoy.lb metadata, an ordered
fallback list of distinct pool endpoints, clear_route_cache); the alias rewritten in the body with a
corrected Content-Length and the response's model rewritten back; the subset hint honoured, and 503
with x-llm-d-request-dropped-reason when it leaves nothing; 401 for an unknown key; 429
rejected-saturated for a sheddable objective on a full pool, and for a request the sluice policy
sheds because every endpoint is too loaded to serve it within the SLO (over_slo); a stream reset mid-response releasing
the request's slot (outcome client_cancelled); usage settled (sluice_tenant_tokens_total); garbage
(an empty message, a response before the request, an unsupported body mode, non-gRPC bytes on the
port) counted and answered while other requests go on; the gRPC health services; the engine-reported
prefix hit rate of a shared-prefix workload through ext_proc within 5 points of the standalone
path's.

Run: /usr/bin/python3 test_ext_proc.py --sluice path/to/sluice (re-executes itself under
/usr/bin/python3 when started by another interpreter: grpcio comes from Debian)."""
import argparse
import hashlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
import unittest

if __name__ == "__main__":
    try:
        import grpc  # noqa: F401
    except ImportError:
        if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
        raise

import grpc  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ext_proc_client import Envoy  # noqa: E402
from sluice_fleet import Proc, admin_metrics, free_port, http_req, metric, start_sim  # noqa: E402

SLUICE = None
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SCALE = 3 if os.environ.get("SLUICE_SANITIZED") else 1


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()


def chat(model, text, stream=False, max_tokens=8, system=None):
    msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    return json.dumps({"model": model, "stream": stream, "max_tokens": max_tokens, "messages": msgs}).encode()


class ExtProc(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.sim, ports = start_sim(SLUICE, 5, "--time-scale", "20", "--output-len", "12")
        cls.chat_ports, cls.tiny_port, cls.strict_port = ports[:3], ports[3], ports[4]
        listen, admin = free_port(), free_port()
        eps = "\n".join(f"      - {{address: 127.0.0.1:{p}, name: replica-{i}}}" for i, p in enumerate(cls.chat_ports))
        cfg = os.path.join(cls.tmp.name, "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(f"""listen: 127.0.0.1:{listen}
admin: 127.0.0.1:{admin}
workers: 2
ext_proc:
  listen: 127.0.0.1:0
  threads: 2
  destinations: 3
  objectives: {{critical: 1, batch: -1}}
pools:
  - name: chat
    endpoints:
{eps}
    scrape: {{interval_ms: 50, stale_after_ms: 500}}
  - name: tiny
    endpoints: [127.0.0.1:{cls.tiny_port}]
    max_in_flight_per_endpoint: 1
    scrape: {{interval_ms: 50, stale_after_ms: 500}}
  - name: duo
    endpoints: [127.0.0.1:{cls.chat_ports[0]}, 127.0.0.1:{cls.chat_ports[1]}]
    max_in_flight_per_endpoint: 1
    scrape: {{interval_ms: 50, stale_after_ms: 500}}
  - name: strict
    endpoints: [127.0.0.1:{cls.strict_port}]
    policy: sluice
    policy_params: {{ttft_slo_ms: 150}}
    scrape: {{interval_ms: 50, stale_after_ms: 500}}
models:
  - {{name: {MODEL}, pool: chat}}
  - {{name: llama-3-8b, alias_of: {MODEL}}}
  - {{name: tiny-model, pool: tiny}}
  - {{name: strict-model, pool: strict}}
  - {{name: duo-model, pool: duo}}
tenants:
  - name: team
    key_sha256: [{sha("key-team")}]
  - name: guest
  - name: narrow
    key_sha256: [{sha("key-narrow")}]
    allowed_models: [llama-3-8b]
admission:
  anonymous_tenant: guest
  queue: {{ttl_ms: 300}}
""")
        cls.gw = Proc([SLUICE, "serve", "-c", cfg, "--access-log", "off", "--log-level", "info"], "serve")
        cls.port, cls.admin = listen, admin
        cls.grpc_port = None
        deadline = time.time() + 30
        while time.time() < deadline and cls.gw.p.poll() is None and cls.grpc_port is None:
            for line in list(cls.gw.err):
                if "ext_proc (Endpoint Picker) listening on grpc://" in line:
                    cls.grpc_port = int(line.strip().rsplit(":", 1)[1])
            time.sleep(0.1)
        ok = False
        while time.time() < deadline and cls.grpc_port and not ok:
            try:
                ok = http_req(admin, "GET", "/metrics")[0] == 200
            except OSError:
                time.sleep(0.2)
        if not ok:
            cls.gw.stop()
            cls.sim.stop()
            raise RuntimeError("gateway did not start: " + "".join(cls.gw.err[-10:]))
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.grpc_port}")
        cls.envoy = Envoy(cls.channel)
        cls.pool_addresses = {f"127.0.0.1:{p}" for p in cls.chat_ports}

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.gw.stop()
        cls.sim.stop()
        cls.tmp.cleanup()

    def metrics(self):
        return admin_metrics(self.admin)

    def inflight(self, pool, endpoint):
        return metric(self.metrics(), "sluice_endpoint_inflight_requests", pool=pool, endpoint=endpoint)

    def wait_metric(self, name, want, timeout=5, **labels):
        deadline = time.time() + timeout * SCALE
        v = None
        while time.time() < deadline:
            v = metric(self.metrics(), name, **labels) or 0
            if v == want:
                return v
            time.sleep(0.05)
        self.assertEqual(v, want, f"{name}{labels}")

    # ---- routed requests ----
    def test_chat_alias_rewrite_and_fallback_list(self):
        before = metric(self.metrics(), "sluice_requests_total", pool="chat", outcome="ok") or 0
        body = chat("llama-3-8b", "Hello through the picker")
        res = self.envoy.route_and_forward("/v1/chat/completions", body)
        self.assertIsNone(res.immediate)
        dests = res.destination.split(",")
        self.assertEqual(res.destination, res.metadata_destination)  # header and envoy.lb agree
        self.assertEqual(len(dests), 3)
        self.assertEqual(set(dests), self.pool_addresses)  # ordered fallback list of distinct pool endpoints
        self.assertTrue(res.clear_route_cache)
        # The alias is rewritten to its target, with the Content-Length of the new body.
        self.assertEqual(json.loads(res.body)["model"], MODEL)
        self.assertEqual(int(res.set_headers["content-length"]), len(res.body))
        self.assertNotEqual(len(res.body), len(body))
        self.assertEqual(res.upstream_status, 200)
        # The response names the model the client asked for; its length may change: no Content-Length.
        self.assertEqual(json.loads(res.response_body)["model"], "llama-3-8b")
        self.assertIn("content-length", res.response_removed)
        self.wait_metric("sluice_requests_total", before + 1, pool="chat", outcome="ok")

    def test_completions_streaming_and_usage_settled(self):
        m = self.metrics()
        before_out = metric(m, "sluice_tenant_tokens_total", tenant="team", direction="output") or 0
        body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 6, "stream": True}).encode()
        res = self.envoy.route_and_forward("/v1/completions", body, headers=[("authorization", "Bearer key-team")])
        self.assertIsNone(res.immediate)
        self.assertIn("authorization", res.removed)  # with tenants the key is the gateway's, never forwarded
        # include_usage was injected to settle; the usage-only chunk is stripped again for the client.
        self.assertTrue(json.loads(res.body)["stream_options"]["include_usage"])
        text = res.response_body.decode()
        self.assertIn("data: [DONE]", text)
        events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
        self.assertTrue(events and all(e.get("choices") for e in events), text[:500])
        self.wait_metric("sluice_tenant_tokens_total", before_out + 6, tenant="team", direction="output")

    def test_streaming_chat_ttft(self):
        m = self.metrics()
        before = metric(m, "sluice_ttft_seconds_count", pool="chat") or 0
        # The picker's estimate for the endpoint it chose is compared with the TTFT the stream got.
        estimated = metric(m, "sluice_ttft_estimate_ratio_count", pool="chat") or 0
        res = self.envoy.route_and_forward("/v1/chat/completions", chat(MODEL, "stream please", stream=True))
        self.assertEqual(res.upstream_status, 200)
        self.assertGreater(res.response_body.count(b"data: {"), 3)
        self.assertIn(b"data: [DONE]", res.response_body)
        self.wait_metric("sluice_ttft_seconds_count", before + 1, pool="chat")
        self.wait_metric("sluice_ttft_estimate_ratio_count", estimated + 1, pool="chat")

    def test_subset_hint(self):
        one = f"127.0.0.1:{self.chat_ports[1]}"
        res, send, responses, call = self.envoy.decide("/v1/chat/completions", chat(MODEL, "subset"), subset=[one])
        self.assertEqual(res.destination, one)
        call.cancel()
        res, send, responses, call = self.envoy.decide("/v1/chat/completions", chat(MODEL, "subset"),
                                                       subset=[f"127.0.0.1:{self.chat_ports[0]},127.0.0.1:{self.chat_ports[2]}"])
        self.assertEqual(set(res.destination.split(",")), {f"127.0.0.1:{self.chat_ports[0]}", f"127.0.0.1:{self.chat_ports[2]}"})
        call.cancel()
        res, send, responses, call = self.envoy.decide("/v1/chat/completions", chat(MODEL, "subset"), subset=["10.9.9.9:80"])
        status, headers, body = res.immediate
        self.assertEqual(status, 503)
        self.assertEqual(headers["x-llm-d-request-dropped-reason"], "rejected-no-endpoints")
        self.assertEqual(json.loads(body)["error"]["code"], "no_endpoint")
        send(None)

    def test_subset_at_the_cap_is_refused_not_placed_over_it(self):
        # The duo pool: two endpoints, one request each. One held on the first; a subset hint naming
        # only that one cannot be placed there (admission counts the pool's room, the second's):
        # 503 with a Retry-After, and the first stays at one in flight. Without the hint: the second.
        a, b = (f"127.0.0.1:{p}" for p in self.chat_ports[:2])
        inflight = lambda addr: self.inflight("duo", addr)
        res, _, _, held = self.envoy.decide("/v1/chat/completions", chat("duo-model", "hold", max_tokens=4), subset=[a])
        try:
            self.assertIsNone(res.immediate)
            self.assertEqual(res.destination, a)
            self.assertEqual(inflight(a), 1)
            res, send, _, _ = self.envoy.decide("/v1/chat/completions", chat("duo-model", "over"), subset=[a])
            send(None)
            self.assertIsNotNone(res.immediate)
            status, headers, body = res.immediate
            self.assertEqual(status, 503, body)
            self.assertEqual(headers["x-llm-d-request-dropped-reason"], "rejected-no-endpoints")
            self.assertGreaterEqual(int(headers["retry-after"]), 1)
            self.assertIn("in-flight cap", json.loads(body)["error"]["message"])
            self.assertEqual(inflight(a), 1)
            self.assertEqual(inflight(b), 0)
            res, _, _, other = self.envoy.decide("/v1/chat/completions", chat("duo-model", "elsewhere", max_tokens=4))
            self.assertIsNone(res.immediate)
            self.assertEqual(res.destination.split(",")[0], b)
            other.cancel()
        finally:
            held.cancel()

    def test_unauthorized_and_unknown_model(self):
        res, send, _, _ = self.envoy.decide("/v1/chat/completions", chat(MODEL, "hi"), headers=[("authorization", "Bearer nope")])
        send(None)
        self.assertEqual(res.immediate[0], 401)
        self.assertEqual(json.loads(res.immediate[2])["error"]["code"], "invalid_api_key")
        res, send, _, _ = self.envoy.decide("/v1/chat/completions", chat("no-such-model", "hi"))
        send(None)
        self.assertEqual(res.immediate[0], 404)
        unknown = res.immediate[2]
        # A model outside the tenant's allowed_models: the unknown model's answer, word for word.
        res, send, _, _ = self.envoy.decide("/v1/chat/completions", chat("tiny-model", "hi"),
                                            headers=[("authorization", "Bearer key-narrow")])
        send(None)
        self.assertEqual(res.immediate[0], 404)
        self.assertEqual(res.immediate[2].replace(b"tiny-model", b"no-such-model"), unknown)
        self.wait_metric("sluice_rejects_total", 1, reason="model_not_allowed", tenant="narrow")

    def test_shed_then_reset_releases(self):
        tiny = f'endpoint="127.0.0.1:{self.tiny_port}"'
        # Hold the only slot of the tiny pool: decided and dispatched, response started, never finished.
        res, send, responses, call = self.envoy.decide("/v1/chat/completions", chat("tiny-model", "hold", max_tokens=4))
        self.assertEqual(res.destination, f"127.0.0.1:{self.tiny_port}")
        m = self.envoy.pb2.ProcessingRequest()
        m.response_headers.headers.headers.add(key=":status", raw_value=b"200")
        m.response_headers.headers.headers.add(key="content-type", raw_value=b"text/event-stream")
        send(m)
        self.assertEqual(next(responses).WhichOneof("response"), "response_headers")
        m = self.envoy.pb2.ProcessingRequest()
        m.response_body.body = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
        send(m)
        next(responses)
        self.assertIn(tiny, [l for l in self.metrics().splitlines() if l.startswith("sluice_endpoint_inflight_requests")
                             and l.endswith(" 1")][0])
        # A sheddable objective on the full pool: 429 with the protocol's reason.
        res2, send2, _, _ = self.envoy.decide("/v1/chat/completions", chat("tiny-model", "shed me"),
                                              headers=[("x-llm-d-inference-objective", "batch")])
        send2(None)
        self.assertEqual(res2.immediate[0], 429)
        self.assertEqual(res2.immediate[1]["x-llm-d-request-dropped-reason"], "rejected-saturated")
        # A request waiting in the gateway queue whose stream ends: it leaves the queue at once.
        queued_before = metric(self.metrics(), "sluice_cancellations_total", phase="queued") or 0
        send4, responses4, call4 = self.envoy.open()
        send4(self.envoy._headers_msg([(":method", "POST"), (":path", "/v1/chat/completions")], eos=False))
        m = self.envoy.pb2.ProcessingRequest()
        m.request_body.body = chat("tiny-model", "queued")
        m.request_body.end_of_stream = True
        send4(m)
        time.sleep(0.1)
        call4.cancel()
        self.wait_metric("sluice_cancellations_total", queued_before + 1, phase="queued")
        before = metric(self.metrics(), "sluice_requests_total", pool="tiny", outcome="client_cancelled") or 0
        call.cancel()  # the client reset mid-stream
        self.wait_metric("sluice_requests_total", before + 1, pool="tiny", outcome="client_cancelled")
        deadline = time.time() + 5
        while time.time() < deadline:
            line = [l for l in self.metrics().splitlines() if l.startswith("sluice_endpoint_inflight_requests") and tiny in l][0]
            if line.endswith(" 0"):
                break
            time.sleep(0.05)
        self.assertTrue(line.endswith(" 0"), line)
        # The slot is free again: the next request is routed (the old-name objective header works too).
        res3, send3, _, call3 = self.envoy.decide("/v1/chat/completions", chat("tiny-model", "after"),
                                                  headers=[("x-gateway-inference-objective", "critical")])
        self.assertIsNone(res3.immediate)
        self.assertEqual(res3.destination, f"127.0.0.1:{self.tiny_port}")
        call3.cancel()

    def test_over_slo_is_refused_with_the_protocols_reason(self):
        # A ~4,000-token prompt decided and held on the strict pool's one replica (~100 ms of prefill
        # by the cost model, within the 150 ms TTFT SLO alone): a second one would see its first
        # token after ~200 ms, past the SLO: the sluice policy sheds it (429 over_slo).
        text = lambda i: f"{i} " + "route the tokens to the replica that holds them " * 330
        held = []
        try:
            res, _, _, call = self.envoy.decide("/v1/chat/completions", chat("strict-model", text(0)))
            held.append(call)
            self.assertIsNone(res.immediate, res.immediate)
            self.assertEqual(res.destination, f"127.0.0.1:{self.strict_port}")
            # The admin listener's explanation says so before any request is refused.
            status, raw = http_req(self.admin, "POST", "/debug/pick", chat("strict-model", text(8)).decode())
            self.assertEqual(status, 200, raw)
            self.assertTrue(json.loads(raw)["shed"], raw)
            res, send, _, _ = self.envoy.decide("/v1/chat/completions", chat("strict-model", text(9)))
            send(None)
            self.assertIsNotNone(res.immediate)
            status, headers, body = res.immediate
            self.assertEqual(status, 429, body)
            self.assertEqual(headers["x-llm-d-request-dropped-reason"], "rejected-saturated")
            # When it would meet the SLO: the held prefill's ~50 ms past it (at least one engine step).
            self.assertGreaterEqual(int(headers["retry-after-ms"]), 7)
            self.assertLess(int(headers["retry-after-ms"]), 1000)
            self.assertEqual(json.loads(body)["error"]["code"], "over_slo")
            self.assertGreaterEqual(metric(self.metrics(), "sluice_rejects_total", pool="strict", reason="over_slo") or 0, 1)
        finally:
            for call in held:
                call.cancel()

    def test_served_endpoint_moves_the_accounting(self):
        res, send, responses, call = self.envoy.decide("/v1/chat/completions", chat(MODEL, "fallback", max_tokens=4))
        first, second = res.destination.split(",")[:2]
        def inflight(addr):
            return self.inflight("chat", f"replica-{self.chat_ports.index(int(addr.rsplit(':', 1)[1]))}")
        self.assertEqual(inflight(first), 1)
        m = self.envoy.pb2.ProcessingRequest()  # the proxy's first try failed: it served from the second
        m.response_headers.headers.headers.add(key=":status", raw_value=b"200")
        m.metadata_context.filter_metadata["envoy.lb"].update({"x-gateway-destination-endpoint-served": second})
        send(m)
        next(responses)
        self.assertEqual(inflight(first), 0)
        self.assertEqual(inflight(second), 1)
        call.cancel()
        deadline = time.time() + 5
        while time.time() < deadline and inflight(second) != 0:
            time.sleep(0.05)
        self.assertEqual(inflight(second), 0)

    # ---- bad clients ----
    def test_garbage_is_counted_and_answered(self):
        before = metric(self.metrics(), "sluice_ext_proc_bad_messages_total") or 0
        pb2 = self.envoy.pb2
        cases = [([pb2.ProcessingRequest()], grpc.StatusCode.INVALID_ARGUMENT)]
        early = pb2.ProcessingRequest()
        early.response_headers.headers.headers.add(key=":status", raw_value=b"200")
        cases.append(([early], grpc.StatusCode.INVALID_ARGUMENT))
        buffered = self.envoy._headers_msg([(":path", "/v1/chat/completions")], eos=False)
        buffered.protocol_config.request_body_mode = self.envoy.pm.ProcessingMode.BUFFERED
        cases.append(([buffered], grpc.StatusCode.UNIMPLEMENTED))
        for msgs, code in cases:
            call = self.envoy.stub.Process(iter(msgs))
            with self.assertRaises(grpc.RpcError) as cm:
                for _ in call:
                    pass
            self.assertEqual(cm.exception.code(), code)
        # Not gRPC at all.
        with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + os.urandom(512))
            s.settimeout(2)
            try:
                s.recv(100)
            except OSError:
                pass
        # Aborted mid-body: the stream ends before the decision.
        send, responses, call = self.envoy.open()
        send(self.envoy._headers_msg([(":method", "POST"), (":path", "/v1/chat/completions")], eos=False))
        m = pb2.ProcessingRequest()
        m.request_body.body = b'{"model": "'
        send(m)
        time.sleep(0.05)
        call.cancel()
        self.wait_metric("sluice_ext_proc_bad_messages_total", before + 3)
        res = self.envoy.route_and_forward("/v1/chat/completions", chat(MODEL, "still alive"))
        self.assertEqual(res.upstream_status, 200)
        self.assertIsNone(self.gw.p.poll())

    def test_health(self):
        check = self.channel.unary_unary("/grpc.health.v1.Health/Check")
        for service in ["", "liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"]:
            name = service.encode()
            req = (b"\x0a" + bytes([len(name)]) + name) if name else b""
            self.assertEqual(check(req, timeout=5), b"\x08\x01", service)  # status: SERVING
        with self.assertRaises(grpc.RpcError) as cm:
            check(b"\x0a\x05other", timeout=5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)
        watch = self.channel.unary_stream("/grpc.health.v1.Health/Watch")
        stream = watch(b"\x0a\x08liveness", timeout=5)
        self.assertEqual(next(stream), b"\x08\x01")  # the status at once
        stream.cancel()
        self.assertEqual(next(watch(b"\x0a\x05other", timeout=5)), b"\x08\x03")  # SERVICE_UNKNOWN
        with self.assertRaises(grpc.RpcError) as cm:
            self.channel.unary_unary("/no.such.Service/Method")(b"", timeout=5)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    # ---- the same picker: prefix affinity through ext_proc matches the standalone path ----
    def test_prefix_hit_rate_matches_standalone(self):
        def workload(tag):
            reqs = []
            for g in range(6):
                system = f"[{tag}-{g}] You are the assistant of support desk {g}; follow the runbook exactly. " * 40
                for u in range(5):
                    reqs.append(chat(MODEL, f"user {u} asks about item {g * 7 + u}", max_tokens=2, system=system))
            return reqs

        def rate(usages):
            prompt = sum(u["prompt_tokens"] for u in usages)
            cached = sum(u.get("prompt_tokens_details", {}).get("cached_tokens", 0) for u in usages)
            return cached / prompt

        via_ext_proc = []
        for body in workload("ext"):
            res = self.envoy.route_and_forward("/v1/chat/completions", body)
            via_ext_proc.append(json.loads(res.response_body)["usage"])
        standalone = []
        for body in workload("std"):
            status, raw = http_req(self.port, "POST", "/v1/chat/completions", body, timeout=30)
            self.assertEqual(status, 200)
            standalone.append(json.loads(raw)["usage"])
        a, b = rate(via_ext_proc), rate(standalone)
        print(f"prefix hit rate: ext_proc {a:.3f}, standalone {b:.3f}", file=sys.stderr)
        self.assertGreater(b, 0.5)
        self.assertLessEqual(abs(a - b), 0.05)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
