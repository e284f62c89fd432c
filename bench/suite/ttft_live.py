#!/usr/bin/env python3
"""The live picker's TTFT estimates against the TTFTs they were for (bench/results/README.md, round 43).

Starts `sluice sim` (2 replicas, its defaults: a 20 ms front end per request) and `sluice serve` over
them, sends N streamed chat requests open loop (Poisson, RATE/s; prompts of 20-1,500 words, 8 output
tokens), and prints the learned front end (/debug/pick's frontend_ms) and the cumulative counts of
sluice_ttft_estimate_ratio (a request's TTFT from its pick over the picker's estimate).

usage: bench/suite/ttft_live.py [--sluice BIN] [--n N] [--rate R] [--frontend-ms F] [-- SIM FLAGS...]
       (--frontend-ms: the pool's policy param; default: learned)"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration"))
import sluice_fleet as fleet  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default="build-release/sluice")
    ap.add_argument("--n", type=int, default=120)
    ap.add_argument("--rate", type=float, default=8.0)
    ap.add_argument("--frontend-ms", type=float)
    ap.add_argument("sim_args", nargs="*")
    a = ap.parse_args()
    pool_yaml = f"    policy_params: {{frontend_ms: {a.frontend_ms}}}\n" if a.frontend_ms is not None else ""
    with fleet.gateway_over_sim(a.sluice, 2, a.sim_args, pool_yaml) as (listen, admin):
        statuses = fleet.streams_open_loop(listen, 0, a.n, a.rate, random.Random(5))
        print(f"requests {len(statuses)}, ok {statuses.count(200)}; frontend_ms {fleet.learned_frontend_ms(admin):.1f}")
        for line in fleet.admin_metrics(admin).splitlines():
            if line.startswith("sluice_ttft_estimate_ratio_bucket") or line.startswith("sluice_ttft_estimate_ratio_count"):
                print(line)


if __name__ == "__main__":
    main()
