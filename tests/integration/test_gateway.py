#!/usr/bin/env python3
"""Integration tests of the gateway's data path: `sluice serve` in front of fake_upstream.py, both on
loopback ephemeral ports. Byte-exact relaying (streaming and not), alias rewrite both ways,
x-request-id, client disconnect closing the upstream, every bad input, timeouts, retries, /v1/models,
admin /metrics, and graceful drain. Run: python3 test_gateway.py --sluice path/to/sluice"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway_harness import FakeUpstream, Gateway, body_of, parse_status, raw_exchange  # noqa: E402

SLUICE = None
TARGET = "meta/llama-3.1-8b-instruct"
ALIAS = "llama-3-8b"
EMBED = "bge-small"


def config(upstream_port, extra="", second_endpoint=None, workers=2):
    eps = f"127.0.0.1:{upstream_port}"
    if second_endpoint:
        eps = f"{second_endpoint}, {eps}"
    return f"""
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: {workers}
limits:
  max_body_bytes: 4096
  max_header_bytes: 1024
  header_timeout_ms: 600
timeouts:
  connect_ms: 500
  first_byte_ms: 1500
  idle_ms: 700
drain_timeout_ms: 5000
pools:
  - name: chat
    policy: round_robin
    endpoints: [{eps}]
  - name: embeddings
    kind: embedding
    policy: least_request
    endpoints: [127.0.0.1:{upstream_port}]
