"""Process helpers for integration tests that need a real fleet: `sluice sim` replicas and
`sluice serve` in front of them on loopback ephemeral ports, a bounded chat load, and clean stops.
Standard library only. Not a test itself (ctest runs tests/integration/test_*.py only)."""
import contextlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

MODEL = "meta-llama/Llama-3.1-8B-Instruct"



# The sanitized build (scripts/test-asan.sh exports SLUICE_SANITIZED=1) runs several times slower.
SANITIZED_SLOWDOWN = 3 if os.environ.get("SLUICE_SANITIZED") == "1" else 1


def wait_for(cond, timeout, step=0.05):
    """Polls cond() until it is truthy, for up to `timeout` seconds (times SANITIZED_SLOWDOWN);
    returns its last value."""
    deadline = time.time() + timeout * SANITIZED_SLOWDOWN
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return cond()

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_req(port, method, path, body=None, timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"content-type": "application/json"} if body is not None else {}
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def metric(text, name, **labels):
    """The sum of the samples of `name` whose labels include `labels` in Prometheus text; None when none."""
    total = None
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total = (total or 0) + float(line.rsplit(" ", 1)[1])
    return total


def admin_metrics(admin_port):
    """The gateway's /metrics text (admin listener)."""
    return http_req(admin_port, "GET", "/metrics")[1].decode()


class Proc:
    def __init__(self, args, name):
        self.name = name
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err = []
        threading.Thread(target=self._drain_err, daemon=True).start()

    def _drain_err(self):
        for line in self.p.stderr:
            self.err.append(line)
            del self.err[:-50]

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=10)


def start_sim(sluice, replicas=3, *args):
    """`sluice sim` with `replicas` replicas on ephemeral ports (extra flags in `args`); returns
    (proc, ports) once every replica reported its port."""
    sim = Proc([sluice, "sim", "--replicas", str(replicas), "--base-port", "0", "--seed", "7", *args], "sim")
    ports = []
    deadline = time.time() + 30
    while len(ports) < replicas and time.time() < deadline:
        line = sim.p.stdout.readline()
        if not line:
            break
        if "listening on" in line:
            ports.append(int(line.rsplit(":", 1)[1]))
    if len(ports) < replicas:
        sim.stop()
        raise RuntimeError("sluice sim did not report its ports: " + "".join(sim.err[-10:]))
    threading.Thread(target=lambda: [None for _ in sim.p.stdout], daemon=True).start()
    return sim, ports


