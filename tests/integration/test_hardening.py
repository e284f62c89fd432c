#!/usr/bin/env python3
"""Regression tests for issue 14 (hardening): one test class per case, each failing without its fix.
Raw-socket clients for framing, connection and memory cases; hostile_upstream.py for the upstream
ones. Every test is bounded (< 60 s), touches 127.0.0.1 only and stops what it starts.

  1  Smuggling                  TE not ending in chunked, TE + CL, TE in HTTP/1.0 -> 400 + close
  5  ConcurrencyRateHeaders     max_concurrent 429s carry x-ratelimit-*
  6  ConnectionLockout          idle keep-alive connections are reaped at max_connections; 503 says Retry-After
  7  BodyBudget                 partial bodies bounded gateway-wide (503 + Retry-After), memory returned
  8  Amplification              model name capped, echoed values truncated in bodies and in the access log
  9  ReloadFds                  a retired pool runtime's idle upstream connections are closed
  11 Strictness                 duplicate Host, duplicate "model" -> 400

Cases fixed in the request lifecycle (main engineer's redesign); run them with e.g.
  python3 tests/integration/test_hardening.py --sluice build-release/sluice Upstream100Continue
  2  Upstream100Continue        an interim 100 from the engine is skipped; the real 200 is relayed, in step
  3  InFlightCapWithoutTenants  max_in_flight_per_endpoint holds without tenants (wait or 503 + Retry-After)
  4  QueueFullBelowCapacity     no queue_full 429s while the fleet has room
  10 HungReplica                nothing-received requests retried after first_byte; comments-only stream ends at idle_ms
  11 HalfClose                  a client's SHUT_WR does not abort a buffered request
  12 MidStreamFailure           a stream cut by the engine ends with a visible error event

Run: python3 test_hardening.py --sluice path/to/sluice [TestClass]
(SLUICE_SKIP_LIFECYCLE_CASES=1 skips the second group.)"""
import argparse
import concurrent.futures
import json
import os
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_harness import (MODEL, DrainedGateway, FakeUpstream, HostileUpstream, chat_body, config,  # noqa: E402
                             count_responses, healthy_request_works, post, recv_all, request_bytes, statuses)

SLUICE = None

# The cases the lifecycle redesign fixes (items 2, 3, 4, 10, 11 half-close, 12) fail until it lands;
# SLUICE_SKIP_LIFECYCLE_CASES=1 skips them (e.g. to keep a branch's CI green before the merge).
lifecycle = unittest.skipIf(os.environ.get("SLUICE_SKIP_LIFECYCLE_CASES") == "1", "waiting for the lifecycle redesign")


def metric(text, name, **labels):
    total = None
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                total = (total or 0) + float(line.rsplit(" ", 1)[1])
    return total


class WithFake(unittest.TestCase):
    """A gateway in front of fake_upstream.py (which logs every request it gets)."""
    limits = ""
    extra = ""

    @classmethod
    def setUpClass(cls):
        cls.up = FakeUpstream()
        try:
            cls.gw = DrainedGateway(SLUICE, config([f"127.0.0.1:{cls.up.port}"], limits=cls.limits, extra=cls.extra))
        except Exception:
            cls.up.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.up.stop()

    def upstream_paths(self):
        return [r["path"] for r in self.up.log()]


# ---------------------------------------------------------------- 1: request smuggling

HIDDEN = request_bytes(chat_body(content="smuggled"), path="/v1/completions")


