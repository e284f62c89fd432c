#!/usr/bin/env python3
"""Issue 13's acceptance check over `sluice fleetsim --json-out` files (one JSON object per run).

usage: acceptance.py FILE.json... [--md OUT.md]

Per file (one workload x replica count x seed, every policy on the same requests):
  r90  = the lowest rate of the sweep where round_robin's goodput falls below 90% of the offered rate
         (goodput as SLO attainment: the share of requests meeting TTFT <= 1 s and ITL <= 50 ms, so a
         run's drain does not count as lost goodput)
  checked rates = the sweep's rates <= 1.5 x r90 (all of them when round_robin never falls below)
  at each checked rate: sluice goodput >= 0.98 x the best other non-oracle policy's goodput, and
  sluice TTFT p90 <= 1.05 x the lowest other non-oracle TTFT p90 ("the default never loses");
  the win: sluice's best goodput ratio over the best other at any rate of the sweep, and the
  ratio of highest sustainable rates (the highest rate of the sweep with attainment >= 95%).
  Goodput compared between policies is the fleet simulator's goodput_rps (requests meeting the SLO
  per second from the first arrival to the last completion); "att" columns give the attainment.
  Since round 22 sluice sheds (429 over_slo) requests it cannot serve within the SLO anywhere: they
  count as missing the SLO in goodput and attainment, but TTFT percentiles are over served requests
  only, so the "shed" column gives sluice's share of refused requests at each rate.
"""
import argparse
import json
from collections import defaultdict

OTHERS = ["round_robin", "random", "least_request", "power_of_two", "cache_aware", "llmd_default"]


def load(path):
    runs = [json.loads(l) for l in open(path) if l.strip()]
    t = defaultdict(dict)
    for r in runs:
        t[r["policy"]][r["offered_rate"]] = r
    return runs, t


def gp(run):
    return run["figures"]["goodput_rps"]


def p90(run):
    return run["figures"]["ttft_s"]["p90"] or 0.0


def att(run):
    return run["figures"]["slo_attainment"]


def shed(run):
    f = run["figures"]
    return f.get("by_status", {}).get("429", 0) / max(1, f["requests"])


def sustainable(runs):
    # The highest rate of the sweep at which the attainment is >= 95% (the issue's "rate at which
    # goodput >= 95% of offered"). Until round 18 this stopped at the first rate below 95%, so a
    # policy that missed at the sweep's lowest rate (cache_aware's start-up transient on agent
    # sessions: 94% at 32 req/s, 96-99% from 48 to 96) counted as sustaining nothing, and round_robin
    # became the "best other" of the ratio.
    return max((rate for rate, run in runs.items() if att(run) >= 0.95), default=0.0)


def check(path):
    runs, t = load(path)
    if "sluice" not in t or "round_robin" not in t:
        return None
    rates = sorted(t["sluice"])
    rr = t["round_robin"]
    r90 = next((r for r in sorted(rr) if att(rr[r]) < 0.9), None)
    limit = 1.5 * r90 if r90 else float("inf")
    rows, fails = [], []
    best_gain = (0.0, None, None)
    for rate in rates:
        s = t["sluice"][rate]
        others = [(p, t[p][rate]) for p in OTHERS if p in t and rate in t[p]]
        if not others:
            continue
        bg_name, bg = max(others, key=lambda x: gp(x[1]))
        bt_name, bt = min(others, key=lambda x: p90(x[1]))
        g_ratio = gp(s) / gp(bg) if gp(bg) > 0 else float("inf")
        t_ratio = p90(s) / p90(bt) if p90(bt) > 0 else float("inf")
        checked = rate <= limit
        ok = g_ratio >= 0.98 and t_ratio <= 1.05
        if checked and not ok:
            fails.append(rate)
        if g_ratio > best_gain[0]:
            best_gain = (g_ratio, rate, bg_name)
        orc = t.get("oracle", {}).get(rate)
        ba = max(att(o) for _, o in others)
        rows.append((rate, checked, gp(s), bg_name, gp(bg), g_ratio, p90(s), bt_name, p90(bt), t_ratio, ok,
                     gp(orc) if orc else None, att(s), ba, shed(s)))
    sus = {p: sustainable(t[p]) for p in OTHERS + ["sluice"] if p in t}
    best_other_sus = max((v, p) for p, v in sus.items() if p != "sluice")
    first = runs[0]
    return dict(path=path, workload=first["workload"].split(", poisson")[0].split(", gamma")[0],
                replicas=first["replicas"], seed=first["seed"], arrivals=first["arrivals"].split(" ")[0],
                r90=r90, rows=rows, fails=fails, best_gain=best_gain, sus=sus["sluice"], best_other_sus=best_other_sus)


