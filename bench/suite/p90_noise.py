#!/usr/bin/env python3
"""How firm is a TTFT p90 loss? Reruns one committed hard-suite cell at one rate with a per-request
trace (every non-oracle policy, the committed command's seed and workload), then resamples the
requests (bootstrap, the same resample indices for every policy: the policies serve the same
requests in the same order) and prints, for sluice against the best other policy (by TTFT p90 on the
full run), the TTFT p90s and how many requests are slower than 50 ms, and:
  ratio        sluice's TTFT p90 / the best other's, on the full run
  ci90         the 5th and 95th percentiles of that ratio over the resamples
  p(<=1.05)    the share of resamples where sluice passes the 1.05x test
(in each resample the best other is the lowest of the six others' p90s, which favours them: the
minimum of six noisy figures is biased low).
A p90 that sits between the warm and the cold mode of the TTFT distribution (most requests served
from a cached prefix in ~15-30 ms, the rest cold in 100-400 ms) swings with a handful of requests:
the interval says whether the loss is the policy's or the draw's.

usage: bench/suite/p90_noise.py BIN CELL RATE [CELL RATE ...]
  e.g. bench/suite/p90_noise.py build-release/sluice hard-tool8-s9 20 hard-tool8-s5 20
  CELL names bench/results/CELL.cmd (its flags are reused; --policy, --rates, --trace replaced).
  Env: RESAMPLES (2000), BASE (bench/results: where CELL.cmd is; held-out cells: heldout.sh's dir).
"""
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile

POLICIES = ["round_robin", "random", "least_request", "power_of_two", "cache_aware", "llmd_default", "sluice"]


def p90(xs):
    # fleetsim's percentile (src/model/workload/stats.cpp): linear between the two nearest ranks.
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = 0.9 * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def command_of(cmd_file, binary, rate, trace):
    line = open(cmd_file).read().split("#")[0].strip()
    args = shlex.split(line)
    assert args[:2] == ["sluice", "fleetsim"], cmd_file
    out, skip = [binary, "fleetsim"], False
    for a in args[2:]:
        if skip:
            skip = False
            continue
        if a in ("--policy", "--rates", "--trace"):
            skip = True
            continue
        out.append(a)
    return out + ["--policy", ",".join(POLICIES), "--rates", str(rate), "--trace", trace]


def main():
    if len(sys.argv) < 4 or len(sys.argv) % 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    base = os.environ.get("BASE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results"))
    resamples = int(os.environ.get("RESAMPLES", "2000"))
    print("| cell @ rate | best other | sluice p90 | best other p90 | ratio | ci90 | p(<=1.05) | >50 ms sluice / best other |")
    print("|---|---|---|---|---|---|---|---|")
    for cell, rate in zip(sys.argv[2::2], sys.argv[3::2]):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "trace.jsonl")
            subprocess.run(command_of(os.path.join(base, cell + ".cmd"), binary, rate, trace), check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            by_policy = {}
            for line in open(trace):
                r = json.loads(line)
                if r.get("status") == 200:
                    by_policy.setdefault(r["policy"], {})[r["id"]] = r["ttft_ms"]
        ids = sorted(set.intersection(*(set(v) for v in by_policy.values())))
        ttft = {p: [by_policy[p][i] for i in ids] for p in by_policy}
        others = [p for p in ttft if p != "sluice"]
        best = min(others, key=lambda p: p90(ttft[p]))
        full = p90(ttft["sluice"]) / p90(ttft[best])
        rng = random.Random(1)
        ratios = []
        n = len(ids)
        for _ in range(resamples):
            pick = [rng.randrange(n) for _ in range(n)]
            s = p90([ttft["sluice"][i] for i in pick])
            b = min(p90([ttft[p][i] for i in pick]) for p in others)
            ratios.append(s / b)
        ratios.sort()
        lo, hi = ratios[int(0.05 * resamples)], ratios[int(0.95 * resamples)]
        passes = sum(r <= 1.05 for r in ratios) / resamples
        slow = lambda p: sum(t > 50 for t in ttft[p])  # noqa: E731
        print(f"| {cell} @ {rate} | {best} | {p90(ttft['sluice']):.1f} ms | {p90(ttft[best]):.1f} ms | {full:.3f}x | "
              f"{lo:.2f}-{hi:.2f}x | {passes:.2f} | {slow('sluice')} / {slow(best)} of {n} |", flush=True)


if __name__ == "__main__":
    main()