class Smuggling(WithFake):
    def send_framed(self, te_lines, body, version="1.1", cl=None):
        head = f"POST /v1/chat/completions HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n"
        head += "".join(f"Transfer-Encoding: {te}\r\n" for te in te_lines)
        if cl is not None:
            head += f"Content-Length: {cl}\r\n"
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        try:
            s.sendall(head.encode() + b"\r\n" + body)
            return recv_all(s, timeout=3)
        finally:
            s.close()

    def assert_refused_and_closed(self, raw, closed, status=400):
        self.assertEqual(statuses(raw), [status], raw[:400])
        self.assertTrue(closed, "the connection must be closed after a framing error")
        self.assertIn(b"connection: close", raw.lower())

    def test_te_not_ending_in_chunked(self):
        before = len(self.up.log())
        for te in ["gzip", "identity", "xchunked", "chunk", "chunked, identity", "chunked, chunked", "chunked,", ""]:
            with self.subTest(te=te):
                raw, closed = self.send_framed([te], HIDDEN)
                self.assert_refused_and_closed(raw, closed)
        time.sleep(0.3)
        self.assertNotIn("/v1/completions", [r["path"] for r in self.up.log()[before:]], "a smuggled request reached the engine")
        healthy_request_works(self, self.gw)

    def test_te_split_over_two_lines(self):
        raw, closed = self.send_framed(["chunked", "identity"], HIDDEN)
        self.assert_refused_and_closed(raw, closed)

    def test_te_and_content_length(self):
        # RFC 9112 6.3: both present -> error (a front proxy may frame by either one).
        body = chat_body().encode()
        chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
        raw, closed = self.send_framed(["chunked"], chunked + HIDDEN, cl=len(chunked))
        self.assert_refused_and_closed(raw, closed)
        raw, closed = self.send_framed(["chunked"], chunked + HIDDEN, cl=0)
        self.assert_refused_and_closed(raw, closed)

    def test_te_in_http10(self):
        raw, closed = self.send_framed(["chunked"], b"0\r\n\r\n" + HIDDEN, version="1.0")
        self.assert_refused_and_closed(raw, closed)

    def test_unsupported_coding_before_chunked_is_501(self):
        raw, closed = self.send_framed(["gzip, chunked"], b"0\r\n\r\n" + HIDDEN)
        self.assert_refused_and_closed(raw, closed, 501)

    def test_plain_chunked_still_works(self):
        body = chat_body().encode()
        raw, closed = self.send_framed(["chunked"], f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
        self.assertEqual(statuses(raw)[:1], [200], raw[:400])


# ---------------------------------------------------------------- 11: HTTP strictness

class Strictness(WithFake):
    def test_duplicate_host(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        body = chat_body().encode()
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: "
                  + str(len(body)).encode() + b"\r\n\r\n" + body)
        raw, closed = recv_all(s)
        s.close()
        self.assertEqual(statuses(raw), [400], raw[:300])
        self.assertTrue(closed)

    def test_host_list(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: a, b\r\n\r\n")
        raw, _ = recv_all(s)
        s.close()
        self.assertEqual(statuses(raw), [400], raw[:300])

    def test_duplicate_model_key(self):
        for body in ['{"model":"%s","model":"other","messages":[{"role":"user","content":"x"}]}' % MODEL,
                     '{"model":"other","messages":[{"role":"user","content":"x"}],"model":"%s"}' % MODEL,
                     '{"model":"%s","mod\\u0065l":"other","messages":[{"role":"user","content":"x"}]}' % MODEL]:
            with self.subTest(body=body):
                status, _, b = post(self.gw.port, body)
                self.assertEqual(status, 400, b)
                self.assertIn("more than once", json.loads(b)["error"]["message"])
        healthy_request_works(self, self.gw)


# ---------------------------------------------------------------- 8: amplification

class Amplification(WithFake):
    limits = ", max_body_bytes: 2097152, max_header_bytes: 16384"

    def test_long_model_name_refused_small_answer_small_log_line(self):
        model = "m" * (1 << 20)
        status, _, body = post(self.gw.port, chat_body(model=model))
        self.assertEqual(status, 400)
        self.assertLess(len(body), 1024, "the error body must not echo the whole name")
        self.assertEqual(json.loads(body)["error"]["param"], "model")
        # A name at the cap is accepted as a name (then unknown: 404), and echoed at most once.
        status, _, body = post(self.gw.port, chat_body(model="n" * 256))
        self.assertEqual(status, 404)
        self.assertLess(len(body), 1024)
        time.sleep(0.5)
        lines = [json.dumps(r) for r in self.gw.access_records(2)]
        self.assertTrue(lines)
        self.assertLess(max(len(l) for l in lines), 4096, "an access-log line must stay small")

    def test_long_client_values_truncated_in_log(self):
        # The tenant comes from a header (bounded by max_header_bytes) or the body's `user` (bounded
        # only by max_body_bytes): both are cut in the log line; a long x-request-id is replaced.
        status, _, _ = post(self.gw.port, chat_body(), headers={"x-gateway-inference-fairness-id": "t" * 3000})
        self.assertEqual(status, 200)
        status, _, _ = post(self.gw.port, chat_body(user="u" * 500000))
        self.assertEqual(status, 200)
        recs = self.gw.access_records(99, timeout=1.5)
        tenants = [r["tenant"] for r in recs if r["tenant"][:4] in ("tttt", "uuuu")]
        self.assertEqual(len(tenants), 2, "requests not logged")
        for t in tenants:
            self.assertLessEqual(len(t), 300)
            self.assertTrue(t.endswith("..."))

    def test_long_unknown_json_key_not_echoed(self):
        body = '{"model":"%s","messages":[{"role":"user","content":"x"}],"%s":::}' % (MODEL, "k" * 100000)
        status, _, b = post(self.gw.port, body)
        self.assertEqual(status, 400)
        self.assertLess(len(b), 2048)


# ---------------------------------------------------------------- 5: max_concurrent 429 headers

def sha(key):
    import hashlib
    return hashlib.sha256(key.encode()).hexdigest()


class ConcurrencyRateHeaders(WithFake):
    extra = f"""tenants:
  - name: team
    key_sha256: [{sha("key-team")}]
    limits: {{requests_per_min: 1000, max_concurrent: 1}}"""

    def test_max_concurrent_429_has_ratelimit_headers(self):
        auth = {"authorization": "Bearer key-team"}
        c = socket.create_connection(("127.0.0.1", self.gw.port), timeout=10)
        try:
            c.sendall(request_bytes(chat_body(stream=True), headers="Authorization: Bearer key-team\r\n"
                                    "x-fake-tokens: 30\r\nx-fake-token-delay-ms: 50\r\n"))
            self.assertTrue(c.recv(1), "the first stream did not start")
            status, headers, body = post(self.gw.port, chat_body(), headers=auth)
            self.assertEqual(status, 429, body)
            self.assertIn("concurrent", json.loads(body)["error"]["message"])
            self.assertIn("retry-after", headers)
            for h in ("x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"):
                self.assertIn(h, headers, f"max_concurrent 429 lacks {h}: {headers}")
            self.assertEqual(headers["x-ratelimit-limit-requests"], "1000")
        finally:
            c.close()


# ---------------------------------------------------------------- 6: connection lockout

class ConnectionLockout(WithFake):
    limits = ", max_connections: 20, idle_timeout_ms: 60000"

    def test_idle_keepalive_connections_make_room(self):
        held = []
        try:
            for _ in range(20):
                s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                self.assertIn(b"200 OK", s.recv(4096))
                held.append(s)  # now idle, keep-alive
            time.sleep(0.2)
            for i in range(5):  # each new client gets in: the oldest idle connection is closed for it
                status, _, body = post(self.gw.port, chat_body())
                self.assertEqual(status, 200, body[:200])
            # The oldest idle connections were the ones closed.
            closed = 0
            for s in held[:5]:
                s.settimeout(1)
                try:
                    closed += s.recv(1) == b""
                except (ConnectionResetError, socket.timeout):
                    closed += 1
            self.assertEqual(closed, 5)
        finally:
            for s in held:
                s.close()

    def test_busy_connections_get_503_with_retry_after(self):
        held = []
        try:
            for _ in range(20):  # slowloris: headers never finished, so not idle
                s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                held.append(s)
            time.sleep(0.3)
            s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
            raw, _ = recv_all(s, 2)
            s.close()
            self.assertEqual(statuses(raw), [503], raw[:300])
            self.assertIn(b"retry-after: 1", raw.lower())
            self.assertIn(b"too_many_connections", raw)
        finally:
            for s in held:
                s.close()
        time.sleep(0.3)
        healthy_request_works(self, self.gw)


# ---------------------------------------------------------------- 7: memory held by unfinished bodies

class BodyBudget(unittest.TestCase):
    BUDGET_MIB = 32

    def test_partial_bodies_bounded_and_memory_returned(self):
        up = FakeUpstream()
        gw = None
        socks = []
        try:
            asan = os.environ.get("ASAN_OPTIONS")
            if os.environ.get("SLUICE_SANITIZED") == "1":
                # ASan keeps freed memory in a quarantine (256 MiB by default) that counts in RSS: the
                # freed 3 MiB pieces of refused bodies piled up there (peak +103 MiB in a loaded full ASan
                # run). A small quarantine makes the peak measure what the gateway holds.
                os.environ["ASAN_OPTIONS"] = (asan + ":" if asan else "") + "quarantine_size_mb=4"
            try:
                gw = DrainedGateway(SLUICE, config([f"127.0.0.1:{up.port}"], workers=1,
                                                   limits=f", max_body_bytes: 8388608, max_buffered_body_bytes: {self.BUDGET_MIB << 20}"))
            finally:
                if asan is None:
                    os.environ.pop("ASAN_OPTIONS", None)
                else:
                    os.environ["ASAN_OPTIONS"] = asan
            healthy_request_works(self, gw)
            base = gw.rss_kib()
            piece = b"x" * (3 << 20)
            refused = 0
            peak = base
            for i in range(40):  # 40 x 3 MiB of unfinished 8 MiB bodies = 120 MiB asked for
                s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 8000000\r\n\r\n")
                try:
                    s.sendall(piece)
                except OSError:
                    pass
                socks.append(s)
                peak = max(peak, gw.rss_kib())
            time.sleep(0.5)
            for s in socks:
                s.setblocking(False)
                try:
                    data = s.recv(65536)
                except (BlockingIOError, OSError):
                    data = b""
                if b" 503 " in data:
                    refused += 1
                    self.assertIn(b"retry-after: 1", data.lower())
                    self.assertIn(b"too_many_buffered_bodies", data)
            peak = max(peak, gw.rss_kib())
            print(f"\n  body budget {self.BUDGET_MIB} MiB: RSS base {base >> 10} MiB, peak {peak >> 10} MiB, "
                  f"{refused}/40 refused", file=sys.stderr)
            if os.environ.get("SLUICE_SANITIZED") != "1":  # timing-bound: slow clients under ASan may not overlap
                self.assertGreater(refused, 20, "most connections must be refused past the budget")
            self.assertLess(peak - base, 90 << 10, "RSS must stay near the budget, not grow with the bodies asked for")
            for s in socks:
                s.close()
            socks = []
            deadline = time.time() + 5
            while time.time() < deadline and gw.rss_kib() - base > (24 << 10):
                time.sleep(0.25)
            after = gw.rss_kib()
            print(f"  RSS 5 s after the clients left: {after >> 10} MiB", file=sys.stderr)
            if os.environ.get("SLUICE_SANITIZED") != "1":  # ASan's allocator keeps freed memory in quarantine
                self.assertLess(after - base, 24 << 10, "memory must be returned after the spike")
            healthy_request_works(self, gw)
        finally:
            for s in socks:
                s.close()
            if gw:
                gw.stop()
            up.stop()


# ---------------------------------------------------------------- 9: reload storms and fds

class ReloadFds(unittest.TestCase):
    def test_fds_bounded_over_30_reloads(self):
        up = FakeUpstream()
        gw = None
        try:
            def cfg(i):
                return config([f"127.0.0.1:{up.port}"], workers=1, pool_extra=f"    max_in_flight_per_endpoint: {100 + i}")
            gw = DrainedGateway(SLUICE, cfg(0))
            healthy_request_works(self, gw)
            base = gw.fds()
            samples = []
            pool = concurrent.futures.ThreadPoolExecutor(8)
            for i in range(1, 31):
                # 8 concurrent requests: 8 upstream connections left idle in this generation's runtime
                list(pool.map(lambda _: post(gw.port, chat_body(), headers={"x-fake-first-byte-delay-ms": "30"}), range(8)))
                gw.reload(cfg(i))
                time.sleep(0.15)
                samples.append(gw.fds())
            pool.shutdown()
            time.sleep(1.5)  # one housekeeping pass
            end = gw.fds()
            print(f"\n  gateway fds: base {base}, during {min(samples)}..{max(samples)}, after {end}", file=sys.stderr)
            self.assertLess(end - base, 20, "old generations' idle upstream connections must be closed")
            self.assertLess(max(samples) - base, 60)
            healthy_request_works(self, gw)
        finally:
            if gw:
                gw.stop()
            up.stop()


# ================================================================ cases fixed in the lifecycle code

@lifecycle
class Upstream100Continue(unittest.TestCase):
    """2: the engine answers `100 Continue` and then its real 200."""

    def test_interim_100_is_not_the_final_response(self):
        up = HostileUpstream("continue100")
        gw = None
        try:
            gw = DrainedGateway(SLUICE, config([up.address]))
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
            try:
                seqs = []
                for i in range(3):  # one keep-alive connection: each answer must be its own request's
                    s.sendall(request_bytes(chat_body(content=f"q{i}")))
                    raw = b""
                    s.settimeout(5)
                    while True:
                        try:
                            data = s.recv(65536)
                        except socket.timeout:
                            self.fail(f"request {i}: no final response after the interim 100 (got {raw[:200]!r})")
                        self.assertTrue(data, "connection closed")
                        raw += data
                        head, _, body = raw.partition(b"\r\n\r\n")
                        if head.startswith(b"HTTP/1.1 100"):
                            raw = body  # an interim response relayed as such is fine
                            continue
                        if b"\r\n\r\n" in raw:
                            length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                            if length and len(body) >= length[0]:
                                break
                    self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
                    seqs.append(json.loads(body)["seq"])
                self.assertEqual(seqs, sorted(seqs))
                self.assertEqual(len(set(seqs)), 3, "responses out of step")
            finally:
                s.close()
            recs = gw.access_records(3)
            self.assertEqual([r["status"] for r in recs][-3:], [200, 200, 200])
        finally:
            if gw:
                gw.stop()
            up.stop()


@lifecycle
class InFlightCapWithoutTenants(unittest.TestCase):
    """3: max_in_flight_per_endpoint: 4, no tenants, 24 concurrent streams."""

    def test_cap_holds(self):
        ups = [HostileUpstream("ok") for _ in range(2)]
        gw = None
        try:
            gw = DrainedGateway(SLUICE, config([u.address for u in ups], workers=2, pool_extra="    max_in_flight_per_endpoint: 4",
                                               timeouts=", first_byte_ms: 20000"))

            def one(i):
                return post(gw.port, chat_body(stream=True), headers={"x-hostile-tokens": "10", "x-hostile-gap-ms": "60"}, timeout=30)
            with concurrent.futures.ThreadPoolExecutor(24) as ex:
                results = list(ex.map(one, range(24)))
            peaks = [u.stats()["max_concurrent"] for u in ups]
            codes = [r[0] for r in results]
            print(f"\n  engines' peak concurrency {peaks}; statuses {sorted(set(codes))}", file=sys.stderr)
            # The engine stops counting a request just before it sends the answer's last bytes, so a
            # slot the gateway frees on the last byte is free at the engine too (when it counted until
            # its handler returned, a loaded machine saw the next request arrive first: 5).
            for p in peaks:
                self.assertLessEqual(p, 4, f"an engine ran {p} requests against a cap of 4")
            for status, headers, body in results:
                self.assertIn(status, (200, 503), body[:200])
                if status == 503:
                    self.assertIn("retry-after", headers)
        finally:
            if gw:
                gw.stop()
            for u in ups:
                u.stop()


@lifecycle
class QueueFullBelowCapacity(unittest.TestCase):
    """4: 4 endpoints x 8 slots, queue of 20, idle fleet, bursts of 30 and 40 requests (32 slots + 20
    queue places: none may be refused)."""

    def test_no_queue_full_below_capacity(self):
        ups = [HostileUpstream("ok") for _ in range(4)]
        gw = None
        try:
            admission = f"""tenants:
  - name: everyone
    key_sha256: [{sha("unused-key")}]
admission: {{anonymous_tenant: everyone, queue: {{max_requests: 20, ttl_ms: 10000}}}}"""
            gw = DrainedGateway(SLUICE, config([u.address for u in ups], workers=2, pool_extra="    max_in_flight_per_endpoint: 8",
                                               admission=admission))
            for n in (30, 40, 40):
                # A burst: every connection open first, then every request written at once.
                socks = [socket.create_connection(("127.0.0.1", gw.port), timeout=20) for _ in range(n)]
                data = request_bytes(chat_body(stream=True), headers="x-hostile-tokens: 5\r\nx-hostile-gap-ms: 40\r\nConnection: close\r\n")
                for sock in socks:
                    sock.sendall(data)
                codes, reasons = [], set()
                for sock in socks:
                    raw, _ = recv_all(sock, 10, 20)
                    sock.close()
                    codes.append(statuses(raw)[0] if statuses(raw) else None)
                    if codes[-1] == 429:
                        reasons.add(json.loads(raw.split(b"\r\n\r\n", 1)[1])["error"]["code"])
                print(f"\n  burst of {n}: {codes.count(200)} ok, {codes.count(429)} 429s {sorted(reasons)}, "
                      f"others {[c for c in codes if c not in (200, 429)]}", file=sys.stderr)
                self.assertEqual(codes.count(429), 0, "queue_full 429s while the fleet (32 slots + a queue of 20) had room")
                self.assertEqual(codes.count(200), n)
                time.sleep(0.5)
        finally:
            if gw:
                gw.stop()
            for u in ups:
                u.stop()


@lifecycle
class HungReplica(unittest.TestCase):
    """10: a replica that accepts and never answers (SIGSTOP), and one that streams only comments."""

    def test_requests_retried_after_first_byte_timeout(self):
        hung, good = HostileUpstream("hang"), HostileUpstream("ok")
        gw = None
        try:
            gw = DrainedGateway(SLUICE, config([hung.address, good.address], workers=1, timeouts=", first_byte_ms: 800"))
            t0 = time.time()
            with concurrent.futures.ThreadPoolExecutor(6) as ex:
                results = list(ex.map(lambda i: post(gw.port, chat_body(), timeout=20), range(6)))
            codes = [r[0] for r in results]
            print(f"\n  statuses {codes} in {time.time() - t0:.1f} s", file=sys.stderr)
            self.assertEqual(codes, [200] * 6, "nothing reached the client: the request must be retried on the other replica")
        finally:
            if gw:
                gw.stop()
            hung.stop()
            good.stop()

    def test_comments_only_stream_ends_at_idle_ms(self):
        up = HostileUpstream("comments")
        gw = None
        try:
            gw = DrainedGateway(SLUICE, config([up.address], workers=1, timeouts=", idle_ms: 700"))
            s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
            t0 = time.time()
            s.sendall(request_bytes(chat_body(stream=True)))
            raw, closed = recv_all(s, timeout=6, total=8)
            s.close()
            took = time.time() - t0
            print(f"\n  comments-only stream ended after {took:.1f} s", file=sys.stderr)
            self.assertLess(took, 3.0, "a stream of SSE comments only must end at idle_ms (no event for 700 ms)")
            self.assertIn(b"error", raw)
        finally:
            if gw:
                gw.stop()
            up.stop()


@lifecycle
class HalfClose(WithFake):
    """11: a client that shuts down its sending side right behind its request (the FIN with the last
    request bytes, as `nc -N` or `curl -T` style clients do) and still reads gets its (buffered)
    answer. (A FIN that arrives after the gateway read the request is taken as the client leaving:
    reading cannot tell the two apart, and aborting frees the engine. TCP_CORK makes the kernel
    send the request and the FIN together, which is the contract under test.)"""

    def test_shut_wr_is_not_an_abort(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        s.sendall(request_bytes(chat_body(), headers="x-fake-first-byte-delay-ms: 400\r\n"))
        s.shutdown(socket.SHUT_WR)
        raw, _ = recv_all(s, 5)
        s.close()
        self.assertEqual(statuses(raw), [200], raw[:300])
        self.assertIn(b"tok0", raw)

    def test_fin_behind_a_kept_alive_request_is_a_client_leaving(self):
        """The half-close is looked for on a connection's first request only (session.cpp: the
        clients that shut their sending side send one request per connection). On a kept-alive
        connection the same FIN behind a later request is a client that left: its request is
        cancelled at once, not served."""
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        s.sendall(request_bytes(chat_body()))
        got = b""
        while b"\r\n\r\n" not in got:
            got += s.recv(65536)
        head, rest = got.split(b"\r\n\r\n", 1)
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        while len(rest) < length:
            rest += s.recv(65536)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        s.sendall(request_bytes(chat_body(), headers="x-request-id: kept-alive-fin\r\n"
                                                     "x-fake-first-byte-delay-ms: 1500\r\n"))
        t0 = time.time()
        s.shutdown(socket.SHUT_WR)
        raw, _ = recv_all(s, 5)
        s.close()
        self.assertEqual(statuses(raw), [], raw[:300])
        self.assertLess(time.time() - t0, 1.2, "cancelled at once, not at the engine's first byte")
        recs = self.gw.access_records(until=lambda rs: any(r.get("id") == "kept-alive-fin" for r in rs))
        rec = [r for r in recs if r.get("id") == "kept-alive-fin"]
        self.assertTrue(rec, recs[-3:])
        self.assertEqual(rec[0]["outcome"], "client_cancelled")


@lifecycle
class MidStreamFailure(unittest.TestCase):
    """12: the engine cuts a stream after two events. What the client gets: the events so far, then
    vLLM's `data: {"error": {...}}` as the last data event (the OpenAI SDKs raise it), and then the
    response is cut: no [DONE] and no chunked terminator, so a client that ignores error events
    still sees an incomplete response, never a finished stream. The access log says upstream_error
    (not ok). No `finish_reason: stop` chunk is invented."""

    def test_failure_visible(self):
        up = HostileUpstream("midfail")
        gw = None
        try:
            gw = DrainedGateway(SLUICE, config([up.address], workers=1))
            status, _, body = post(gw.port, chat_body(stream=True))
            self.assertEqual(status, 200)
            events = [l[6:] for l in body.decode().split("\n") if l.startswith("data: ")]
            print(f"\n  client saw: {events}", file=sys.stderr)
            self.assertGreaterEqual(len(events), 3, body)
            self.assertNotIn("[DONE]", events, "a failed stream must not look finished")
            last = events[-1]
            err = json.loads(last)
            self.assertIn("error", err, "the last data event must be an error")
            self.assertTrue(err["error"].get("message"))
            self.assertNotIn('"finish_reason":"stop"', body.decode())
            recs = gw.access_records(1)
            self.assertNotEqual(recs[-1]["outcome"], "ok")
        finally:
            if gw:
                gw.stop()
            up.stop()


def main():
    global SLUICE
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
