#!/usr/bin/env python3
"""How far the default policy's TTFT estimate is from the TTFT the requests got, from a fleetsim trace.

For every request of `sluice fleetsim ... --policy sluice --trace FILE --trace-explain` (status 200), the
estimate is the chosen candidate's `ttft_ms` term and the outcome the trace's `ttft_ms`. Printed by
what the chosen replica had when it was picked: a prefill queue ahead or not, decoders running or not
(the cases the TTFT formula treats differently: sluice_policy.h, ttft_ms), with the mean estimate, the
mean outcome, their mean difference and the median of outcome / estimate.

With --slow N (a fleet whose replicas N.. are the slow ones, as `--slow-replicas` makes them): also the
`pace` term the candidates carried, median and 10th-90th percentiles, for the fast and the slow replicas,
over the decisions after the first --skip (default 1000).

usage: bench/suite/ttft_bias.py TRACE [--slow N] [--skip K]
  e.g. sluice fleetsim --seed 70 --policy sluice --replicas 8 --rates 40 --requests 2000 \\
         --workload hot_prefix --trace /tmp/t.jsonl --trace-explain
       bench/suite/ttft_bias.py /tmp/t.jsonl
"""
import argparse
import json
import statistics


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--slow", type=int, default=None)
    ap.add_argument("--skip", type=int, default=1000)
    a = ap.parse_args()
    groups = {}
    pace = {"fast": [], "slow": []}
    with open(a.trace) as f:
        for i, line in enumerate(f):
            r = json.loads(line)
            ex = r.get("explain")
            if not ex or not ex.get("candidates"):
                raise SystemExit("the trace has no explanations: run fleetsim with --trace-explain")
            if a.slow is not None and i >= a.skip:
                for c in ex["candidates"]:
                    index = int(c["endpoint"].rsplit("-", 1)[1])
                    pace["slow" if index >= a.slow else "fast"].append(c["terms"]["pace"])
            if r["status"] != 200:
                continue
            t = ex["candidates"][0]["terms"]
            key = ("queue ahead" if t["queue_tokens"] > 0 else "no queue", "decoders" if t["decoding"] > 0 else "no decoders")
            groups.setdefault(key, []).append((t["ttft_ms"], r["ttft_ms"]))
    print("| chosen replica had | requests | estimate (mean ms) | outcome (mean ms) | outcome - estimate (mean ms) | outcome / estimate (median) |")
    print("|---|---|---|---|---|---|")
    for key, v in sorted(groups.items()):
        est = statistics.mean(e for e, _ in v)
        got = statistics.mean(g for _, g in v)
        ratio = statistics.median(g / e for e, g in v if e > 0)
        print(f"| {key[0]}, {key[1]} | {len(v)} | {est:.1f} | {got:.1f} | {got - est:+.1f} | {ratio:.2f} |")
    if a.slow is not None:
        for kind, xs in pace.items():
            if xs:
                print(f"pace of the {kind} replicas: median {statistics.median(xs):.3f}, "
                      f"p10 {quantile(xs, 0.1):.3f}, p90 {quantile(xs, 0.9):.3f} ({len(xs)} candidates)")


if __name__ == "__main__":
    main()