models:
  - name: {TARGET}
    pool: chat
  - name: {ALIAS}
    alias_of: {TARGET}
  - name: sql-lora
    adapter_of: {TARGET}
  - name: {EMBED}
    pool: embeddings
{extra}"""


def chat(model, stream=False, usage=False, content="hello"):
    body = {"model": model, "messages": [{"role": "user", "content": content}]}
    if stream:
        body["stream"] = True
    if usage:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body)


def direct(port, path, body, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("POST", path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class WithGateway(unittest.TestCase):
    """One gateway (config(), timeouts.idle_ms = idle_ms) in front of one fake_upstream.py per class."""
    idle_ms = 700

    @classmethod
    def setUpClass(cls):
        cls.up = FakeUpstream()
        try:
            cls.gw = Gateway(SLUICE, config(cls.up.port).replace("idle_ms: 700", f"idle_ms: {cls.idle_ms}"))
        except Exception:
            cls.up.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.up.stop()


class DataPath(WithGateway):

    def wait_record(self, rid, timeout=3):
        deadline = time.time() + timeout
        while time.time() < deadline:
            recs = [r for r in self.gw.access_records() if r["id"] == rid]
            if recs:
                return recs[0]
            time.sleep(0.05)
        return None

    def last_upstream(self):
        return self.up.log()[-1]

    # ---- relaying, byte for byte ----
    def test_non_streaming_byte_exact(self):
        for path, body in [("/v1/chat/completions", chat(TARGET)),
                           ("/v1/completions", json.dumps({"model": TARGET, "prompt": "once upon"})),
                           ("/v1/embeddings", json.dumps({"model": EMBED, "input": "hi"}))]:
            ds, dbody = direct(self.up.port, path, body)
            gs, headers, gbody = self.gw.request("POST", path, body)
            self.assertEqual((gs, gbody), (ds, dbody), path)
            self.assertEqual(headers["content-type"], "application/json")

    def test_streaming_byte_exact_across_splits_and_crlf(self):
        for hdrs in [{}, {"x-fake-split": "1"}, {"x-fake-crlf": "1", "x-fake-split": "1"}]:
            hdrs = dict(hdrs, **{"x-fake-tokens": "12"})
            ds, dbody = direct(self.up.port, "/v1/chat/completions", chat(TARGET, True, True), hdrs)
            gs, headers, gbody = self.gw.request("POST", "/v1/chat/completions", chat(TARGET, True, True), hdrs)
            self.assertEqual(gs, 200)
            self.assertEqual(gbody, dbody, hdrs)
            self.assertTrue(headers["content-type"].startswith("text/event-stream"))
            self.assertEqual(headers.get("transfer-encoding"), "chunked")
        rec = self.gw.access_records(min_count=1)[-1]
        self.assertEqual(rec["outcome"], "ok")
        self.assertEqual(rec["completion_tokens"], 12)
        self.assertEqual(rec["token_events"], 12)
        self.assertIsNotNone(rec["ttft_ms"])
        self.assertIsInstance(rec["predicted_cached_tokens"], int)  # a pick happened: the picker's figure, not null
        self.assertGreaterEqual(rec["predicted_cached_tokens"], 0)

    def test_stream_chunks_arrive_as_they_are_produced(self):
        # 5 chunks 300 ms apart: the first must arrive long before the last is produced.
        c = self.gw.conn()
        t0 = time.time()
        c.request("POST", "/v1/chat/completions", body=chat(TARGET, True),
                  headers={"x-fake-tokens": "5", "x-fake-token-delay-ms": "300"})
        r = c.getresponse()
        first = r.read1(65536)  # the first event
        t_first = time.time() - t0
        rest = r.read()
        t_all = time.time() - t0
        c.close()
        self.assertTrue(first.strip(), first)
        self.assertLess(t_first, 0.25)
        self.assertGreater(t_all, 1.2)
        self.assertIn(b"[DONE]", rest)

    # ---- alias rewrite, both directions ----
    def test_alias_rewrite_non_streaming(self):
        _, dbody = direct(self.up.port, "/v1/chat/completions", chat(TARGET))
        gs, _, gbody = self.gw.request("POST", "/v1/chat/completions", chat(ALIAS))
        self.assertEqual(gs, 200)
        self.assertEqual(self.last_upstream()["model"], TARGET, "the upstream must see the pinned target")
        self.assertEqual(json.loads(gbody)["model"], ALIAS, "the client must see the name it asked for")
        self.assertEqual(gbody, dbody.replace(f'"model":"{TARGET}"'.encode(), f'"model":"{ALIAS}"'.encode()))

    def test_alias_rewrite_streaming(self):
        hdrs = {"x-fake-split": "1", "x-fake-tokens": "6"}
        _, dbody = direct(self.up.port, "/v1/chat/completions", chat(TARGET, True, True), hdrs)
        gs, _, gbody = self.gw.request("POST", "/v1/chat/completions", chat(ALIAS, True, True), hdrs)
        self.assertEqual(gs, 200)
        self.assertEqual(self.last_upstream()["model"], TARGET)
        self.assertEqual(gbody, dbody.replace(f'"model":"{TARGET}"'.encode(), f'"model":"{ALIAS}"'.encode()))
        self.assertEqual(gbody.count(f'"model":"{ALIAS}"'.encode()), 7)

    def test_non_alias_body_forwarded_unchanged(self):
        body = '{"model": "sql-lora", "messages": [{"role": "user", "content": "x"}], "temperature": 0.5}'
        gs, _, _ = self.gw.request("POST", "/v1/chat/completions", body)
        self.assertEqual(gs, 200)
        self.assertEqual(self.last_upstream()["body"], body)

    def test_a_body_sent_apart_from_its_header_and_in_pieces_is_forwarded_whole(self):
        # The session reads a Content-Length body straight into the body string: the header alone
        # first (nothing of the body buffered), then pieces, each after a pause so that each is its
        # own read (this gateway's body limit is 4 KB; request_body_test covers the read-ahead).
        text = "".join(chr(97 + i % 26) for i in range(3_900))
        body = json.dumps({"model": "sql-lora", "messages": [{"role": "user", "content": text}]})
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        try:
            s.sendall((f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n").encode())
            data = body.encode()
            for piece in (data[:100], data[100:2000], data[2000:]):
                time.sleep(0.1)
                s.sendall(piece)
            reply = b""
            while b"\r\n\r\n" not in reply:
                chunk = s.recv(65536)
                self.assertTrue(chunk, reply)
                reply += chunk
            self.assertTrue(reply.startswith(b"HTTP/1.1 200"), reply[:200])
        finally:
            s.close()
        self.assertEqual(self.last_upstream()["body"], body)

    # ---- x-request-id ----
    def test_request_id_passthrough_and_generation(self):
        gs, headers, _ = self.gw.request("POST", "/v1/chat/completions", chat(TARGET), {"x-request-id": "abc-123"})
        self.assertEqual(headers["x-request-id"], "abc-123")
        self.assertEqual(self.last_upstream()["headers"]["x-request-id"], "abc-123")
        gs, headers, _ = self.gw.request("POST", "/v1/chat/completions", chat(TARGET))
        rid = headers["x-request-id"]
        self.assertRegex(rid, r"^[0-9a-f]{32}$")
        self.assertEqual(self.last_upstream()["headers"]["x-request-id"], rid)
        self.assertTrue(self.wait_record(rid), "the generated id must be in the access log")

    # ---- cancellation ----
    def test_client_disconnect_closes_upstream(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        body = chat(TARGET, True).encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"x-request-id: cancel-me\r\nx-fake-tokens: 400\r\nx-fake-token-delay-ms: 20\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while b"tok1" not in got:
            got += s.recv(4096)
        s.close()
        deadline = time.time() + 5
        rec = None
        while time.time() < deadline:
            rec = [r for r in self.up.log() if r["headers"].get("x-request-id") == "cancel-me"][0]
            if rec["disconnected"]:
                break
            time.sleep(0.05)
        self.assertTrue(rec["disconnected"], "the upstream connection must be closed when the client leaves")
        self.assertFalse(rec["completed"])
        self.assertEqual(self.wait_record("cancel-me")["outcome"], "client_cancelled")

    def test_client_leaving_before_the_first_byte_ends_the_request_at_once(self):
        # The disconnect watch starts once the request is written upstream (not before the send):
        # a client that leaves while the engine has not answered yet still ends the request (and
        # its upstream exchange) at once, not when the engine's first byte comes 3 s later. A first
        # request on the same client connection (so the same worker) leaves a pooled upstream
        # connection idle: the second one is then written at once, the path under test (with no
        # idle connection the watch starts before the connect instead).
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        body = chat(TARGET).encode()

        def send(rid, extra=b""):
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"x-request-id: " + rid + b"\r\n" + extra +
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)

        send(b"warm-up")
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(65536)
        head, rest = got.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(rest) < length:
            rest += s.recv(65536)
        send(b"leave-early", b"x-fake-first-byte-delay-ms: 3000\r\n")
        deadline = time.time() + 2
        ups = lambda rid: [r for r in self.up.log() if r["headers"].get("x-request-id") == rid]
        while time.time() < deadline and not ups("leave-early"):
            time.sleep(0.02)
        self.assertTrue(ups("leave-early"), "the request must have reached the upstream")
        self.assertEqual(ups("leave-early")[0]["conn"], ups("warm-up")[0]["conn"], "a pooled connection, written at once")
        s.close()
        left = time.time()
        rec = self.wait_record("leave-early", timeout=1.5)
        self.assertIsNotNone(rec, "the request must end at once when its client leaves, not at the first byte")
        self.assertLess(time.time() - left, 1.5)
        self.assertEqual(rec["outcome"], "client_cancelled")

    # ---- bad input: each a clear OpenAI error, the right status, nothing else affected ----
    def assert_error(self, status, headers, body, want_status, message_part=None):
        self.assertEqual(status, want_status, body)
        err = json.loads(body)["error"]
        self.assertEqual(set(err), {"message", "type", "param", "code"})
        if message_part:
            self.assertIn(message_part, err["message"])

    def test_malformed_json(self):
        self.assert_error(*self.gw.request("POST", "/v1/chat/completions", '{"model": "x", '), 400)

    def test_missing_model(self):
        self.assert_error(*self.gw.request("POST", "/v1/chat/completions", '{"messages":[{"role":"user","content":"x"}]}'),
                          400, "model")

    def test_unknown_model(self):
        self.assert_error(*self.gw.request("POST", "/v1/chat/completions", chat("nope")), 404,
                          "The model `nope` does not exist.")

    def test_wrong_method_and_unknown_path(self):
        s, h, b = self.gw.request("GET", "/v1/chat/completions")
        self.assert_error(s, h, b, 405)
        self.assertEqual(h["allow"], "POST")
        self.assert_error(*self.gw.request("POST", "/v1/models", "{}"), 405)
        self.assert_error(*self.gw.request("GET", "/v2/nothing"), 404)

    def test_invalid_utf8(self):
        body = b'{"model":"' + TARGET.encode() + b'","messages":[{"role":"user","content":"\xff\xfe"}]}'
        self.assert_error(*self.gw.request("POST", "/v1/chat/completions", body), 400, "UTF-8")

    def test_deeply_nested_json(self):
        body = '{"model":"%s","messages":[{"role":"user","content":"x"}],"x":%s%s}' % (TARGET, "[" * 1500, "]" * 1500)
        self.assert_error(*self.gw.request("POST", "/v1/chat/completions", body), 400, "nesting")

    def test_oversized_body(self):
        body = chat(TARGET, content="x" * 5000)
        self.assert_error(*self.gw.request("POST", "/v1/chat/completions", body), 413)
        # chunked, without a Content-Length
        raw = raw_exchange(self.gw.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                           + b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(6)) + b"0\r\n\r\n")
        self.assertEqual(parse_status(raw), 413)

    def test_headers_too_large_or_too_many(self):
        raw = raw_exchange(self.gw.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
        self.assertEqual(parse_status(raw), 431)
        self.assertIn(b'"error"', body_of(raw))
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
        raw = raw_exchange(self.gw.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        self.assertEqual(parse_status(raw), 431)

    def test_slow_headers(self):
        t0 = time.time()
        raw = raw_exchange(self.gw.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n", timeout=5)
        self.assertEqual(parse_status(raw), 408)
        self.assertLess(time.time() - t0, 3)

    def test_malformed_http(self):
        raw = raw_exchange(self.gw.port, b"THIS IS NOT HTTP\r\n\r\n")
        self.assertEqual(parse_status(raw), 400)

    def test_wrong_api_for_model(self):
        self.assert_error(*self.gw.request("POST", "/v1/chat/completions", chat(EMBED)), 400)

    def test_other_requests_unaffected_by_bad_ones(self):
        # A keep-alive connection serving a normal request while bad ones come and go.
        c = self.gw.conn()
        for i in range(3):
            raw_exchange(self.gw.port, b"\x00\x01garbage\r\n\r\n")
            self.gw.request("POST", "/v1/chat/completions", "{bad json")
            c.request("POST", "/v1/chat/completions", body=chat(TARGET))
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
        c.close()

    # ---- upstream failures and timeouts ----
    def test_upstream_error_status_relayed(self):
        s, h, b = self.gw.request("POST", "/v1/chat/completions", chat(TARGET), {"x-fake-status": "500", "x-request-id": "e500"})
        self.assertEqual(s, 500)
        self.assertIn(b"fake error 500", b)
        self.assertEqual(self.wait_record("e500")["outcome"], "upstream_error")

    def test_first_byte_timeout_is_504(self):
        s, h, b = self.gw.request("POST", "/v1/chat/completions", chat(TARGET), {"x-fake-first-byte-delay-ms": "2500"})
        self.assert_error(s, h, b, 504)

    def test_stall_mid_stream_ends_with_error_event(self):
        # vLLM's error event (the OpenAI SDKs raise it), then the response is cut: no [DONE], no
        # chunked terminator, so a client that ignores error events still sees an incomplete stream.
        c = self.gw.conn(10)
        try:
            c.request("POST", "/v1/chat/completions", body=chat(TARGET, True),
                      headers={"x-fake-tokens": "10", "x-fake-stall-after": "3", "x-request-id": "stall"})
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            with self.assertRaises(http.client.IncompleteRead) as cut:
                r.read()
            b = cut.exception.partial
        finally:
            c.close()
        events = [e for e in b.decode().split("\n\n") if e.strip()]
        self.assertEqual(len(events), 4, events)
        self.assertTrue(events[3].startswith('data: {"error":'), events[3])
        self.assertNotIn("[DONE]", b.decode())
        self.assertEqual(self.wait_record("stall")["outcome"], "timeout")

    def test_upstream_closing_without_answer_is_502(self):
        s, h, b = self.gw.request("POST", "/v1/chat/completions", chat(TARGET), {"x-fake-close": "1"})
        self.assert_error(s, h, b, 502)

    # ---- keep-alive upstream reuse ----
    def test_upstream_connections_are_reused(self):
        # Counted from the POSTs themselves: scrapes and health probes open connections of their own.
        c = self.gw.conn()
        for i in range(10):
            c.request("POST", "/v1/chat/completions", body=chat(TARGET), headers={"x-request-id": f"reuse-{i}"})
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
        c.close()
        conns = {r["conn"] for r in self.up.log() if r["headers"].get("x-request-id", "").startswith("reuse-")}
        self.assertEqual(len(conns), 1, "sequential requests must reuse one upstream connection")

    def test_upstream_closing_an_idle_connection_is_retried_fresh(self):
        # The server closes the kept-alive connection after answering; the next request reuses it
        # (too recent to be peeked), fails before any response byte, and is retried on a new one.
        c = self.gw.conn()
        for i in range(4):
            c.request("POST", "/v1/chat/completions", body=chat(TARGET),
                      headers={"x-fake-close-after-ms": "20", "x-request-id": f"stale-{i}"})
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200, i)
            time.sleep(0.06)
        c.close()

    # ---- models, health, metrics ----
    def test_models_list(self):
        s, h, b = self.gw.request("GET", "/v1/models")
        self.assertEqual(s, 200)
        doc = json.loads(b)
        self.assertEqual(doc["object"], "list")
        by_id = {m["id"]: m for m in doc["data"]}
        self.assertEqual(set(by_id), {TARGET, ALIAS, "sql-lora", EMBED})
        self.assertEqual(by_id["sql-lora"]["parent"], TARGET)
        self.assertIsNone(by_id[TARGET]["parent"])
        self.assertEqual(by_id[ALIAS]["root"], TARGET)
        for m in doc["data"]:
            self.assertEqual(m["object"], "model")

    def test_health_and_metrics(self):
        self.assertEqual(self.gw.request("GET", "/healthz")[0], 200)
        self.assertEqual(self.gw.request("GET", "/readyz")[0], 200)
        self.assertEqual(self.gw.admin("/healthz")[0], 200)
        self.assertEqual(self.gw.admin("/readyz")[0], 200)
        self.gw.request("POST", "/v1/chat/completions", chat(TARGET, True))
        s, text = self.gw.admin("/metrics")
        self.assertEqual(s, 200)
        self.assertRegex(text, r'sluice_requests_total\{pool="chat",model="%s",status="200",outcome="ok"\} [1-9]' % re.escape(TARGET))
        labels = 'pool="chat",model="%s",adapter="-"' % TARGET
        self.assertIn('sluice_request_duration_seconds_bucket{%s,le="+Inf"}' % labels, text)
        self.assertIn('sluice_ttft_seconds_count{%s}' % labels, text)
        self.assertRegex(text, r'sluice_picks_total\{pool="chat",endpoint="127.0.0.1:\d+"\} [1-9]')
        self.assertIn("sluice_endpoint_inflight_requests{", text)
        self.assertEqual(self.gw.request("GET", "/metrics")[0], 404, "metrics live on the admin port only")


class SlowClient(WithGateway):
    """Clients slow to read large answers."""

    def start(self, tokens, rcvbuf):
        """A non-streamed answer of `tokens` tokens (~10 bytes each) to a client with a receive buffer
        of `rcvbuf` bytes: returns the socket, the answer's Content-Length and the body bytes read
        with its head."""
        body = chat(TARGET).encode()
        req = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\nx-fake-tokens: {tokens}\r\n\r\n").encode() + body
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(10)
        s.connect(("127.0.0.1", self.gw.port))
        s.sendall(req)
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = s.recv(4096)
            self.assertTrue(chunk, "no answer")
            raw += chunk
        head, rest = raw.split(b"\r\n\r\n", 1)
        self.assertIn(b" 200 ", head.split(b"\r\n")[0])
        return s, int(re.search(rb"(?i)content-length: *(\d+)", head).group(1)), rest

    def read_rest(self, s, length, got, pause=0.0):
        t0 = time.time()
        while len(got) < length:
            chunk = s.recv(65536)
            self.assertTrue(chunk, f"cut after {len(got)} of {length} bytes, {time.time() - t0:.1f} s")
            got += chunk
            time.sleep(pause)
        return got


class SlowReader(SlowClient):
    idle_ms = 20000  # longer than the test takes: nothing is cut

    def test_a_client_slow_to_read_does_not_hold_the_engines_slot(self):
        """The engine is done when its answer has been read: the endpoint's in-flight count drops then,
        not when the client has taken the answer (the picker would otherwise rank the endpoint with a
        phantom decoder for as long as the client reads, and the slot would stay unused)."""
        def inflight():
            _, text = self.gw.admin("/metrics")
            vals = [float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
                    if l.startswith('sluice_endpoint_inflight_requests{pool="chat"')]
            return sum(vals) if vals else None

        # A 4 KB window: the ~7.7 MB answer cannot fit in the socket buffers between the gateway and
        # this client (at most ~4 MB of send buffer), so the gateway's write waits for us.
        s, length, got = self.start(800000, 4096)
        try:
            self.assertGreater(length, 6_000_000)
            deadline = time.time() + 10
            while time.time() < deadline and not (self.up.log()[-1]["completed"]):
                time.sleep(0.05)
            self.assertTrue(self.up.log()[-1]["completed"], "the engine did not finish its answer")
            deadline = time.time() + 3
            while time.time() < deadline and inflight() != 0:
                time.sleep(0.05)
            self.assertEqual(inflight(), 0, "the endpoint still counts the answered request while the client reads")
            # The client has read only the head: the answer is still on its way, whole.
            got = self.read_rest(s, length, got)
            self.assertEqual(json.loads(got)["usage"]["completion_tokens"], 800000)
        finally:
            s.close()


class ClientWriteDeadline(SlowClient):
    """timeouts.idle_ms bounds a stalled client write: a client that keeps reading a large answer gets
    all of it however long that takes; one that stops reading is cut after idle_ms."""
    idle_ms = 1000

    def test_a_client_that_keeps_reading_gets_the_whole_answer(self):
        # ~12 MB read at most 32 KB per 10 ms: several times idle_ms, and more than the socket buffers
        # hold (the gateway's write is still waiting for this client when idle_ms has passed).
        s, length, got = self.start(1200000, 32768)
        try:
            t0 = time.time()
            got = self.read_rest(s, length, got, pause=0.01)
            self.assertGreater(time.time() - t0, 2.0, "the answer came faster than twice idle_ms: nothing tested")
            self.assertEqual(json.loads(got)["usage"]["completion_tokens"], 1200000)
        finally:
            s.close()

    def test_a_client_that_stops_reading_is_cut_after_idle_ms(self):
        s, length, got = self.start(800000, 32768)
        try:
            time.sleep(3.5)  # idle_ms is 1 s (one more window for the head this client read)
            t0 = time.time()
            try:
                while len(got) < length and time.time() - t0 < 10:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        break
                    got += chunk
            except ConnectionResetError:
                pass
            self.assertLess(len(got), length, "a client that stopped reading got the whole answer")
        finally:
            s.close()
        # Logged as the gateway's cut of a stalled client, not as a client that hung up (a cancellation
        # all the same: not an engine timeout).
        recs = self.gw.access_records(until=lambda rs: any(r.get("reason") == "client_write_timeout" for r in rs))
        cut = [r for r in recs if r.get("reason") == "client_write_timeout"]
        self.assertEqual(len(cut), 1, recs[-3:])
        self.assertEqual((cut[0]["outcome"], cut[0]["status"]), ("client_cancelled", 499))
        _, text = self.gw.admin("/metrics")
        self.assertIn('sluice_cancellations_total{phase="stalled"} 1', text)


class Resilience(unittest.TestCase):
    def setUp(self):
        self.up = FakeUpstream()
        self.gw = None

    def tearDown(self):
        if self.gw:
            self.gw.stop()
        self.up.stop()

    def test_retry_next_candidate_on_connect_failure(self):
        dead = free_port()
        self.gw = Gateway(SLUICE, config(self.up.port, second_endpoint=f"127.0.0.1:{dead}"))
        for i in range(6):
            s, _, b = self.gw.request("POST", "/v1/chat/completions", chat(TARGET), {"x-request-id": f"r{i}"})
            self.assertEqual(s, 200, b)
        recs = self.gw.access_records(min_count=6)
        self.assertTrue(any(r["attempts"] == 2 for r in recs), recs)
        self.assertTrue(all(r["outcome"] == "ok" for r in recs))

    def test_client_leaving_during_a_retry_after_wait_ends_the_request(self):
        # The first engine answers 503 with Retry-After: 1; the gateway waits that out before the next
        # candidate (retry.max_retry_after, 1 s). A client that leaves during the wait ends the request
        # then: logged client_cancelled well before the second, and no retry reaches the other engine.
        up2 = FakeUpstream()
        try:
            self.gw = Gateway(SLUICE, config(self.up.port, second_endpoint=f"127.0.0.1:{up2.port}"), workers=1)
            body = chat(TARGET).encode()
            s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"x-request-id: leave-in-wait\r\nx-fake-status: 503\r\nx-fake-retry-after: 1\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            seen = lambda: [r for u in (self.up, up2) for r in u.log() if r["headers"].get("x-request-id") == "leave-in-wait"]
            deadline = time.time() + 2
            while time.time() < deadline and not seen():
                time.sleep(0.02)
            self.assertEqual(len(seen()), 1, "the first attempt must have reached an engine")
            time.sleep(0.1)  # its 503 is back; the gateway is in the wait
            s.close()
            left = time.time()
            rec = None
            while time.time() < left + 2 and rec is None:
                rec = next((r for r in self.gw.access_records() if r["id"] == "leave-in-wait"), None)
                time.sleep(0.02)
            self.assertIsNotNone(rec)
            self.assertLess(time.time() - left, 0.85, "ended when the client left, not when the wait was over")
            self.assertEqual(rec["outcome"], "client_cancelled")
            time.sleep(1.2)
            self.assertEqual(len(seen()), 1, "no retry after the client left")
        finally:
            up2.stop()

    def test_all_endpoints_down_is_502(self):
        self.gw = Gateway(SLUICE, config(free_port()))
        s, h, b = self.gw.request("POST", "/v1/chat/completions", chat(TARGET))
        self.assertEqual(s, 502)
        self.assertIn("error", json.loads(b))

    def test_connection_limit(self):
        self.gw = Gateway(SLUICE, config(self.up.port).replace("header_timeout_ms: 600", "header_timeout_ms: 5000\n  max_connections: 3"),
                          workers=1)
        held = [socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) for _ in range(3)]
        try:
            time.sleep(0.2)
            raw = raw_exchange(self.gw.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(parse_status(raw), 503)
        finally:
            for s in held:
                s.close()
        time.sleep(0.2)
        self.assertEqual(self.gw.request("GET", "/v1/models")[0], 200)

    def test_graceful_drain(self):
        self.gw = Gateway(SLUICE, config(self.up.port))
        c = self.gw.conn()
        c.request("POST", "/v1/chat/completions", body=chat(TARGET, True),
                  headers={"x-fake-tokens": "20", "x-fake-token-delay-ms": "60"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        first = r.read1(65536)
        self.assertIn(b"tok0", first)
        self.gw.signal(signal.SIGTERM)
        time.sleep(0.3)
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", self.gw.port), timeout=1).close()
        rest = r.read()
        c.close()
        self.assertIn(b"data: [DONE]", rest, "the in-flight stream must complete")
        self.assertEqual((first + rest).count(b"data: {"), 20)
        self.assertEqual(self.gw.proc.wait(10), 0)


def main():
    global SLUICE
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
