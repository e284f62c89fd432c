"""Process helpers for the gateway's integration tests: start the fake upstream and `sluice serve`
on loopback ephemeral ports, and always stop them. Standard library only."""
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import http.client

HERE = os.path.dirname(os.path.abspath(__file__))


def access_log_records(path):
    """The whole lines of a JSON-lines access log, parsed. The gateway writes it through a stdio
    buffer, so the file can end in the first part of a line (as a log shipper sees it): that part
    is left for the next read."""
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    return [json.loads(l) for l in text[: text.rfind("\n") + 1].split("\n") if l.strip()]


def read_line_matching(stream, needle, timeout):
    """Reads lines from a pipe until one contains `needle`; returns it (or raises)."""
    deadline = time.time() + timeout
    seen = []
    while time.time() < deadline:
        r, _, _ = select.select([stream], [], [], max(0.0, deadline - time.time()))
        if not r:
            break
        line = stream.readline()
        if not line:
            break
        line = line.decode(errors="replace")
        seen.append(line)
        if needle in line:
            return line
    raise RuntimeError(f"did not see {needle!r} in time; got: {''.join(seen)[-2000:]}")


class FakeUpstream:
    def __init__(self, host="127.0.0.1"):
        self.host = host
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_upstream.py"), "--port", "0", "--host", host],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = read_line_matching(self.proc.stdout, "PORT", 10)
        self.port = int(line.split()[1])

    def get(self, path):
        c = http.client.HTTPConnection(self.host, self.port, timeout=5)
        c.request("GET", path)
        body = c.getresponse().read()
        c.close()
        return json.loads(body)

    def log(self):
        return self.get("/_log")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


class Gateway:
    def __init__(self, sluice, config_text, workers=None):
        self.dir = tempfile.mkdtemp(prefix="sluice-gw-")
        self.config_path = os.path.join(self.dir, "config.yaml")
        self.access_log = os.path.join(self.dir, "access.log")
        with open(self.config_path, "w") as f:
            f.write(config_text)
        cmd = [sluice, "serve", "-c", self.config_path, "--access-log", self.access_log]
        if workers:
            cmd += ["--workers", str(workers)]
        # Unbuffered: read_line_matching selects on the pipe, and lines already in a Python buffer
        # would never make it readable again.
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, bufsize=0)
        # Sanitized builds start several times slower (a loaded CI machine: more still).
        line = read_line_matching(self.proc.stderr, "listening on", 30 if os.environ.get("SLUICE_SANITIZED") == "1" else 10)
        # "sluice listening on http://127.0.0.1:P (admin http://127.0.0.1:A), N workers"
        parts = line.split("http://")
        self.port = int(parts[1].split(":")[1].split()[0])
        self.admin_port = int(parts[2].split(":")[1].split(")")[0])

    def conn(self, timeout=10):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=10):
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
        finally:
            c.close()

    def admin(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=5)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def access_records(self, min_count=0, timeout=3, until=None):
        """Access-log lines (flushed every 250 ms by the gateway), until there are min_count of them
        and until(records) holds, or the timeout (whole lines only: access_log_records)."""
        deadline = time.time() + timeout
        while True:
            recs = access_log_records(self.access_log)
            if (len(recs) >= min_count and (until is None or until(recs))) or time.time() > deadline:
                return recs
            time.sleep(0.05)

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(5)


def loopback_endpoints(text):
    """The example config's engine addresses (10.0.0.x, never to be contacted from a test) replaced by
    loopback ports where nothing listens (bound, read back, closed), one per address."""
    import socket

    def free(_m):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        return f"127.0.0.1:{port}"
    out = re.sub(r"10\.0\.0\.\d+:\d+", free, text)
    assert "10.0.0." not in out
    return out


def raw_exchange(port, data, timeout=5, wait_before_read=0.0, shut_write=False):
    """Sends raw bytes, returns everything received until the server closes or `timeout`."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if shut_write:
            s.shutdown(socket.SHUT_WR)
        if wait_before_read:
            time.sleep(wait_before_read)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def parse_status(raw):
    head = raw.split(b"\r\n", 1)[0].decode()
    return int(head.split()[1]) if head.startswith("HTTP/1.1") else None


def body_of(raw):
    return raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in raw else b""
