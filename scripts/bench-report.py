#!/usr/bin/env python3
"""Turns `sluice fleetsim --json-out` lines into a Markdown report and gnuplot PNGs.

usage: bench-report.py RESULTS.json --title T --command "the command" [--out-prefix P]

Writes P.md (tables per rate, the goals check) and, when gnuplot is installed, P-ttft.png (TTFT p90
vs offered rate per policy, log scale), P-hit.png (engine prefix hit rate per policy) and
P-throughput.png (completed requests/s vs offered rate).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import defaultdict

NON_ORACLE_OTHERS = ["random", "least_request", "power_of_two", "cache_aware", "llmd_default"]


def load(path):
    runs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                runs.append(json.loads(line))
    return runs


def fmt_s(x):
    if x is None:
        return "-"
    if x >= 10:
        return f"{x:.1f} s"
    if x >= 1:
        return f"{x:.2f} s"
    return f"{x * 1000:.0f} ms"


def by_policy_rate(runs):
    table = defaultdict(dict)
    for r in runs:
        table[r["policy"]][r["offered_rate"]] = r
    return table


def goals(table, ttft_limit=10.0, sustain_limit=2.0):
    """The issue's goals, evaluated on the sweep (not asserted anywhere)."""
    out = []
    rr = table.get("round_robin", {})
    sl = table.get("sluice", {})
    orc = table.get("oracle", {})
    if not rr or not sl:
        return ["(round_robin and sluice are both needed for the goals check)"]
    p90 = lambda run: run["figures"]["ttft_s"]["p90"]
    ok_rates = [rate for rate, run in sorted(rr.items()) if p90(run) < ttft_limit and rate in sl]
    if ok_rates:
        r_star = ok_rates[-1]
        s, rrv = p90(sl[r_star]), p90(rr[r_star])
        ratio = rrv / s if s > 0 else float("inf")
        others = [(p90(table[p][r_star]), p) for p in NON_ORACLE_OTHERS if p in table and r_star in table[p]]
        line = (f"- Highest rate where round_robin's TTFT p90 < {ttft_limit:g} s: **{r_star:g} req/s**. "
                f"round_robin {fmt_s(rrv)}, sluice {fmt_s(s)}: **{ratio:.1f}x** lower (goal >= 10x: "
                f"{'met' if ratio >= 10 else 'NOT met'}).")
        out.append(line)
        if others:
            best, name = min(others)
            r2 = best / s if s > 0 else float("inf")
            out.append(f"- Best other non-oracle policy there: {name} {fmt_s(best)}; sluice is **{r2:.2f}x** lower "
                       f"(goal >= 1.2x: {'met' if r2 >= 1.2 else 'NOT met'}).")
    else:
        out.append(f"- round_robin's TTFT p90 is above {ttft_limit:g} s at every rate of the sweep.")

    def sustained(runs):
        good = [rate for rate, run in sorted(runs.items()) if p90(run) <= sustain_limit]
        # the highest rate before the first rate that passes the limit
        best = None
        for rate, run in sorted(runs.items()):
            if p90(run) > sustain_limit:
                break
            best = rate
        return best

    sr, ss = sustained(rr), sustained(sl)
    top = max(sl.keys())
    if sr is None:
        out.append(f"- round_robin's TTFT p90 passes {sustain_limit:g} s already at the lowest rate.")
    else:
        note = " (sluice never passed it in this sweep: a lower bound)" if ss == top else ""
        if ss is not None:
            out.append(f"- Highest rate with TTFT p90 <= {sustain_limit:g} s: round_robin {sr:g}, sluice {ss:g} req/s "
                       f"= **{ss / sr:.2f}x**{note} (goal >= 2x: {'met' if ss >= 2 * sr else 'NOT met'}).")
    if orc:
        ratios = []
        for rate, run in sorted(sl.items()):
            if rate in orc and orc[rate]["fleet"]["prefix_hit_rate"] > 0:
                ratios.append((run["fleet"]["prefix_hit_rate"] / orc[rate]["fleet"]["prefix_hit_rate"], rate))
        if ratios:
            worst, at = min(ratios)
            out.append(f"- sluice's engine hit rate / oracle's: min **{worst * 100:.1f}%** (at {at:g} req/s) "
                       f"over the sweep (goal >= 90%: {'met' if worst >= 0.9 else 'NOT met'}).")
    return out


