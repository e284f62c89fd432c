"""Helpers for the hardening and adversarial tests: hostile upstreams, a gateway whose stderr is
drained (so a long test full of warnings cannot block it on a full pipe), raw sockets, and the
gateway's RSS and fds read from /proc. Standard library only; everything on 127.0.0.1."""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gateway_harness import FakeUpstream, Gateway, read_line_matching  # noqa: E402,F401

MODEL = "meta/llama-3.1-8b-instruct"


class HostileUpstream:
    """hostile_upstream.py in `mode` on an ephemeral port (`rcvbuf`: its --rcvbuf)."""

    def __init__(self, mode="ok", rcvbuf=0):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "hostile_upstream.py"), "--port", "0", "--mode", mode,
                                      "--rcvbuf", str(rcvbuf)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.port = int(read_line_matching(self.proc.stdout, "PORT", 10).split()[1])
        self.address = f"127.0.0.1:{self.port}"

    def stats(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            c.request("GET", "/_stats")
            return json.loads(c.getresponse().read())
        finally:
            c.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


class DrainedGateway(Gateway):
    """gateway_harness.Gateway, with its stderr read by a thread (kept: the last 200 lines)."""

    def __init__(self, sluice, config_text, workers=None):
        super().__init__(sluice, config_text, workers)
        self.stderr_tail = []
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.stderr_tail.append(line.decode(errors="replace"))
            del self.stderr_tail[:-200]

    def alive(self):
        return self.proc.poll() is None

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def reload(self, config_text):
        with open(self.config_path, "w") as f:
            f.write(config_text)
        self.proc.send_signal(signal.SIGHUP)

    def metrics(self):
        return self.admin("/metrics")[1]


def config(endpoints, extra="", limits="", timeouts="", pool_extra="", workers=1, admission=""):
    """A one-pool config over `endpoints` (host:port strings)."""
    eps = ", ".join(endpoints)

    def merged(defaults, overrides):  # "k: v" pairs; an override replaces the default of its key
        pairs = {}
        for p in (defaults + "," + overrides).split(","):
            if p.strip():
                k, v = p.split(":", 1)
                pairs[k.strip()] = v.strip()
        return ", ".join(f"{k}: {v}" for k, v in pairs.items())
    limits = merged("max_body_bytes: 65536, max_header_bytes: 8192, header_timeout_ms: 3000", limits)
    timeouts = merged("connect_ms: 500, first_byte_ms: 3000, idle_ms: 2000", timeouts)
    return f"""
listen: 127.0.0.1:0
admin: 127.0.0.1:0
workers: {workers}
limits: {{{limits}}}
timeouts: {{{timeouts}}}
drain_timeout_ms: 2000
pools:
  - name: chat
    policy: round_robin
    endpoints: [{eps}]
{pool_extra}
models:
  - name: {MODEL}
    pool: chat
{extra}
{admission}"""


def chat_body(stream=False, model=MODEL, content="hello", **extra):
    b = {"model": model, "messages": [{"role": "user", "content": content}]}
    if stream:
        b["stream"] = True
    b.update(extra)
    return json.dumps(b)


def post(port, body, headers=None, timeout=10, path="/v1/chat/completions"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"content-type": "application/json"}
        h.update(headers or {})
        c.request("POST", path, body=body, headers=h)
        r = c.getresponse()
        try:
            body = r.read()
        except http.client.IncompleteRead as e:  # a stream the gateway cut after its error event
            body = e.partial
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        c.close()


def request_bytes(body, path="/v1/chat/completions", headers=""):
    body = body.encode() if isinstance(body, str) else body
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{headers}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def recv_all(s, timeout=3.0, total=15.0):
    """Everything until EOF, a reset, `timeout` of silence or `total` seconds; (bytes, closed)."""
    s.settimeout(timeout)
    out = b""
    end = time.time() + total
    while time.time() < end:
        try:
            data = s.recv(65536)
        except socket.timeout:
            return out, False
        except (ConnectionResetError, BrokenPipeError):
            return out, True
        if not data:
            return out, True
        out += data
    return out, False


def count_responses(raw):
    return raw.count(b"HTTP/1.1 ") - raw.count(b"HTTP/1.1 100 ")


def statuses(raw):
    out = []
    for part in raw.split(b"HTTP/1.1 ")[1:]:
        try:
            out.append(int(part[:3]))
        except ValueError:
            pass
    return out


def healthy_request_works(test, gw):
    """A plain request still gets a 200 (and the gateway is alive)."""
    test.assertTrue(gw.alive(), "gateway died: " + "".join(gw.stderr_tail[-20:]))
    status, _, body = post(gw.port, chat_body())
    test.assertEqual(status, 200, body[:300])
