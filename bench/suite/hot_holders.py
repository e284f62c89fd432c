#!/usr/bin/env python3
"""Replicas holding the hot prefix (engine KV truth, >= 90% of its blocks) per policy and rate, from
`sluice fleetsim --json-out` files of a workload with a hot prefix (hot_prefix: group "hot";
tool_agent: the most popular prefix "p0"), and the sluice series over time at each rate.

usage: hot_holders.py FILE.json [--series POLICY|all] [--every SECONDS]
  The series: "t: holders/receivers" every SECONDS (default: 16 points over the run), receivers being
  the replicas that received a request for the prefix in that second.
"""
import json
import sys

path = sys.argv[1]
series_policy = sys.argv[sys.argv.index("--series") + 1] if "--series" in sys.argv else "sluice"
every = int(sys.argv[sys.argv.index("--every") + 1]) if "--every" in sys.argv else 0
runs = [json.loads(l) for l in open(path) if l.strip()]
print("| policy | rate | holders mean / max | receivers per second (mean) | hit rate |")
print("|---|---|---|---|---|")
for r in sorted(runs, key=lambda r: (r["offered_rate"], r["policy"])):
    h = r.get("hot_prefix")
    if not h:
        continue
    print(f"| {r['policy']} | {r['offered_rate']:g} | {h['holders_mean']:.1f} / {h['holders_max']} | "
          f"{h['receivers_mean']:.1f} | {r['fleet']['prefix_hit_rate']*100:.1f}% |")
print()
for r in sorted(runs, key=lambda r: (r["offered_rate"], r["policy"])):
    if series_policy not in ("all", r["policy"]) or not r.get("hot_prefix"):
        continue
    s = r["hot_prefix"]["series"]
    step = every or max(1, len(s) // 16)
    pts = " ".join(f"{int(t)}s:{h}/{rc}" for t, h, rc, _ in s[::step])
    print(f"- {r['policy']} @ {r['offered_rate']:g} req/s, over time (t: holders/receivers): {pts}")