def markdown(runs, title, command):
    table = by_policy_rate(runs)
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    rates = sorted({r["offered_rate"] for r in runs})
    first = runs[0]
    lines = [f"# {title}", "", f"Workload: {first['workload']}; {first['replicas']} replicas; seed {first['seed']}.", "",
             "Made by:", "", "```", command, "```", "", "## Goals (issue 7)", ""]
    lines += goals(table)
    lines += ["", "## TTFT p90 by offered rate (req/s)", ""]
    lines.append("| policy | " + " | ".join(f"{r:g}" for r in rates) + " |")
    lines.append("|---|" + "---|" * len(rates))
    for p in policies:
        cells = [fmt_s(table[p][r]["figures"]["ttft_s"]["p90"]) if r in table[p] else "-" for r in rates]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines += ["", "## Engine prefix hit rate", ""]
    lines.append("| policy | " + " | ".join(f"{r:g}" for r in rates) + " |")
    lines.append("|---|" + "---|" * len(rates))
    for p in policies:
        cells = [f"{table[p][r]['fleet']['prefix_hit_rate'] * 100:.1f}%" if r in table[p] else "-" for r in rates]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines += ["", "## All figures", "",
              "| policy | rate | req/s | out tok/s | TTFT p50 | TTFT p90 | TTFT p99 | ITL p50 | ITL p90 | E2E p90 | goodput | hit rate | preempt | picks min/max |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rates:
        for p in policies:
            if r not in table[p]:
                continue
            run = table[p][r]
            f = run["figures"]
            fl = run["fleet"]
            lines.append(f"| {p} | {r:g} | {f['requests_per_s']:.2f} | {f['output_tokens_per_s']:.0f} | "
                         f"{fmt_s(f['ttft_s']['p50'])} | {fmt_s(f['ttft_s']['p90'])} | {fmt_s(f['ttft_s']['p99'])} | "
                         f"{f['itl_s']['p50'] * 1000:.1f} ms | {f['itl_s']['p90'] * 1000:.1f} ms | {fmt_s(f['e2e_s']['p90'])} | "
                         f"{f['goodput_rps']:.2f} | {fl['prefix_hit_rate'] * 100:.1f}% | {fl['preemptions']} | "
                         f"{fl['picks_min']}/{fl['picks_max']} |")
    lines.append("")
    return "\n".join(lines)


def plots(runs, prefix, title):
    if not shutil.which("gnuplot"):
        print("bench-report: gnuplot not found, no plots", file=sys.stderr)
        return
    table = by_policy_rate(runs)
    policies = list(dict.fromkeys(r["policy"] for r in runs))
    data = prefix + ".dat"
    with open(data, "w") as f:
        for p in policies:
            f.write(f"# {p}\n")
            for rate, run in sorted(table[p].items()):
                fig = run["figures"]
                f.write(f"{rate} {max(fig['ttft_s']['p90'], 1e-3)} {run['fleet']['prefix_hit_rate'] * 100} "
                        f"{fig['requests_per_s']}\n")
            f.write("\n\n")
    base = os.path.basename(prefix)
    def plot(out, ylabel, col, extra):
        series = ", ".join(f"'{data}' index {i} using 1:{col} with linespoints lw 2 title '{p}'"
                           for i, p in enumerate(policies))
        script = (f"set terminal pngcairo size 900,560 noenhanced; set output '{out}'; set title '{title}';"
                  f"set xlabel 'offered rate (req/s)'; set ylabel '{ylabel}'; set key outside right; set grid; {extra}"
                  f"plot {series}")
        subprocess.run(["gnuplot", "-e", script], check=True)
    plot(prefix + "-ttft.png", "TTFT p90 (s, log)", 2, "set logscale y;")
    plot(prefix + "-hit.png", "engine prefix hit rate (%)", 3, "set yrange [0:100];")
    plot(prefix + "-throughput.png", "completed requests/s", 4, "")
    os.remove(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--title", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--out-prefix")
    a = ap.parse_args()
    runs = load(a.results)
    if not runs:
        sys.exit(f"bench-report: {a.results} has no runs")
    prefix = a.out_prefix or os.path.splitext(a.results)[0]
    with open(prefix + ".md", "w") as f:
        f.write(markdown(runs, a.title, a.command))
    if len({r["offered_rate"] for r in runs}) > 1:
        plots(runs, prefix, a.title)
    print(f"bench-report: wrote {prefix}.md")


if __name__ == "__main__":
    main()
