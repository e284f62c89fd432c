#!/usr/bin/env python3
"""An adversarial suite against the gateway, beyond issue 14's cases: what an attacker would try.

  Framing       RFC 9112/9110 framing and header rules: obs-fold, bare CR / LF, NUL, header names
                with spaces, Content-Length lists / signs / overflow, duplicate Content-Length,
                chunk-size overflow, chunk extensions, absolute- and asterisk-form targets,
                HTTP/0.9, HTTP/1.0 keep-alive, HTTP/2 preface, unknown versions, bad methods
  Pipelining    hundreds of requests in one write, answered in order; a flood past the buffer
  Exhaustion    before authentication: slowloris, idle floods, dribbled bodies, bodies to a 401
  LyingUpstream an engine whose Content-Length is shorter/longer than its body, invalid chunked,
                200 KiB of headers, a non-HTTP answer

Every case asserts a sane answer (a 4xx/5xx or a clean close, never a smuggled or injected
request, never a response out of step), that the gateway is still alive, and that a normal
request works afterwards. Bounded (each test < 60 s), 127.0.0.1 only, every process stopped.

Run: python3 test_adversarial.py --sluice path/to/sluice [TestClass]"""
import argparse
import concurrent.futures
import json
import os
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile_harness import (MODEL, DrainedGateway, FakeUpstream, HostileUpstream, chat_body, config,  # noqa: E402
                             healthy_request_works, post, recv_all, request_bytes, statuses)

SLUICE = None
BODY = chat_body().encode()


