#!/usr/bin/env python3
"""Does sluice's goodput hold past the fleet's capacity? Over `sluice fleetsim --json-out` files.

acceptance.py checks rates up to 1.5x where round_robin falls below 90% goodput; past that, with
shedding (sluice's default), the goodput should stay near the fleet's capacity as the offered rate
grows, not collapse. Per file this prints sluice's goodput at the sweep's top rate over its own
highest goodput at any rate of the sweep ("holds"), the same for the best other non-oracle policy,
and lists the files where sluice's falls under --under (default 0.7) of its peak.

usage: bench/suite/past_capacity.py [--under X] 'GLOB' ['GLOB'...]
  e.g. bench/suite/past_capacity.py 'bench/results/mixed-*.json' '/tmp/new/mixed-*.json'
"""
import argparse
import glob
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import acceptance  # noqa: E402


def holds(path):
    _runs, t = acceptance.load(path)
    if "sluice" not in t:
        return None
    out = {}
    for policy in ["sluice"] + acceptance.OTHERS:
        if policy not in t or not t[policy]:
            continue
        by_rate = t[policy]
        top = max(by_rate)
        peak = max(acceptance.gp(r) for r in by_rate.values())
        out[policy] = (acceptance.gp(by_rate[top]) / peak if peak > 0 else 1.0, top, acceptance.gp(by_rate[top]), peak)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--under", type=float, default=0.7)
    ap.add_argument("globs", nargs="+")
    a = ap.parse_args()
    print("| set | files | sluice holds (gmean) | under | best other holds (gmean) | sluice / best other at the top rate (gmean) |")
    print("|---|---|---|---|---|---|")
    listed = []
    for g in a.globs:
        files = sorted(glob.glob(g))
        s_h, o_h, ratio, under = [], [], [], []
        for f in files:
            h = holds(f)
            if not h:
                continue
            sh, top, sg, _ = h["sluice"]
            others = [(p, v) for p, v in h.items() if p != "sluice"]
            if not others:
                continue
            best = max(others, key=lambda x: x[1][2])  # the best other's goodput at the top rate
            s_h.append(math.log(max(sh, 1e-6)))
            o_h.append(math.log(max(max(v[0] for _, v in others), 1e-6)))
            if best[1][2] > 0:
                ratio.append(math.log(max(sg, 1e-6) / best[1][2]))
            if sh < a.under:
                under.append(f"{os.path.basename(f)[:-5]} @ {top:g}: {sg:.1f} of its peak {h['sluice'][3]:.1f} "
                             f"({sh:.2f}); best other there {best[0]} {best[1][2]:.1f}")
        gm = lambda v: math.exp(sum(v) / len(v)) if v else float("nan")
        print(f"| {g} | {len(files)} | {gm(s_h):.3f} | {len(under)} | {gm(o_h):.3f} | {gm(ratio):.2f} |")
        listed.append((g, under))
    for g, under in listed:
        print(f"\nsluice under {a.under:g} of its peak at the top rate in {g} ({len(under)}):")
        for u in under:
            print("  " + u)


if __name__ == "__main__":
    main()
