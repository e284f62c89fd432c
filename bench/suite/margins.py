#!/usr/bin/env python3
"""Margins of the default policy over the hard suite, summed across sweeps (acceptance.py's rule).

acceptance.py counts the sweeps where sluice never loses; a sweep flips on a single rate whose TTFT
p90 sits on the edge between a warm (~15 ms) and a cold (100-400 ms) mode, where 1% of the requests
moves it. To compare two pickers on many sweeps, this prints, over every checked rate of every file
of each set:
  checked    rates checked (<= 1.5x the rate where round_robin falls below 90% goodput)
  fails      of them, rates where sluice loses (goodput < 0.98x or TTFT p90 > 1.05x the best other)
  gp_gmean   geometric mean of sluice goodput / the best other non-oracle policy's goodput
  ttft_gmean geometric mean of sluice TTFT p90 / the best other's TTFT p90 (lower is better)
  ttft>1.05, gp<0.98: the rates failing each test

usage: bench/suite/margins.py 'GLOB' ['GLOB'...]
  e.g. bench/suite/margins.py 'bench/results/hard-*-s[89].json' '/tmp/new/hard-*-s[89].json'
       bench/suite/margins.py --diff 'BEFORE_GLOB' 'AFTER_GLOB'
  --diff: also list the losing rates the second set fixed and broke, by cell (files of the same name)
       bench/suite/margins.py --list 'GLOB' ['GLOB'...]
       bench/suite/margins.py --all 'GLOB' ['GLOB'...]
  --all: also, over every rate of the sweeps (checked or not), the rates where sluice's goodput is
       under 0.98x the best other's and the goodput gmean
  --list: also list every losing rate of each set (cell @ rate: goodput, TTFT p90 and SLO attainment
       ratios; goodput_rps counts to the last completion, so a loss in goodput with an attainment
       ratio >= 1 is a later drain, not fewer requests within the SLO)
"""
import glob
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import acceptance  # noqa: E402


def margins(files):
    gp, tt = [], []
    checked = fails = 0
    for f in files:
        for row in acceptance.check(f)["rows"]:
            _rate, is_checked, _sg, _bgn, _bg, g_ratio, _st, _btn, _bt, t_ratio, ok = row[:11]
            if not is_checked:
                continue
            checked += 1
            fails += not ok
            if g_ratio > 0:
                gp.append(math.log(g_ratio))
            if t_ratio > 0:
                tt.append(math.log(t_ratio))
    gmean = lambda v: math.exp(sum(v) / len(v)) if v else float("nan")
    return {
        "files": len(files), "checked": checked, "fails": fails, "gp_gmean": gmean(gp), "ttft_gmean": gmean(tt),
        "ttft_over": sum(1 for x in tt if x > math.log(1.05)), "gp_under": sum(1 for x in gp if x < math.log(0.98)),
    }


def diff(before, after):
    by_name = {os.path.basename(f): f for f in after}
    fixed, broken = [], []
    for f in before:
        g = by_name.get(os.path.basename(f))
        if not g:
            continue
        a, b = acceptance.check(f), acceptance.check(g)
        rows_a = {r[0]: r for r in a["rows"]}
        rows_b = {r[0]: r for r in b["rows"]}
        cell = os.path.basename(f)[:-5]
        fixed += [f"{cell} @ {r:g}" for r in sorted(set(a["fails"]) - set(b["fails"]))]
        broken += [f"{cell} @ {r:g}: goodput {rows_b[r][5]:.3f}x, TTFT p90 {rows_b[r][9]:.3f}x (was {rows_a[r][5]:.3f}x, "
                   f"{rows_a[r][9]:.3f}x)" for r in sorted(set(b["fails"]) - set(a["fails"]))]
    print(f"\nfixed ({len(fixed)}): " + (", ".join(fixed) or "-"))
    print(f"broken ({len(broken)}):" + "".join(f"\n  {x}" for x in broken) if broken else "broken (0): -")


def all_rates(files):
    gp, under = [], 0
    for f in files:
        for row in acceptance.check(f)["rows"]:
            g_ratio = row[5]
            if g_ratio > 0 and math.isfinite(g_ratio):
                gp.append(math.log(g_ratio))
            under += g_ratio < 0.98
    return len(gp), under, math.exp(sum(gp) / len(gp)) if gp else float("nan")


def attainment(row):
    # sluice's SLO attainment over the best other's (acceptance.py's row: sluice's att, the best other's):
    # a goodput loss with attainment >= 1 is the run's drain (its last completion), not requests lost.
    return row[12] / row[13] if row[13] > 0 else float("inf")


def losing(files):
    out = []
    for f in files:
        a = acceptance.check(f)
        rows = {r[0]: r for r in a["rows"]}
        cell = os.path.basename(f)[:-5]
        out += [f"{cell} @ {r:g}: goodput {rows[r][5]:.3f}x, TTFT p90 {rows[r][9]:.3f}x, attainment {attainment(rows[r]):.3f}x"
                for r in sorted(a["fails"]) if rows[r][1]]
    return out


def main():
    args = sys.argv[1:]
    with_diff = "--diff" in args
    with_list = "--list" in args
    with_all = "--all" in args
    args = [a for a in args if a not in ("--diff", "--list", "--all")]
    if not args or (with_diff and len(args) != 2):
        print(__doc__, file=sys.stderr)
        return 2
    sets = []
    print("| set | files | checked | fails | gp_gmean | ttft_gmean | ttft>1.05 | gp<0.98 |")
    print("|---|---|---|---|---|---|---|---|")
    for pattern in args:
        files = sorted(f for f in glob.glob(pattern) if not f.endswith(".only.json"))
        sets.append(files)
        if not files:
            print(f"margins: no file matches {pattern}", file=sys.stderr)
            return 1
        m = margins(files)
        print(f"| {pattern} | {m['files']} | {m['checked']} | {m['fails']} | {m['gp_gmean']:.4f} | {m['ttft_gmean']:.4f} | "
              f"{m['ttft_over']} | {m['gp_under']} |")
    if with_all:
        for pattern, files in zip(args, sets):
            n, under, g = all_rates(files)
            print(f"\nall rates of {pattern}: {n}, goodput under 0.98x on {under}, goodput gmean {g:.4f}")
    if with_list:
        for pattern, files in zip(args, sets):
            rates = losing(files)
            print(f"\nlosing in {pattern} ({len(rates)}):" + "".join(f"\n  {x}" for x in rates))
    if with_diff:
        diff(*sets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
