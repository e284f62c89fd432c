"""The official openai npm SDK (tests/sdk/, installed by scripts/install-deps.sh) through a real gateway
in front of real `sluice sim` replicas: responses.create non-streaming and streaming (deltas assembled,
usage present), the responses.stream helper with previous_response_id, models.retrieve of a slashed id,
chat.completions.create with n = 2 (two choices, usage counting both), an aborted streaming response,
and the error object of an unknown model (tests/sdk/openai_sdk.mjs; one JSON line per check).

A burst the pool cannot serve within its SLO (tests/sdk/shed_burst.mjs: 40 distinct ~4,000-token
prompts at once against two replicas and a 150 ms TTFT SLO): without retries the SDK gets 2-4 served
and 429 over_slo for the rest, whose retry-after-ms values spread over more than a second (each
refusal is told to come back after those refused before it, sluice_policy.h); with the SDK's default
2 retries, which honour retry-after-ms, most of the burst is served.

Run: python3 test_openai_sdk.py --sluice path/to/sluice"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_fleet import MODEL, admin_metrics, metric, start_gateway, start_sim  # noqa: E402

SLUICE = None
ALIAS = "llama-3-8b"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SDK = os.path.join(ROOT, "tests", "sdk")


class OpenAiSdk(unittest.TestCase):
    def test_sdk_against_the_gateway(self):
        node = shutil.which("node")
        self.assertIsNotNone(node, "node is missing: scripts/install-deps.sh installs it")
        self.assertTrue(os.path.isdir(os.path.join(SDK, "node_modules", "openai")),
                        "tests/sdk/node_modules/openai is missing: run scripts/install-deps.sh")
        tmp = tempfile.TemporaryDirectory()
        sim, ports = start_sim(SLUICE, 2, "--time-scale", "20", "--output-len", "12", "--frontend-overhead-ms", "2")
        try:
            gw, port, admin = start_gateway(SLUICE, ports, tmp.name, extra_yaml=f"  - {{name: {ALIAS}, alias_of: {MODEL}}}")
            try:
                slow = 3 if os.environ.get("SLUICE_SANITIZED") == "1" else 1
                p = subprocess.run([node, os.path.join(SDK, "openai_sdk.mjs"), f"http://127.0.0.1:{port}/v1", MODEL, ALIAS],
                                   capture_output=True, text=True, timeout=60 * slow, cwd=SDK)
                # The aborted stream reached the gateway as a client that left (and the engine was freed).
                cancelled = metric(admin_metrics(admin), "sluice_requests_total", outcome="client_cancelled") or 0
            finally:
                gw.stop()
        finally:
            sim.stop()
            tmp.cleanup()
        lines = p.stdout.strip().splitlines()
        checks = [json.loads(line) for line in lines if line.startswith("{")]
        for c in checks:
            print(f"\n    {c['check']}: {'ok ' + json.dumps(c.get('detail')) if c['ok'] else 'FAILED ' + c['error']}", end="")
        print()
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(len(checks), 7, p.stdout + p.stderr)
        self.assertTrue(all(c["ok"] for c in checks))
        self.assertEqual(lines[-1], "7 passed, 0 failed")
        self.assertGreaterEqual(cancelled, 1)

    def test_a_shed_burst_comes_back_when_told_and_is_served(self):
        node = shutil.which("node")
        self.assertIsNotNone(node, "node is missing: scripts/install-deps.sh installs it")
        tmp = tempfile.TemporaryDirectory()
        sim, ports = start_sim(SLUICE, 2)
        key_sha = hashlib.sha256(b"key-burst").hexdigest()
        try:
            gw, port, admin = start_gateway(
                SLUICE, ports, tmp.name,
                pool_yaml="    policy: sluice\n    policy_params: {ttft_slo_ms: 150, itl_slo_ms: 50}\n",
                extra_yaml=f"tenants:\n  - {{name: burst, key_sha256: [{key_sha}]}}")
            try:
                def burst(retries, seed):
                    p = subprocess.run([node, os.path.join(SDK, "shed_burst.mjs"), f"http://127.0.0.1:{port}/v1", MODEL,
                                        "key-burst", "40", str(retries), str(seed)],
                                       capture_output=True, text=True, timeout=120, cwd=SDK)
                    self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
                    return json.loads(p.stdout.strip().splitlines()[-1])
                once = burst(0, 1)
                time.sleep(3)  # the refused burst's backlog worked off
                retried = burst(2, 2)
                m = admin_metrics(admin)
                shed = metric(m, "sluice_rejects_total", reason="over_slo") or 0
                client_retries = metric(m, "sluice_client_retries_total") or 0
            finally:
                gw.stop()
        finally:
            sim.stop()
            tmp.cleanup()
        print(f"\n    no retries: {once['served']} of 40 served, retry-after-ms {once['retry_after_ms'][:1]}.."
              f"{once['retry_after_ms'][-1:]}; 2 retries: {retried['served']} of 40 served (p50 {retried['served_p50_ms']} ms)")
        self.assertLessEqual(once["served"], 10, once)
        self.assertEqual(once["codes"], ["429 over_slo"], once)
        ra = once["retry_after_ms"]
        self.assertEqual(len(ra), 40 - once["served"], once)
        self.assertGreater(ra[-1] - ra[0], 1000, f"the refusals are told to come back one after another: {ra}")
        self.assertGreaterEqual(retried["served"], 25, retried)
        self.assertGreater(shed, 40 - once["served"], "the retried burst was refused first, then served")
        # The SDK numbers its attempts (x-stainless-retry-count): every arrival of the retried burst past
        # the 40 first attempts is a retry, and only those count (the first burst's attempts carry 0).
        arrivals = retried["served"] + (shed - (40 - once["served"]))
        print(f"    client retries counted: {client_retries} ({arrivals} arrivals for 40 requests)")
        self.assertEqual(client_retries, arrivals - 40, f"retries counted {client_retries}, arrivals {arrivals}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, rest = ap.parse_known_args()
    SLUICE = os.path.abspath(args.sluice)
    unittest.main(argv=[sys.argv[0], "-v"] + rest)