def exchange(port, data, timeout=2.0, total=6.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        try:
            s.sendall(data)
        except OSError:
            pass
        return recv_all(s, timeout, total)
    finally:
        s.close()


class Framing(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = FakeUpstream()
        try:
            cls.gw = DrainedGateway(SLUICE, config([f"127.0.0.1:{cls.up.port}"], limits=", header_timeout_ms: 1500"))
        except Exception:
            cls.up.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.up.stop()

    def tearDown(self):
        healthy_request_works(self, self.gw)

    def upstream_headers(self):
        return [r["headers"] for r in self.up.log()]

    def refused(self, data, allowed=(400,), must_close=True):
        """Sends `data`: exactly one answer, in `allowed`, and (by default) the connection closed."""
        raw, closed = exchange(self.gw.port, data)
        got = statuses(raw)
        self.assertTrue(got, f"no answer to {data[:120]!r}")
        self.assertIn(got[0], allowed, raw[:300])
        self.assertEqual(len(got), 1, f"more than one answer (a second request was parsed): {raw[:600]!r}")
        if must_close:
            self.assertTrue(closed, "connection left open after a framing error")
        return raw

    def post_with(self, headers, body=BODY, line="POST /v1/chat/completions HTTP/1.1"):
        return (line + "\r\n" + headers).encode() + b"\r\n" + body

    # ---- header syntax

    def test_obs_fold_is_refused_or_unfolded_never_injected(self):
        n = len(self.up.log())
        raw, _ = exchange(self.gw.port, self.post_with(f"Host: x\r\nX-A: a\r\n X-Injected: yes\r\nContent-Length: {len(BODY)}\r\n"))
        self.assertIn(statuses(raw)[:1], ([400], [200]), raw[:300])
        for h in self.upstream_headers()[n:]:
            self.assertNotIn("x-injected", h)
            for v in h.values():
                self.assertNotIn("\r", v)
                self.assertNotIn("\n", v)

    def test_bare_cr_in_a_value(self):
        n = len(self.up.log())
        raw, _ = exchange(self.gw.port, self.post_with(f"Host: x\r\nX-A: a\rX-Injected: yes\r\nContent-Length: {len(BODY)}\r\n"))
        self.assertEqual(statuses(raw)[:1], [400], raw[:300])
        for h in self.upstream_headers()[n:]:
            self.assertNotIn("x-injected", h)

    def test_bare_lf_line_ends(self):
        raw, _ = exchange(self.gw.port, f"POST /v1/chat/completions HTTP/1.1\nHost: x\nContent-Length: {len(BODY)}\n\n".encode() + BODY)
        got = statuses(raw)
        self.assertLessEqual(len(got), 1)
        if got:
            self.assertIn(got[0], (200, 400))

    def test_nul_in_a_value(self):
        self.refused(self.post_with(f"Host: x\r\nX-A: a\x00b\r\nContent-Length: {len(BODY)}\r\n"))

    def test_space_before_colon(self):
        self.refused(self.post_with(f"Host: x\r\nContent-Length : {len(BODY)}\r\n"))
        self.refused(self.post_with("Host: x\r\nTransfer-Encoding : chunked\r\n", b"0\r\n\r\n" + request_bytes(BODY)))

    def test_space_inside_a_name(self):
        self.refused(self.post_with(f"Host: x\r\nX Bad: 1\r\nContent-Length: {len(BODY)}\r\n"))

    def test_line_starting_with_a_space_after_the_request_line(self):
        self.refused(self.post_with(f" Host: x\r\nContent-Length: {len(BODY)}\r\n"))

    def test_many_tiny_headers(self):
        raw, _ = exchange(self.gw.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"a:b\r\n" * 5000 + b"\r\n")
        self.assertIn(statuses(raw)[:1], ([431], [400]), raw[:200])

    # ---- Content-Length

    def test_content_length_forms(self):
        for cl in ["5, 5", "5,5", "+5", "-1", "0x5", "5 5", "99999999999999999999999", "5e0", ""]:
            with self.subTest(cl=cl):
                n = len(self.up.log())
                self.refused(self.post_with(f"Host: x\r\nContent-Length: {cl}\r\n", b"hello" + request_bytes(BODY)),
                             allowed=(400, 413))
                self.assertEqual(len(self.up.log()), n, "a request reached the engine")

    def test_two_different_content_lengths(self):
        self.refused(self.post_with(f"Host: x\r\nContent-Length: {len(BODY)}\r\nContent-Length: 5\r\n"))

    def test_content_length_with_whitespace_is_fine(self):
        raw, _ = exchange(self.gw.port, self.post_with(f"Host: x\r\nContent-Length:   {len(BODY)}  \r\nConnection: close\r\n"))
        self.assertEqual(statuses(raw), [200], raw[:300])

    def test_body_shorter_than_content_length_then_eof(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        s.sendall(self.post_with("Host: x\r\nContent-Length: 1000\r\n", BODY))
        s.shutdown(socket.SHUT_WR)
        raw, closed = recv_all(s, 3)
        s.close()
        self.assertTrue(closed)
        self.assertNotIn(b" 200 ", raw)

    # ---- chunked

    def chunked(self, chunks):
        return self.post_with("Host: x\r\nTransfer-Encoding: chunked\r\n", chunks)

    def test_chunk_size_overflow(self):
        for size in [b"f" * 17, b"f" * 64, b"1" + b"0" * 40, b"-5", b"0x5", b" 5"]:
            with self.subTest(size=size):
                self.refused(self.chunked(size + b"\r\nhello\r\n0\r\n\r\n"), allowed=(400, 413))

    def test_huge_chunk_size_line(self):
        # 200 KB of leading zeros is still the size 5 (then "hello" is not JSON: an ordinary 400);
        # 2 MB is past the connection's read buffer: refused and closed.
        raw, _ = exchange(self.gw.port, self.chunked(b"0" * 200000 + b"5\r\nhello\r\n0\r\n\r\n"))
        self.assertEqual(statuses(raw), [400], raw[:200])
        self.refused(self.chunked(b"0" * 2000000 + b"5\r\nhello\r\n0\r\n\r\n"), allowed=(400, 413, 431))

    def test_chunk_extensions(self):
        body = f"{len(BODY):x};name=value;q=\"x\"\r\n".encode() + BODY + b"\r\n0;last\r\n\r\n"
        raw, _ = exchange(self.gw.port, self.chunked(body))
        self.assertEqual(statuses(raw)[:1], [200], raw[:300])
        huge = f"{len(BODY):x};".encode() + b"e" * 2000000 + b"\r\n" + BODY + b"\r\n0\r\n\r\n"
        self.refused(self.chunked(huge), allowed=(400, 413, 431))

    def test_chunked_body_over_max_body_bytes(self):
        piece = b"x" * 30000
        data = b"".join(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" for _ in range(4)) + b"0\r\n\r\n"
        self.refused(self.chunked(data), allowed=(413,))

    def test_chunked_with_trailers_and_missing_final_crlf(self):
        body = f"{len(BODY):x}\r\n".encode() + BODY + b"\r\n0\r\nX-Trailer: 1\r\n\r\n"
        raw, _ = exchange(self.gw.port, self.chunked(body))
        self.assertIn(statuses(raw)[:1], ([200], [400]))
        raw, closed = exchange(self.gw.port, self.chunked(f"{len(BODY):x}\r\n".encode() + BODY + b"0\r\n\r\n"))
        self.assertIn(statuses(raw)[:1], ([400], []))

    # ---- request line

    def test_absolute_form_target(self):
        n = len(self.up.log())
        raw, _ = exchange(self.gw.port, self.post_with(f"Host: x\r\nContent-Length: {len(BODY)}\r\nConnection: close\r\n",
                                                        line="POST http://evil.example/v1/chat/completions HTTP/1.1"))
        self.assertIn(statuses(raw)[:1], ([404], [400], [200]), raw[:200])
        for r in self.up.log()[n:]:
            self.assertNotIn("evil", r["headers"].get("host", ""))

    def test_asterisk_and_odd_targets(self):
        for line in [b"OPTIONS * HTTP/1.1", b"GET ../../etc/passwd HTTP/1.1", b"GET /healthz#frag HTTP/1.1",
                     b"GET /%00 HTTP/1.1", b"GET " + b"/a" * 3000 + b" HTTP/1.1"]:
            with self.subTest(line=line[:40]):
                raw, _ = exchange(self.gw.port, line + b"\r\nHost: x\r\nConnection: close\r\n\r\n")
                got = statuses(raw)
                self.assertEqual(len(got), 1, raw[:200])
                self.assertIn(got[0], (400, 404, 405, 431))

    def test_versions(self):
        for line, allowed in [(b"GET /healthz", (400,)), (b"GET /healthz HTTP/1.2", (200, 400, 505)),
                              (b"GET /healthz HTTP/2.0", (400, 505)), (b"GET /healthz HTTP/9", (400, 505)),
                              (b"GET /healthz http/1.1", (400,))]:
            with self.subTest(line=line):
                raw, _ = exchange(self.gw.port, line + b"\r\nHost: x\r\n\r\n")
                got = statuses(raw)
                if got:  # a close without an answer is sane for HTTP/0.9 too
                    self.assertIn(got[0], allowed, raw[:200])
                    self.assertEqual(len(got), 1)

    def test_http2_preface(self):
        raw, closed = exchange(self.gw.port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00" * 64)
        self.assertTrue(closed)
        self.assertIn(statuses(raw)[:1], ([400], [505], []))

    def test_bad_methods(self):
        for method in [b"G@T", b"get", b"", b"\x16\x03\x01"]:
            with self.subTest(method=method):
                raw, _ = exchange(self.gw.port, method + b" /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                got = statuses(raw)
                if got:
                    self.assertIn(got[0], (400, 405, 501))

    def test_http10_keep_alive(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        try:
            s.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            first = s.recv(4096)
            self.assertIn(b" 200 ", first)
            s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")  # no keep-alive: answered, then closed
            raw, closed = recv_all(s, 2)
            self.assertEqual(statuses(raw), [200])
            self.assertTrue(closed)
        finally:
            s.close()

    def test_connection_close_honoured(self):
        raw, closed = exchange(self.gw.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(statuses(raw), [200])
        self.assertTrue(closed)

    def test_expect_100_continue_over_the_limit(self):
        raw, _ = exchange(self.gw.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100000000\r\n\r\n")
        self.assertEqual(statuses(raw), [413], raw[:200])

    def test_expect_100_continue_answered_only_while_the_body_is_awaited(self):
        # The body held back: 100 Continue, then the answer once it comes.
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        try:
            s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      f"Content-Length: {len(BODY)}\r\nConnection: close\r\n\r\n".encode())
            s.settimeout(3)
            interim = s.recv(4096)
            self.assertTrue(interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim[:100])
            s.sendall(BODY)
            raw, _ = recv_all(s, 3)
            self.assertEqual(statuses(interim[25:] + raw), [200], raw[:300])
        finally:
            s.close()
        # The body sent with the head (allowed, RFC 9110 10.1.1): nothing to continue, the answer alone.
        raw, _ = exchange(self.gw.port, self.post_with("Host: x\r\nExpect: 100-continue\r\n"
                                                       f"Content-Length: {len(BODY)}\r\nConnection: close\r\n"))
        self.assertEqual(statuses(raw), [200], raw[:300])

    def test_content_length_zero_post(self):
        raw, _ = exchange(self.gw.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        self.assertEqual(statuses(raw), [400])


class Pipelining(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.up = FakeUpstream()
        try:
            cls.gw = DrainedGateway(SLUICE, config([f"127.0.0.1:{cls.up.port}"]))
        except Exception:
            cls.up.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.up.stop()

    def test_500_pipelined_gets_answered_in_order(self):
        reqs = b"".join(f"GET /healthz?i={i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(499))
        reqs += b"GET /nope-last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        raw, closed = exchange(self.gw.port, reqs, timeout=5, total=20)
        got = statuses(raw)
        self.assertEqual(got, [200] * 499 + [404])
        healthy_request_works(self, self.gw)

    def test_pipelined_posts_in_order(self):
        reqs = b"".join(request_bytes(chat_body(content=f"n{i}"), headers=f"x-request-id: pipe-{i:03d}\r\n") for i in range(30))
        raw, _ = exchange(self.gw.port, reqs, timeout=5, total=30)
        ids = [l.split(b":")[1].strip().decode() for l in raw.split(b"\r\n") if l.lower().startswith(b"x-request-id:")]
        self.assertEqual(ids, [f"pipe-{i:03d}" for i in range(30)])
        healthy_request_works(self, self.gw)

    def test_pipelining_flood_is_bounded(self):
        # 20 MB of pipelined requests while the client never reads: the gateway must neither buffer
        # it all nor die; the connection is cut or throttled by TCP.
        base = self.gw.rss_kib()
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        s.settimeout(0.5)
        chunk = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 2000
        sent = 0
        t0 = time.time()
        try:
            while sent < 20 << 20 and time.time() - t0 < 8:
                try:
                    sent += s.send(chunk)
                except socket.timeout:
                    break  # the gateway stopped reading: TCP back-pressure works
                except OSError:
                    break
        finally:
            s.close()
        grown = self.gw.rss_kib() - base
        print(f"\n  flood: sent {sent >> 10} KiB before back-pressure, RSS +{grown >> 10} MiB", file=sys.stderr)
        # Release: +0 MiB (the loop reads 4 KiB at a time and stops when its writes block). Under
        # ASan every freed block waits in a 256 MB quarantine: a flood of ~100k tiny requests fills
        # it (+260 MiB seen once the data path got faster), so there the bound only catches
        # gross growth; the Release run of this test holds the tight one.
        limit = (64 + 320) << 10 if os.environ.get("SLUICE_SANITIZED") == "1" else 64 << 10
        self.assertLess(grown, limit)
        time.sleep(0.3)
        healthy_request_works(self, self.gw)


def sha(key):
    import hashlib
    return hashlib.sha256(key.encode()).hexdigest()


class Exhaustion(unittest.TestCase):
    """Before authentication (tenants configured: every proxied request needs a key)."""

    @classmethod
    def setUpClass(cls):
        cls.up = FakeUpstream()
        tenants = f"tenants:\n  - name: t\n    key_sha256: [{sha('k')}]"
        try:
            cls.gw = DrainedGateway(SLUICE, config([f"127.0.0.1:{cls.up.port}"], extra=tenants,
                                                   limits=", header_timeout_ms: 1000, idle_timeout_ms: 1500, max_connections: 400"))
        except Exception:
            cls.up.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.up.stop()

    def authed_works(self):
        self.assertTrue(self.gw.alive())
        status, _, body = post(self.gw.port, chat_body(), headers={"authorization": "Bearer k"})
        self.assertEqual(status, 200, body[:200])

    def wait_fds(self, limit, timeout=6):
        deadline = time.time() + timeout
        while time.time() < deadline and self.gw.fds() > limit:
            time.sleep(0.2)
        return self.gw.fds()

    def test_slowloris_closed_by_header_timeout(self):
        base = self.gw.fds()
        socks = []
        try:
            for i in range(300):
                s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                socks.append(s)
            self.authed_works()  # still serving while they hang
            time.sleep(1.5)
            closed = 0
            for s in socks:
                s.settimeout(1)
                try:
                    closed += s.recv(4096) is not None
                except (socket.timeout, ConnectionResetError):
                    pass
            self.assertGreater(closed, 290, "slowloris connections must be closed at header_timeout")
        finally:
            for s in socks:
                s.close()
        self.assertLess(self.wait_fds(base + 10), base + 10)
        self.authed_works()

    def test_dribbled_body_closed_by_timeout(self):
        s = socket.create_connection(("127.0.0.1", self.gw.port), timeout=5)
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
            t0 = time.time()
            raw = b""
            s.settimeout(0.2)
            while time.time() - t0 < 5:
                try:
                    s.send(b"x")
                    data = s.recv(4096)
                    if not data:
                        break
                    raw += data
                except socket.timeout:
                    continue
                except OSError:
                    break
            self.assertLess(time.time() - t0, 4, "a dribbled body must be cut at the body timeout")
            self.assertIn(b" 408 ", raw)
        finally:
            s.close()
        self.authed_works()

    def test_idle_flood_returns_fds(self):
        base = self.gw.fds()
        socks = [socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) for _ in range(300)]
        for s in socks:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.3)
        self.authed_works()
        for s in socks:
            s.close()
        self.assertLess(self.wait_fds(base + 10), base + 10)

    def test_unauthenticated_bodies_get_401_not_forwarded(self):
        n = len(self.up.log())
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            codes = list(ex.map(lambda i: post(self.gw.port, chat_body(content="x" * 60000))[0], range(64)))
        self.assertEqual(set(codes), {401})
        self.assertEqual(len(self.up.log()), n)
        self.authed_works()


class LyingUpstream(unittest.TestCase):
    """hostile_upstream.py in `ok` mode; each request picks its lie with `x-hostile`."""

    @classmethod
    def setUpClass(cls):
        cls.up = HostileUpstream("ok")
        try:
            cls.gw = DrainedGateway(SLUICE, config([cls.up.address], timeouts=", first_byte_ms: 2000, idle_ms: 1000"))
        except Exception:
            cls.up.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.up.stop()

    def tearDown(self):
        healthy_request_works(self, self.gw)

    def lie(self, mode, stream=False):
        return post(self.gw.port, chat_body(stream=stream), headers={"x-hostile": mode}, timeout=15)

    def test_content_length_longer_than_body(self):
        status, _, body = self.lie("short_cl")
        self.assertEqual(status, 502, body[:200])

    def test_content_length_shorter_than_body(self):
        # The junk after the body must not be read as the next response on a reused connection.
        for _ in range(3):
            status, _, body = self.lie("long_cl")
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(body)["object"], "chat.completion")
            status, _, body = post(self.gw.port, chat_body())
            self.assertEqual(status, 200, body[:200])
            self.assertEqual(json.loads(body)["object"], "chat.completion")

    def test_invalid_chunked(self):
        status, _, body = self.lie("bad_chunked", stream=True)
        if status == 200:  # the stream had started: it ends with an error event
            self.assertIn(b"error", body)
        else:
            self.assertEqual(status, 502)

    def test_huge_response_headers(self):
        status, _, body = self.lie("huge_headers")
        self.assertEqual(status, 502, body[:200])

    def test_not_http(self):
        status, _, body = self.lie("garbage")
        self.assertEqual(status, 502, body[:200])

    def test_many_lies_concurrently(self):
        modes = ["short_cl", "long_cl", "bad_chunked", "huge_headers", "garbage", "midfail", "ok"] * 6
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            codes = list(ex.map(lambda m: self.lie(m, stream=m in ("bad_chunked", "midfail"))[0], modes))
        self.assertTrue(set(codes) <= {200, 502, 504}, codes)


def main():
    global SLUICE
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