def md(res):
    out = []
    for r in res:
        out.append(f"### {r['workload']} ({r['arrivals']}), {r['replicas']} replicas, seed {r['seed']}")
        out.append("")
        r90 = f"{r['r90']:g} req/s" if r['r90'] else "not reached"
        out.append(f"round_robin below 90% goodput from: {r90}; checked rates: up to 1.5x that.")
        out.append("")
        out.append("| rate | checked | sluice goodput | best other goodput | ratio | sluice TTFT p90 | best other TTFT p90 | ratio | ok | sluice / best other att | sluice shed |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for (rate, checked, sg, bgn, bg, gr, st, btn, bt, tr, ok, og, sa, ba, sh) in r["rows"]:
            out.append(f"| {rate:g} | {'yes' if checked else 'no'} | {sg:.1f} | {bgn} {bg:.1f} | {gr:.2f} | "
                       f"{st*1000:.0f} ms | {btn} {bt*1000:.0f} ms | {tr:.2f} | {'ok' if ok else '**LOSES**'} | "
                       f"{sa*100:.1f}% / {ba*100:.1f}% | {sh*100:.1f}% |")
        g, rate, name = r["best_gain"]
        bos, bon = r["best_other_sus"]
        sus_ratio = r["sus"] / bos if bos else float("inf")
        out.append("")
        out.append(f"Win: best goodput ratio {g:.2f}x vs {name} at {rate:g} req/s; sustainable rate (attainment >= 95%) "
                   f"sluice {r['sus']:g} vs {bon} {bos:g} ({sus_ratio:.2f}x). "
                   f"Never-loses: {'met' if not r['fails'] else 'NOT met at ' + ', '.join(f'{x:g}' for x in r['fails'])}.")
        out.append("")
    return "\n".join(out)


def summary(res):
    out = ["| workload | replicas | seed | never loses (checked rates) | failing rates | best goodput ratio | sustainable rate sluice / best other |",
           "|---|---|---|---|---|---|---|"]
    for r in res:
        g, rate, name = r["best_gain"]
        bos, bon = r["best_other_sus"]
        nchecked = sum(1 for row in r["rows"] if row[1])
        out.append(f"| {r['workload'].split(' ')[0]} | {r['replicas']} | {r['seed']} | "
                   f"{'met' if not r['fails'] else 'NOT met'} ({nchecked}) | {', '.join(f'{x:g}' for x in r['fails']) or '-'} | "
                   f"{g:.2f}x vs {name} @ {rate:g} | {r['sus']:g} / {bon} {bos:g} |")
    return "\n".join(out)


def compact(res):
    """One row per workload, one column per (replicas, seed): never-loses, then the best goodput ratio."""
    cols = sorted({(r["replicas"], r["seed"]) for r in res})
    names = sorted({r["workload"].split(" ")[0] for r in res})
    out = ["| workload | " + " | ".join(f"{n} rep, seed {s}" for n, s in cols) + " |",
           "|---|" + "---|" * len(cols)]
    for w in names:
        cells = []
        for c in cols:
            r = next((x for x in res if x["workload"].split(" ")[0] == w and (x["replicas"], x["seed"]) == c), None)
            if not r:
                cells.append("not run")
                continue
            g = r["best_gain"][0]
            bos = r["best_other_sus"][0]
            sus = r["sus"] / bos if bos else float("inf")
            loses = "ok" if not r["fails"] else "loses @ " + ",".join(f"{x:g}" for x in r["fails"])
            cells.append(f"{loses}; {g:.2f}x gp, {sus:.2f}x rate")
        out.append(f"| {w} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--md")
    ap.add_argument("--compact", action="store_true", help="print only the one-row-per-workload table")
    a = ap.parse_args()
    res = [r for r in (check(f) for f in a.files) if r]
    if a.compact:
        print(compact(res))
        return
    text = compact(res) + "\n\n" + summary(res) + "\n\n" + md(res)
    print(text)
    if a.md:
        open(a.md, "w").write(text + "\n")


if __name__ == "__main__":
    main()