def load_loop(port, stop, model, counts):
    """Closed-loop chat load: shared system prompt + per-user suffix, short outputs, bounded by `stop`."""
    system = "You are a careful assistant for the sluice operations team. " * 20
    i = 0
    while not stop.is_set():
        i += 1
        body = json.dumps({"model": model, "max_tokens": 24, "stream": i % 2 == 0, "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"question {i % 13}: how is the fleet doing?"}]})
        try:
            status, _ = http_req(port, "POST", "/v1/chat/completions", body, timeout=30)
            counts[status] = counts.get(status, 0) + 1
        except OSError as e:
            counts[type(e).__name__] = counts.get(type(e).__name__, 0) + 1
            time.sleep(0.05)


def start_gateway(sluice, sim_ports, tmpdir, pool="chat", model=MODEL, max_in_flight_per_endpoint=256, extra_yaml="",
                  endpoint_yaml=(), pool_yaml=""):
    """`sluice serve` over the replicas (named replica-0..N-1), `extra_yaml` appended to its config
    (tenants:, admission:), `endpoint_yaml[i]` more keys of endpoint i (kv_events: ...), `pool_yaml`
    more lines of the pool (indented 4); returns (proc, listen_port, admin_port) once the admin
    listener answers /metrics, or raises with the gateway's stderr."""
    listen, admin = free_port(), free_port()
    more = lambda i: f", {endpoint_yaml[i]}" if i < len(endpoint_yaml) else ""
    eps = "\n".join(f"      - {{address: 127.0.0.1:{p}, name: replica-{i}{more(i)}}}" for i, p in enumerate(sim_ports))
    cfg = os.path.join(tmpdir, f"sluice-{listen}.yaml")
    with open(cfg, "w") as f:
        f.write(f"""listen: 127.0.0.1:{listen}
admin: 127.0.0.1:{admin}
workers: 2
pools:
  - name: {pool}
    kind: chat
    endpoints:
{eps}
    scrape: {{interval_ms: 50, stale_after_ms: 500}}
    max_in_flight_per_endpoint: {max_in_flight_per_endpoint}
{pool_yaml}models:
  - {{name: {model}, pool: {pool}}}
{extra_yaml}
""")
    gw = Proc([sluice, "serve", "-c", cfg, "--access-log", "off", "--log-level", "warn"], "serve")
    deadline = time.time() + 30
    while time.time() < deadline and gw.p.poll() is None:
        try:
            if http_req(admin, "GET", "/metrics")[0] == 200:
                return gw, listen, admin
        except OSError:
            pass
        time.sleep(0.2)
    gw.stop()
    raise RuntimeError(f"sluice serve did not answer /metrics on the admin listener: {''.join(gw.err[-10:])}")


@contextlib.contextmanager
def gateway_over_sim(sluice, replicas, sim_args=(), pool_yaml=""):
    """`sluice sim` with `replicas` replicas (extra flags `sim_args`) and `sluice serve` over them
    (`pool_yaml`: more lines of the pool, as start_gateway's): yields (listen, admin) ports; both are
    stopped after."""
    sim, ports = start_sim(sluice, replicas, *sim_args)
    tmp = tempfile.TemporaryDirectory()
    gw = None
    try:
        gw, listen, admin = start_gateway(sluice, ports, tmp.name, pool_yaml=pool_yaml)
        yield listen, admin
    finally:
        if gw:
            gw.stop()
        sim.stop()
        tmp.cleanup()


def streams_open_loop(listen, first, n, rate, rng):
    """Requests first..first+n-1, each a streamed chat (8 output tokens; a prompt of 20, 200, 600 or
    1,500 words by i % 4), sent open loop (exponential gaps at `rate`/s from `rng`); returns their
    statuses once all have answered."""
    statuses = []

    def ask(i):
        words = [20, 200, 600, 1500][i % 4]
        body = json.dumps({"model": MODEL, "max_tokens": 8, "stream": True, "ignore_eos": True,
                           "messages": [{"role": "user", "content": f"request {i}: " + "word " * words * 4}]})
        statuses.append(http_req(listen, "POST", "/v1/chat/completions", body, timeout=60)[0])

    threads = []
    for i in range(first, first + n):
        t = threading.Thread(target=ask, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(rng.expovariate(rate))
    for t in threads:
        t.join()
    return statuses


def learned_frontend_ms(admin):
    """The sluice policy's learned engine front end (/debug/pick's frontend_ms term)."""
    probe = json.dumps({"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "x " * 400}]})
    return json.loads(http_req(admin, "POST", "/debug/pick", probe)[1])["candidates"][0]["terms"]["frontend_ms"]


class RedisServer:
    """redis-server (Debian's) on a unix socket in a temp dir, no persistence; kill() stops it (the
    socket path stays, so start() brings up an empty one where clients reconnect), stop() also
    removes the dir."""

    def __init__(self, prefix="sluice-redis-"):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.sock = os.path.join(self.dir, "redis.sock")
        self.p = None
        self.start()

    def start(self):
        self.p = subprocess.Popen(["redis-server", "--port", "0", "--unixsocket", self.sock, "--save", "",
                                   "--appendonly", "no", "--dir", self.dir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.cli("PING").strip() == "PONG":
                return
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def cli(self, *args):
        try:
            return subprocess.run(["redis-cli", "-s", self.sock, *args], capture_output=True, text=True,
                                  timeout=5).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""

    def kill(self):
        if self.p and self.p.poll() is None:
            self.p.kill()
            self.p.wait(timeout=10)

    def stop(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
