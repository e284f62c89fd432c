#!/usr/bin/env python3
"""A 30 s variant of the soak (scripts/soak.py): mixed streaming load through the gateway in front
of 3 `sluice sim` replicas with a replica kill, a SIGSTOP hang, a SIGHUP reload and an abort burst
(one fault every 5 s, each kind at least once); passes when the gateway never crashed and every
gauge (active requests, endpoint in-flight, reservations, queue depth) is back to 0 at the end.
Bounded: ~30 s of load + at most 20 s to settle. 127.0.0.1 only; every process stopped.

Run: python3 test_soak_short.py --sluice path/to/sluice"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    args, _ = ap.parse_known_args()
    soak = os.path.join(HERE, "..", "..", "scripts", "soak.py")
    r = subprocess.run([sys.executable, soak, "--sluice", os.path.abspath(args.sluice), "--minutes", "0.5", "--replicas", "3",
                        "--clients", "16", "--fault-every", "5", "--sample", "10"], timeout=120)
    print("PASSED" if r.returncode == 0 else "FAILED")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
