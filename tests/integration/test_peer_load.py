"""Integration test of shared in-flight load between gateway replicas (`peer_load:`): a real
redis-server on a unix socket in a temp dir, one `sluice sim` (3 replicas), two `sluice serve`
replicas A and B sharing load over the Redis channel, all on loopback ephemeral ports.

Covers: long streams sent through A show up in B's view (sluice_peer_load_in_flight, the peers
gauge, and /debug/pick's peer_in_flight) while B itself has nothing in flight; garbage published on
the channel is counted (sluice_peer_load_decode_errors_total) and harmless (B still routes, A's
load still applies); after A is killed, its load expires from B's view within the ttl; with Redis
killed, B still routes (the local accounting) and counts the link down.

Run: /usr/bin/python3 test_peer_load.py --sluice path/to/sluice"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import metrics_contract  # noqa: E402
from sluice_fleet import RedisServer, admin_metrics, http_req, metric, start_gateway, start_sim, wait_for  # noqa: E402

SLUICE = None
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
SCALE = 3.0 if os.environ.get("SLUICE_SANITIZED") else 1.0
TTL_MS = 600
STREAMS = 6


def stream(port, results):
    """One long streaming chat request; records its status (or the error that ended it)."""
    body = json.dumps({"model": MODEL, "max_tokens": 4000, "stream": True, "ignore_eos": True,
                       "messages": [{"role": "user", "content": "tell me a long story " * 40}]})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json"})
        r = c.getresponse()
        while r.read(4096):
            pass
        results.append(r.status)
    except (OSError, http.client.HTTPException) as e:
        results.append(type(e).__name__)
    finally:
        c.close()


def peer_in_flight(admin):
    return metric(admin_metrics(admin), "sluice_peer_load_in_flight", pool="chat") or 0


class PeerLoadTest(unittest.TestCase):
    def test_load_through_a_shows_in_b_and_expires(self):
        tmp = tempfile.mkdtemp(prefix="sluice-peer-")
        redis = RedisServer(prefix="sluice-peer-redis-")
        sim, ports = start_sim(SLUICE, 3, "--max-num-seqs", "64")
        procs = [sim]
        try:
            def peer_yaml(name):
                return (f"peer_load: {{redis: 'unix://{redis.sock}', channel: 'test:peer-load', interval_ms: 5, "
                        f"ttl_ms: {TTL_MS}, gateway_id: {name}}}\n")
            a, a_port, a_admin = start_gateway(SLUICE, ports, tmp, extra_yaml=peer_yaml("gw-a"))
            procs.append(a)
            b, b_port, b_admin = start_gateway(SLUICE, ports, tmp, extra_yaml=peer_yaml("gw-b"))
            procs.append(b)
            # Both linked: each hears the other's heartbeat.
            self.assertTrue(wait_for(lambda: metric(admin_metrics(b_admin), "sluice_peer_load_peers", pool="chat") == 1, 5),
                            admin_metrics(b_admin))
            self.assertEqual(metric(admin_metrics(a_admin), "sluice_peer_load_redis_up"), 1)
            # Every peer-load family is in the metrics contract, with its type.
            documented = metrics_contract.families()
            exported = dict(re.findall(r"# TYPE (sluice_peer_load_\S+) (\S+)", admin_metrics(b_admin)))
            self.assertEqual(len(exported), 7, exported)
            for name, kind in exported.items():
                self.assertEqual(documented.get(name, ("missing",))[0], kind, name)

            results = []
            threads = [threading.Thread(target=stream, args=(a_port, results), daemon=True) for _ in range(STREAMS)]
            for t in threads:
                t.start()
            # A's streams are in B's view, though B dispatched nothing.
            self.assertTrue(wait_for(lambda: peer_in_flight(b_admin) == STREAMS, 5),
                            f"B sees {peer_in_flight(b_admin)} of A's {STREAMS} streams")
            self.assertEqual(peer_in_flight(a_admin), 0)  # A's own load is not a peer's
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "where would this go?"}]})
            status, raw = http_req(b_admin, "POST", "/debug/pick", body)
            self.assertEqual(status, 200, raw)
            cands = json.loads(raw)["candidates"]
            self.assertEqual(sum(c["peer_in_flight"] for c in cands), STREAMS, raw)
            self.assertEqual(sum(c["in_flight"] for c in cands), 0, raw)

            # Garbage on the channel: counted, dropped, harmless.
            for junk in ("hello", "\x95\x01", "[1, \"gw-x\", 0, 0, []]"):
                redis.cli("PUBLISH", "test:peer-load", junk)
            self.assertTrue(wait_for(lambda: (metric(admin_metrics(b_admin), "sluice_peer_load_decode_errors_total") or 0) >= 3, 5))
            status, _ = http_req(b_port, "POST", "/v1/chat/completions",
                                 json.dumps({"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}),
                                 timeout=30)
            self.assertEqual(status, 200)
            self.assertEqual(peer_in_flight(b_admin), STREAMS)
            self.assertGreater(metric(admin_metrics(a_admin), "sluice_peer_load_reports_total", direction="sent"), 0)

            # A dies: no phantom load in B after the ttl.
            a.p.send_signal(signal.SIGKILL)
            a.p.wait(timeout=10)
            t0 = time.time()
            self.assertTrue(wait_for(lambda: peer_in_flight(b_admin) == 0, 5), "A's load did not expire from B's view")
            gone = time.time() - t0
            self.assertLess(gone, (TTL_MS / 1000 + 1.0) * SCALE)
            self.assertEqual(metric(admin_metrics(b_admin), "sluice_peer_load_peers", pool="chat"), 0)
            print(f"\nA's {STREAMS} streams seen by B; gone from B's view {gone * 1000:.0f} ms after A was killed "
                  f"(ttl {TTL_MS} ms)", file=sys.stderr)

            # Redis dies: B counts the link down and still routes.
            redis.kill()
            self.assertTrue(wait_for(lambda: metric(admin_metrics(b_admin), "sluice_peer_load_redis_up") == 0, 5))
            status, _ = http_req(b_port, "POST", "/v1/chat/completions",
                                 json.dumps({"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}),
                                 timeout=30)
            self.assertEqual(status, 200)
            self.assertGreater(metric(admin_metrics(b_admin), "sluice_peer_load_redis_errors_total"), 0)
        finally:
            for p in reversed(procs):
                p.stop()
            redis.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
