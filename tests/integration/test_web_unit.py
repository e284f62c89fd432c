#!/usr/bin/env python3
"""The dashboard's JavaScript unit tests (web/test/prom.test.mjs: Prometheus text parsing, rates,
histogram quantiles) under node's built-in test runner. Needs node (scripts/install-deps.sh).
Run: python3 tests/integration/test_web_unit.py [--sluice path]   (--sluice is accepted, unused)"""
import argparse
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=None)
    ap.parse_args()
    node = shutil.which("node")
    if not node:
        print("FAILED: node not found (scripts/install-deps.sh installs nodejs)")
        return 1
    p = subprocess.run([node, "--test", "test/prom.test.mjs"], cwd=os.path.join(ROOT, "web"),
                       capture_output=True, text=True, timeout=120)
    print(p.stdout[-4000:], p.stderr[-2000:])
    if p.returncode != 0:
        print("0 passed, 1 failed")
        return 1
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
