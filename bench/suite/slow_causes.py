#!/usr/bin/env python3
"""Why are the slow requests slow? Reruns one committed hard-suite cell at one rate with a per-request
trace (every non-oracle policy, as p90_noise.py does), takes the best other policy by TTFT p90, and
sorts the requests of sluice and of that policy that are slower than the threshold (the best other's
TTFT p90: the requests that decide the 1.05x test) by cause:
  first       the first request of its group (prompt prefix): cold on every replica, whatever the policy
  blocked     served from a cached prefix, but behind a cold prefill on its replica (a request
              served cold there arrived before it and had not had its first token when it came);
              `by first`: of them, behind a first-of-group request's prefill
  warm        served from a cached prefix, no cold prefill in front (a queue or a full batch)
  cold again  its group was asked for before, served cold (a copy to another replica, or evicted)
"Served from a cached prefix" is the engine's count: at least half of the input found cached.
Then, for each of the two, where the first-of-group prefills went: of the replicas, the half that
served the most requests (over the run) and the share of the first-of-group prefills placed there
(a cold prefill blocks the requests that come for its replica's prefixes while it runs).

usage: bench/suite/slow_causes.py BIN CELL RATE [CELL RATE ...]
  e.g. bench/suite/slow_causes.py build-release/sluice hard-tool8-s5 20
  CELL names bench/results/CELL.cmd (its flags are reused; --policy, --rates, --trace replaced).
  Env: BASE (bench/results: where CELL.cmd is), EXTRA (more fleetsim arguments for every policy's run,
  e.g. EXTRA='--long-prefill-token-threshold 2048').
"""
import collections
import json
import os
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from p90_noise import command_of, p90  # noqa: E402

CAUSES = ("first", "blocked", "warm", "cold again")


def served_cold(r):
    return r["engine_cached_tokens"] * 2 < r["input_tokens"]


def classify(records, threshold_ms):
    """records: one policy's trace lines (status 200). Returns (causes Counter over the requests slower
    than threshold_ms, blocked behind a first-of-group prefill, share of first-of-group prefills on the
    busier half of the replicas)."""
    rs = sorted(records, key=lambda r: r["arrival_ms"])
    seen, first_ids, cold_by_endpoint = set(), set(), collections.defaultdict(list)
    for r in rs:
        if r["group"] not in seen:
            first_ids.add(r["id"])
        seen.add(r["group"])
        if served_cold(r):
            cold_by_endpoint[r["endpoint"]].append(r)
    causes, by_first = collections.Counter(), 0
    for r in rs:
        if r["ttft_ms"] <= threshold_ms:
            continue
        if r["id"] in first_ids:
            causes["first"] += 1
        elif served_cold(r):
            causes["cold again"] += 1
        else:
            # On the replica from its dispatch (arrival + gateway queue) to its first token (ttft_ms
            # counts from arrival, the queue included): a cold request there over that time is ahead.
            at = r["arrival_ms"] + r["queue_ms"]
            ahead = [c for c in cold_by_endpoint[r["endpoint"]]
                     if c["id"] != r["id"] and c["arrival_ms"] + c["queue_ms"] <= at < c["arrival_ms"] + c["ttft_ms"]]
            if ahead:
                causes["blocked"] += 1
                by_first += any(c["id"] in first_ids for c in ahead)
            else:
                causes["warm"] += 1
    served = collections.Counter(r["endpoint"] for r in rs)
    busy = set(sorted(served, key=lambda e: (-served[e], e))[: max(1, len(served) // 2)])
    firsts = [r for r in rs if r["id"] in first_ids]
    on_busy = sum(r["endpoint"] in busy for r in firsts) / len(firsts) if firsts else float("nan")
    return causes, by_first, on_busy


def main():
    if len(sys.argv) < 4 or len(sys.argv) % 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    base = os.environ.get("BASE", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results"))
    print("| cell @ rate | policy | TTFT p90 | over the threshold | " + " | ".join(CAUSES) +
          " | blocked by a first | first-of-group prefills on the busier half |")
    print("|---|---|---|---|" + "---|" * len(CAUSES) + "---|---|")
    for cell, rate in zip(sys.argv[2::2], sys.argv[3::2]):
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "trace.jsonl")
            command = command_of(os.path.join(base, cell + ".cmd"), binary, rate, trace) + shlex.split(os.environ.get("EXTRA", ""))
            subprocess.run(command, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            by_policy = collections.defaultdict(list)
            for line in open(trace):
                r = json.loads(line)
                if r.get("status") == 200:
                    by_policy[r["policy"]].append(r)
        others = [p for p in by_policy if p != "sluice"]
        best = min(others, key=lambda p: p90([r["ttft_ms"] for r in by_policy[p]]))
        threshold = p90([r["ttft_ms"] for r in by_policy[best]])
        for policy in ("sluice", best):
            causes, by_first, on_busy = classify(by_policy[policy], threshold)
            print(f"| {cell} @ {rate} | {policy} | {p90([r['ttft_ms'] for r in by_policy[policy]]):.1f} ms | "
                  f"{sum(causes.values())} (> {threshold:.1f} ms) | " + " | ".join(str(causes[c]) for c in CAUSES) +
                  f" | {by_first} | {on_busy:.0%} |", flush=True)


if __name__ == "__main__":
    main()
