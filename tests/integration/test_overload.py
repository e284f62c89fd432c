"""The fleet offered 3x its capacity (issue 6): `sluice serve -c` with tenants at three priorities in front
of two `sluice sim` replicas on loopback.

First the capacity is measured (closed loop, as many clients as the pool has slots), then an open-loop
load at 3x that rate is offered for a few seconds: 20% critical (priority 2), 40% standard (0), 40%
batch (-1, sheddable). Asserted: every request ends with a complete response or a clear OpenAI error
(429 shed / queue_full / rate limit, 503 queue_timeout, each with a Retry-After); nothing waits past the
queue-time budget (TTL) plus one service time; sheddable requests are shed before critical ones are
refused (critical nearly all served, batch mostly shed); the gateway's in-flight counts, queue and
reservations return to zero; the gateway's memory stays bounded. Figures are printed.

Run: python3 tests/integration/test_overload.py --sluice build/sluice
"""
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
from sluice_fleet import admin_metrics, metric, start_gateway, start_sim  # noqa: E402

SLUICE = None
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TTL_MS = 1500
SLOTS_PER_ENDPOINT = 4
# The gateway's peak RSS under 3x overload (23 MB seen in Release). Under ASan+UBSan every freed
# block waits in a 256 MB quarantine and every allocation carries redzones and shadow memory (407 MB
# seen in CI), so the bound there is looser: it still catches growth with the offered load.
RSS_LIMIT_MB = 1024 if os.environ.get("SLUICE_SANITIZED") == "1" else 100
TENANTS = {"critical": 2, "standard": 0, "batch": -1}


def sha(key):
    return hashlib.sha256(key.encode()).hexdigest()



def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


class Overload(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.sim, ports = start_sim(SLUICE, 2)
        tenants = "\n".join(f"  - {{name: {t}, priority: {p}, key_sha256: [{sha('key-' + t)}]}}"
                            for t, p in TENANTS.items())
        try:
            cls.gw, cls.listen, cls.admin = start_gateway(
                SLUICE, ports, cls.tmp.name, model=MODEL, max_in_flight_per_endpoint=SLOTS_PER_ENDPOINT,
                extra_yaml=f"""tenants:
{tenants}
admission:
  queue: {{max_requests: 64, ttl_ms: {TTL_MS}, retry_after_ms: 1000}}""")
        except Exception:
            cls.sim.stop()
            raise
        cls.slots = SLOTS_PER_ENDPOINT * len(ports)

    @classmethod
    def tearDownClass(cls):
        cls.gw.stop()
        cls.sim.stop()
        cls.tmp.cleanup()

    def one(self, tenant, out):
        """One streamed request; appends (tenant, status, code, seconds, complete, retry_after)."""
        t0 = time.perf_counter()
        c = http.client.HTTPConnection("127.0.0.1", self.listen, timeout=30)
        try:
            body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": f"{tenant} asks a question"}],
                               "max_tokens": 48, "stream": True})
            c.request("POST", "/v1/chat/completions", body=body,
                      headers={"content-type": "application/json", "authorization": f"Bearer key-{tenant}"})
            r = c.getresponse()
            data = r.read().decode()
            code, complete = None, False
            if r.status == 200:
                complete = data.rstrip().endswith("data: [DONE]") and '"error"' not in data
            else:
                code = json.loads(data)["error"]["code"]
            out.append((tenant, r.status, code, time.perf_counter() - t0, complete, r.getheader("retry-after")))
        except Exception as e:  # noqa: BLE001 - any transport failure is a test failure, recorded
            out.append((tenant, -1, repr(e), time.perf_counter() - t0, False, None))
        finally:
            c.close()

    def test_three_times_capacity(self):
        # ---- capacity: closed loop with as many clients as slots ----
        done, stop = [], time.time() + 3
        def closed():
            while time.time() < stop:
                self.one("critical", done)
        threads = [threading.Thread(target=closed) for _ in range(self.slots)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        ok = [d for d in done if d[1] == 200]
        capacity = len(ok) / 3
        service = sorted(d[3] for d in ok)[len(ok) // 2]
        self.assertGreater(capacity, 1)

        # ---- 3x capacity, open loop, 20/40/40 critical/standard/batch ----
        rate, seconds = 3 * capacity, 5
        mix = ["critical"] + ["standard"] * 2 + ["batch"] * 2
        results, threads = [], []
        start = time.perf_counter()
        peak_rss = 0.0
        for i in range(int(rate * seconds)):
            target = start + i / rate
            while time.perf_counter() < target:
                time.sleep(min(0.005, max(0.0, target - time.perf_counter())))
            th = threading.Thread(target=self.one, args=(mix[i % len(mix)], results))
            th.start()
            threads.append(th)
            if i % 20 == 0:
                peak_rss = max(peak_rss, rss_mb(self.gw.p.pid))
        for th in threads:
            th.join(60)
        peak_rss = max(peak_rss, rss_mb(self.gw.p.pid))

        by = {t: [r for r in results if r[0] == t] for t in TENANTS}
        def frac(t, pred):
            return sum(1 for r in by[t] if pred(r)) / max(1, len(by[t]))
        served = {t: frac(t, lambda r: r[1] == 200) for t in TENANTS}
        shed = frac("batch", lambda r: r[2] == "shed")
        codes = {}
        for r in results:
            codes[(r[1], r[2])] = codes.get((r[1], r[2]), 0) + 1
        slowest = max(r[3] for r in results)
        print(f"\n  overload: capacity {capacity:.1f} req/s ({self.slots} slots, median service {service * 1000:.0f} ms); "
              f"offered {rate:.1f} req/s for {seconds} s ({len(results)} requests)"
              f"\n    served: critical {served['critical']:.0%}, standard {served['standard']:.0%}, "
              f"batch {served['batch']:.0%} (batch shed {shed:.0%}); outcomes {codes}"
              f"\n    slowest answer {slowest:.2f} s (budget: TTL {TTL_MS} ms + service); gateway peak RSS {peak_rss:.0f} MB")

        # Every request ended with a complete response or a clear error with a Retry-After.
        for r in results:
            self.assertIn(r[1], (200, 429, 503), r)
            if r[1] == 200:
                self.assertTrue(r[4], r)
            else:
                self.assertIn(r[2], ("shed", "queue_full", "queue_timeout", "rate_limit_exceeded"), r)
                self.assertIsNotNone(r[5], r)
        # Nothing waited past its queue-time budget plus a generous service time.
        self.assertLess(slowest, TTL_MS / 1000 + 4 * service + 1.0)
        # Sheddable first: critical nearly all served, batch mostly shed, order by priority.
        self.assertGreaterEqual(served["critical"], 0.9)
        self.assertGreaterEqual(served["critical"], served["standard"])
        self.assertGreaterEqual(served["standard"], served["batch"])
        self.assertGreaterEqual(shed, 0.5)
        # The fleet was really overloaded: someone was refused.
        self.assertLess(sum(1 for r in results if r[1] == 200), len(results))
        self.assertLess(peak_rss, RSS_LIMIT_MB)

        # Everything returns to zero.
        deadline = time.time() + 5
        while time.time() < deadline:
            m = admin_metrics(self.admin)
            left = (metric(m, "sluice_endpoint_inflight_requests") or 0, metric(m, "sluice_queue_depth") or 0,
                    metric(m, "sluice_reservations_outstanding") or 0, metric(m, "sluice_active_requests") or 0)
            if left == (0, 0, 0, 0):
                break
            time.sleep(0.1)
        self.assertEqual(left, (0, 0, 0, 0), "in flight, queued, reservations, active")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
