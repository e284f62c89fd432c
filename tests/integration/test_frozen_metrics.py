"""A replica whose /metrics freezes (serves the same bytes while it keeps receiving requests) is
detected by the gateway's scraper: its scrapes count as errors, its signals age into staleness
(sluice_endpoint_stale == 1) and the picker falls back to the gateway's own accounting, so the
replica still gets some traffic but not all of it. An idle replica whose metrics do not change is
not flagged. Real processes on loopback, bounded in time."""
import argparse
import json
import sys
import tempfile
import threading
import time
import unittest

import sluice_fleet as fleet

SLUICE = None


def distinct_load(port, stop, counts, worker):
    """Closed-loop chat load with no shared prefix, so only load (not cache affinity) steers picks."""
    i = 0
    while not stop.is_set():
        i += 1
        body = json.dumps({"model": fleet.MODEL, "max_tokens": 24, "stream": i % 2 == 0, "messages": [
            {"role": "user", "content": f"worker {worker} request {i}: " + "how is the fleet doing? " * 30}]})
        try:
            status, _ = fleet.http_req(port, "POST", "/v1/chat/completions", body, timeout=30)
            counts[status] = counts.get(status, 0) + 1
        except OSError as e:
            counts[type(e).__name__] = counts.get(type(e).__name__, 0) + 1
            time.sleep(0.05)


def series(admin, name):
    status, body = fleet.http_req(admin, "GET", "/metrics")
    assert status == 200
    out = {}
    for line in body.decode().splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            endpoint = labels.split('endpoint="', 1)[1].split('"', 1)[0]
            out[endpoint] = float(value)
    return out


class FrozenMetrics(unittest.TestCase):
    def test_frozen_metrics_become_stale_and_routing_stays_sane(self):
        sim, ports = fleet.start_sim(SLUICE, replicas=3)
        tmp = tempfile.TemporaryDirectory()
        gw = None
        try:
            gw, listen, admin = fleet.start_gateway(SLUICE, ports, tmp.name)
            time.sleep(1.0)
            # Idle fleet: nothing changes, nothing is sent, nothing is flagged.
            self.assertEqual(series(admin, "sluice_endpoint_stale"), {f"replica-{i}": 0.0 for i in range(3)})
            status, _ = fleet.http_req(ports[0], "POST", "/admin/faults", json.dumps({"metrics": "freeze"}))
            self.assertEqual(status, 200)
            stop = threading.Event()
            counts = {}
            threads = [threading.Thread(target=distinct_load, args=(listen, stop, counts, w)) for w in range(6)]
            for t in threads:
                t.start()
            stale = {}
            deadline = time.time() + 20
            while time.time() < deadline:
                time.sleep(0.5)
                stale = series(admin, "sluice_endpoint_stale")
                if stale.get("replica-0") == 1.0:
                    break
            time.sleep(2.0)  # keep routing with the stale replica for a while
            stop.set()
            for t in threads:
                t.join(timeout=40)
            self.assertEqual(stale.get("replica-0"), 1.0, stale)
            self.assertEqual(stale.get("replica-1"), 0.0, stale)
            errors = series(admin, "sluice_endpoint_scrape_errors_total")
            self.assertGreater(errors["replica-0"], 0, errors)
            picks = series(admin, "sluice_picks_total")
            total = sum(picks.values())
            self.assertGreater(picks["replica-0"], 0, picks)
            self.assertLess(picks["replica-0"], 0.8 * total, picks)
            self.assertEqual(set(counts), {200}, counts)
        finally:
            if gw:
                gw.stop()
            sim.stop()
            tmp.cleanup()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = args.sluice
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
