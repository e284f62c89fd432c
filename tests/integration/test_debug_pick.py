"""The admin listener explains a routing decision: POST /debug/pick with a request body returns the
pool's ranked candidates with their score terms, dispatching nothing; after the same prompt is
served, the endpoint that served it ranks first with predicted cached tokens. Loopback, bounded."""
import argparse
import json
import sys
import tempfile
import unittest

import sluice_fleet as fleet

SLUICE = None


class DebugPick(unittest.TestCase):
    def test_explain_ranks_the_cached_endpoint_first(self):
        sim, ports = fleet.start_sim(SLUICE, replicas=3)
        tmp = tempfile.TemporaryDirectory()
        gw = None
        try:
            gw, listen, admin = fleet.start_gateway(SLUICE, ports, tmp.name)
            body = json.dumps({"model": fleet.MODEL, "max_tokens": 4, "messages": [
                {"role": "system", "content": "You are the sluice test oracle. " * 40},
                {"role": "user", "content": "Which replica has this prompt cached?"}]})
            status, raw = fleet.http_req(admin, "POST", "/debug/pick", body)
            self.assertEqual(status, 200, raw)
            before = json.loads(raw)
            self.assertEqual(before["pool"], "chat")
            self.assertEqual(len(before["candidates"]), 3)
            self.assertTrue(all(c["predicted_cached_tokens"] == 0 for c in before["candidates"]), before)
            picks_before = sum(c["in_flight"] for c in before["candidates"])
            self.assertEqual(picks_before, 0)
            # Serve it once: the index learns where it went.
            status, raw = fleet.http_req(listen, "POST", "/v1/chat/completions", body, timeout=30)
            self.assertEqual(status, 200, raw)
            status, raw = fleet.http_req(admin, "POST", "/debug/pick", body)
            after = json.loads(raw)
            first = after["candidates"][0]
            self.assertEqual(first["rank"], 0)
            self.assertGreater(first["predicted_cached_tokens"], 0, after)
            self.assertTrue(all(c["predicted_cached_tokens"] == 0 for c in after["candidates"][1:]), after)
            # Bad input gets a clear error; GET is refused.
            status, raw = fleet.http_req(admin, "POST", "/debug/pick", "{nope")
            self.assertEqual(status, 400)
            self.assertIn(b'"error"', raw)
            status, raw = fleet.http_req(admin, "POST", "/debug/pick", json.dumps({"model": "nope", "prompt": "x"}))
            self.assertEqual(status, 404)
            self.assertEqual(fleet.http_req(admin, "GET", "/debug/pick")[0], 405)
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
