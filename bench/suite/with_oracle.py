#!/usr/bin/env python3
"""Is a loss the policy's prefix knowledge or its cost model? Runs one fleetsim sweep with every
non-oracle policy and `oracle` (sluice's cost with the engines' exact cache contents instead of its
learned index) and prints, per rate, sluice's and the oracle's TTFT p90, mean TTFT and goodput as
ratios to the best other non-oracle policy's. Where the oracle loses as sluice does, better prefix
prediction would not help: the trade is in the cost.

usage: bench/suite/with_oracle.py BIN FLEETSIM-ARGS...   (without --policy, --json)
  e.g. bench/suite/with_oracle.py build-release/sluice --seed 5 --replicas 8 --rates 20 \
         --requests 3000 --workload tool_agent
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import acceptance  # noqa: E402  (the other policies and the figures, as the acceptance check reads them)

POLICIES = ",".join(acceptance.OTHERS + ["sluice", "oracle"])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out = subprocess.run([sys.argv[1], "fleetsim", *sys.argv[2:], "--policy", POLICIES, "--json"],
                         capture_output=True, text=True, check=True).stdout
    by = {}
    for line in out.splitlines():
        r = json.loads(line)
        by.setdefault(r["offered_rate"], {})[r["policy"]] = r
    for rate in sorted(by):
        f = by[rate]
        others = [k for k in acceptance.OTHERS if k in f]
        p90 = {k: acceptance.p90(r) * 1000 for k, r in f.items()}
        mean = {k: r["figures"]["ttft_s"]["mean"] * 1000 for k, r in f.items()}
        gp = {k: acceptance.gp(r) for k, r in f.items()}
        best = min(others, key=lambda k: p90[k])
        bm = min(mean[k] for k in others)
        bg = max(gp[k] for k in others)
        print(f"@{rate:g} req/s: best other TTFT p90 {best} {p90[best]:.0f} ms | TTFT p90 sluice "
              f"{p90['sluice'] / p90[best]:.3f}x oracle {p90['oracle'] / p90[best]:.3f}x | mean TTFT sluice "
              f"{mean['sluice'] / bm:.3f}x oracle {mean['oracle'] / bm:.3f}x | goodput sluice "
              f"{gp['sluice'] / bg:.3f}x oracle {gp['oracle'] / bg:.3f}x")


if __name__ == "__main__":
    main()
