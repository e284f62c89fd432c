"""Kubernetes discovery (issue 17) against a fake API server (fake_kube_api.py: list + watch in the
real server's shapes, bearer-token checked): a pool with `discovery: {kubernetes: {inference_pool: ..}}`
takes its endpoints from the InferencePool's selector and targetPorts; pods added, made unready and
deleted change the pool's endpoints within one second; a broken watch reconnects with the last
resource version (no new list); a refused token gives a clear error and the pool keeps its last good
endpoints, and a rotated token file is picked up on the next connect. Discovered endpoints take the
pool's upstream_auth (the engine sees the pool's key) and kv_events default (the gateway subscribes at
the pod's IP); a pool's upstream_tls with discovery is refused (pods are reached over http).

Run: python3 test_k8s_discovery.py --sluice path/to/sluice (standard library only)."""
import argparse
import http.client
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_kube_api import FakeKube  # noqa: E402
from gateway_harness import FakeUpstream  # noqa: E402
from sluice_fleet import Proc, admin_metrics, free_port, http_req  # noqa: E402

SLUICE = None
SCALE = 3 if os.environ.get("SLUICE_SANITIZED") else 1


class KubernetesDiscovery(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.kube = FakeKube("tok-1")
        self.token = os.path.join(self.tmp.name, "token")
        with open(self.token, "w") as f:
            f.write("tok-1\n")
        self.kube.put("llama-0", "127.0.0.2")
        self.kube.put("llama-1", "127.0.0.3")
        self.kube.put("llama-2", "127.0.0.4", ready=False)
        listen, self.admin = free_port(), free_port()
        cfg = os.path.join(self.tmp.name, "sluice.yaml")
        with open(cfg, "w") as f:
            f.write(f"""listen: 127.0.0.1:{listen}
admin: 127.0.0.1:{self.admin}
workers: 1
pools:
  - name: chat
    health: {{enabled: false}}
    scrape: {{interval_ms: 1000}}
    discovery:
      kubernetes:
        inference_pool: llama
        namespace: ml
        api_server: http://127.0.0.1:{self.kube.port}
        token_path: {self.token}
models:
  - {{name: m, pool: chat}}
""")
        self.gw = Proc([SLUICE, "serve", "-c", cfg, "--access-log", "off", "--log-level", "info"], "serve")
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if http_req(self.admin, "GET", "/metrics")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.gw.stop()
        self.kube.stop()
        raise RuntimeError("gateway did not start: " + "".join(self.gw.err[-10:]))

    def tearDown(self):
        self.gw.stop()
        self.kube.stop()
        self.tmp.cleanup()

    def endpoints(self):
        text = admin_metrics(self.admin)
        return {m.group(1) for m in re.finditer(r'^sluice_endpoint_healthy\{pool="chat",endpoint="([^"]+)"\}', text, re.M)}

    def wait_endpoints(self, want, within=1.0):
        t0 = time.time()
        deadline = t0 + within * SCALE
        got = None
        while time.time() < deadline:
            got = self.endpoints()
            if got == want:
                return time.time() - t0
            time.sleep(0.02)
        self.fail(f"pool endpoints {got}, want {want} within {within}s; gateway log: {''.join(self.gw.err[-5:])}")

    def test_watch_add_unready_delete_reconnect_and_bad_token(self):
        self.wait_endpoints({"llama-0", "llama-1"}, within=5)  # ready pods only
        waits = [self.wait_endpoints({"llama-0", "llama-1"})]
        self.kube.put("llama-3", "127.0.0.5")
        waits.append(self.wait_endpoints({"llama-0", "llama-1", "llama-3"}))
        self.kube.put("llama-1", "127.0.0.3", ready=False)
        waits.append(self.wait_endpoints({"llama-0", "llama-3"}))
        self.kube.delete("llama-0")
        waits.append(self.wait_endpoints({"llama-3"}))
        self.kube.put("llama-2", "127.0.0.4", ready=True)
        waits.append(self.wait_endpoints({"llama-2", "llama-3"}))
        print("endpoint changes applied in " + ", ".join(f"{w * 1000:.0f} ms" for w in waits), file=sys.stderr)

        # A broken watch reconnects from the last version seen, without listing again.
        lists = self.kube.lists
        last_rv = str(self.kube.rv)
        self.kube.break_watches()
        deadline = time.time() + 3 * SCALE
        while time.time() < deadline and (len(self.kube.watch_rvs) < 2 or self.kube.live_watches() == 0):
            time.sleep(0.02)
        self.assertEqual(self.kube.watch_rvs[-1], last_rv)
        self.assertEqual(self.kube.lists, lists)
        self.kube.put("llama-4", "127.0.0.6")
        self.wait_endpoints({"llama-2", "llama-3", "llama-4"})

        # A refused token: a clear error, and the pool keeps its last good endpoints.
        self.kube.token = "tok-2"
        self.kube.break_watches()
        deadline = time.time() + 3 * SCALE
        while time.time() < deadline and not any("refused the credentials (401)" in l for l in self.gw.err):
            time.sleep(0.05)
        self.assertTrue(any("kubernetes discovery of pool chat" in l and "refused the credentials (401)" in l
                            and "keeping its last 3 endpoint(s)" in l for l in self.gw.err), "".join(self.gw.err[-5:]))
        time.sleep(0.3)
        self.assertEqual(self.endpoints(), {"llama-2", "llama-3", "llama-4"})
        self.assertIsNone(self.gw.p.poll())
        # The rotated token file is read on the next connect: discovery resumes.
        with open(self.token, "w") as f:
            f.write("tok-2\n")
        self.kube.put("llama-5", "127.0.0.7")
        self.wait_endpoints({"llama-2", "llama-3", "llama-4", "llama-5"}, within=4)


class DiscoveredEndpointsTakeThePoolDefaults(unittest.TestCase):
    def test_upstream_auth_and_kv_events_reach_discovered_pods(self):
        tmp = tempfile.TemporaryDirectory()
        up = FakeUpstream(host="127.0.0.2")  # the pod's IP, on loopback
        kube = FakeKube("tok", pool_ports=(up.port,))
        kube.put("llama-0", "127.0.0.2")
        events = socket.socket()  # where the pod's KV-event publisher would listen
        events.bind(("127.0.0.2", 0))
        events.listen(4)
        events.settimeout(5 * SCALE)
        gw = None
        try:
            token, key = os.path.join(tmp.name, "token"), os.path.join(tmp.name, "key")
            for path, text in ((token, "tok\n"), (key, "engine-secret-9\n")):
                with open(path, "w") as f:
                    f.write(text)
            listen, admin = free_port(), free_port()
            pool = f"""  - name: chat
    health: {{enabled: false}}
    upstream_auth: {{api_key_file: {key}}}
    kv_events: {{port: {events.getsockname()[1]}, offset_by_index: false}}
    discovery:
      kubernetes: {{inference_pool: llama, namespace: ml, api_server: 'http://127.0.0.1:{kube.port}', token_path: {token}}}
"""
            cfg = os.path.join(tmp.name, "sluice.yaml")
            with open(cfg, "w") as f:
                f.write(f"listen: 127.0.0.1:{listen}\nadmin: 127.0.0.1:{admin}\nworkers: 1\npools:\n{pool}"
                        "models:\n  - {name: m, pool: chat}\n")
            gw = Proc([SLUICE, "serve", "-c", cfg, "--access-log", "off", "--log-level", "warn"], "serve")
            # The gateway subscribes to the discovered pod's events address (pool port, pod IP).
            conn, _ = events.accept()
            conn.close()
            deadline = time.time() + 5 * SCALE
            status, raw = 0, b""
            while time.time() < deadline and status != 200:
                try:
                    c = http.client.HTTPConnection("127.0.0.1", listen, timeout=5)
                    c.request("POST", "/v1/chat/completions",
                              '{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}',
                              {"content-type": "application/json", "authorization": "Bearer client-key"})
                    r = c.getresponse()
                    status, raw = r.status, r.read()
                    c.close()
                except OSError:
                    pass
                if status != 200:
                    time.sleep(0.05)
            self.assertEqual(status, 200, raw)
            posts = [r for r in up.log() if r["method"] == "POST"]
            self.assertEqual([v for p in posts for k, v in p["headers"].items() if k.lower() == "authorization"],
                             ["Bearer engine-secret-9"] * len(posts))
            self.assertGreaterEqual(len(posts), 1)
            # A pool's upstream_tls cannot apply to discovered pods: refused, not sent in the clear.
            with open(cfg, "w") as f:
                f.write(f"listen: 127.0.0.1:{listen}\nadmin: 127.0.0.1:{admin}\nworkers: 1\npools:\n{pool}"
                        "    upstream_tls: {verify: false}\nmodels:\n  - {name: m, pool: chat}\n")
            r = subprocess.run([SLUICE, "validate", "-c", cfg], capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("pools[0].upstream_tls: cannot apply to discovered endpoints", r.stderr + r.stdout)
        finally:
            if gw:
                gw.stop()
            events.close()
            kube.stop()
            up.stop()
            tmp.cleanup()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
