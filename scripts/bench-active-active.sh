#!/usr/bin/env bash
# Active-active gateways in the fleet simulator (issue 15): 8 engine replicas behind 1, 2, 4 and 8
# gateway replicas (round robin between them, each with its own PoolRouter and prefix index), with
# each gateway's learned index (its own dispatches only) vs an index fed by the engines' KV events
# (every gateway subscribes to every engine; events applied KV_DELAY_MS after the engine step),
# and events + shared in-flight load (--share-load: each gateway's own accounting reported every
# 5 ms, applied at the others SHARE_DELAY_MS later; core/picker/peer_load.h).
# Same core picker and index code as the live gateway (src/core); fleetsim is the driver.
#
# usage: scripts/bench-active-active.sh [OUT_DIR]       (default bench/results)
#   env: SLUICE (binary), SEEDS ("1 2": seed 1 the development rows, 2 held out), LEARNED_SEEDS
#        (seeds that also run the learned index: "1"), JOBS (2),
#        KV_DELAY_MS (10), SHARE_DELAY_MS (2), REQUESTS (3000)
# Writes OUT_DIR/active-active.{json,txt,md}: per workload and rate, for every gateway count the
# engine hit rate and TTFT p90, each as a ratio to one gateway with the same index.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$root/build-release/sluice}
SEEDS=${SEEDS:-${SEED:-1 2}}
JOBS=${JOBS:-2}
KV_DELAY_MS=${KV_DELAY_MS:-10}
SHARE_DELAY_MS=${SHARE_DELAY_MS:-2}
LEARNED_SEEDS=${LEARNED_SEEDS:-1}
REQUESTS=${REQUESTS:-3000}
out=${1:-$root/bench/results}
mkdir -p "$out"
json=$out/active-active.json
: > "$json"
cmds=()
run() {  # SEED NAME ARGS...: fleetsim sweeps over gateways x index (and shared load), appended to the JSON lines
  local seed=$1 name=$2
  shift 2
  local common=(--seed "$seed" --replicas 8 --policy sluice --gateways 1,2,4,8 --kv-event-delay-ms "$KV_DELAY_MS")
  local index=events
  [[ " $LEARNED_SEEDS " == *" $seed "* ]] && index=learned,events
  local cmd="sluice fleetsim ${common[*]} --index $index $*"
  local cmd2="sluice fleetsim ${common[*]} --index events --share-load --share-load-delay-ms $SHARE_DELAY_MS $*"
  cmds+=("$cmd" "$cmd2")
  echo "== $name seed $seed: $cmd" >&2
  nice "$SLUICE" fleetsim --jobs "$JOBS" "${common[@]}" --index "$index" "$@" --json-out "$out/active-active.part.json" >&2
  echo "== $name seed $seed: $cmd2" >&2
  nice "$SLUICE" fleetsim --jobs "$JOBS" "${common[@]}" --index events --share-load --share-load-delay-ms "$SHARE_DELAY_MS" \
    "$@" --json-out "$out/active-active.part2.json" >&2
  python3 - "$name" "$out/active-active.part.json" "$out/active-active.part2.json" >> "$json" <<'PY'
import json, sys
for path in sys.argv[2:]:
    for l in open(path):
        if l.strip():
            d = json.loads(l)
            d["bench"] = sys.argv[1]
            print(json.dumps(d))
PY
  rm -f "$out/active-active.part.json" "$out/active-active.part2.json"
}

for seed in $SEEDS; do
  run "$seed" llmd --workload shared_prefix:llmd --rates 12,20 --requests "$REQUESTS"
  run "$seed" agent --workload agent_sessions,sessions=64 --rates 12,20 --requests $((REQUESTS / 2))
done

rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$root" status --porcelain -- src 2>/dev/null)" ] && rev="$rev + uncommitted"
python3 - "$json" "$rev" "${cmds[@]}" > "$out/active-active.md" <<'PY'
import json, sys
path, rev, cmds = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = [json.loads(l) for l in open(path) if l.strip()]
for r in rows:
    r["col"] = r["index"] + ("+load" if r.get("share_load") else "")
cols = [("learned", "learned"), ("events", "events"), ("events+load", "events + shared load")]
print("# Active-active gateways in fleetsim: learned index per gateway vs the engines' KV events, with and without shared in-flight load\n")
print("8 engine replicas, policy sluice, arrivals split round robin between the gateway replicas. Made by:\n")
print("```")
print("scripts/bench-active-active.sh   # source: " + rev)
for c in cmds:
    print(c)
print("```\n")
print("hit = the engines' prefix-cache hits / lookups (tokens); TTFT p90 in ms; (x) = ratio to 1 gateway "
      "with the same index; pred/eng = the predicted cached tokens of the chosen replicas / the engines' "
      "own hits at admission. events + shared load: each gateway also receives the others' in-flight "
      "accounting (reported every 5 ms, applied 2 ms later; core/picker/peer_load.h). Seed 1 is the seed "
      "the earlier rows were made with; seed 2 is held out (never used while building).\n")
goals = []
for seed in dict.fromkeys(r["seed"] for r in rows):
    for bench in dict.fromkeys(r["bench"] for r in rows if r["seed"] == seed):
        for rate in dict.fromkeys(r["offered_rate"] for r in rows if r["bench"] == bench and r["seed"] == seed):
            sub = [r for r in rows if r["bench"] == bench and r["offered_rate"] == rate and r["seed"] == seed]
            print(f"## {bench} @ {rate:g} req/s, seed {seed}: {sub[0]['workload']}\n")
            print("| gateways | " + " | ".join(f"{t}: hit | {t}: TTFT p90 | {t}: pred/eng" for _, t in cols) + " |")
            print("|---|" + "---|---|---|" * len(cols))
            base = {r["col"]: r for r in sub if r["gateways"] == 1}
            for g in sorted({r["gateways"] for r in sub}):
                cells = []
                for col, _ in cols:
                    r = next((x for x in sub if x["gateways"] == g and x["col"] == col), None)
                    b = base.get(col)
                    if r is None or b is None:
                        cells += ["-"] * 3
                        continue
                    hit, bh = r["fleet"]["prefix_hit_rate"], b["fleet"]["prefix_hit_rate"]
                    p90, bp = r["figures"]["ttft_s"]["p90"], b["figures"]["ttft_s"]["p90"]
                    eng = r["fleet"]["engine_cached_tokens"]
                    pe = r["fleet"]["predicted_cached_tokens"] / eng if eng else float("nan")
                    cells += [f"{hit * 100:.1f}% ({hit / bh if bh else float('nan'):.2f})",
                              f"{p90 * 1000:.0f} ms ({p90 / bp if bp else float('nan'):.2f})", f"{pe:.2f}"]
                    if g == 8 and col != "learned":
                        # also against the single gateway with events alone (the same baseline for both columns)
                        eb = base.get("events")
                        goals.append((seed, bench, rate, col, hit / bh if bh else 0, p90 / bp if bp else 99,
                                      p90 / eb["figures"]["ttft_s"]["p90"] if eb else 99))
                print(f"| {g} | " + " | ".join(cells) + " |")
            print()
print("## Goals (8 gateways vs 1): hit rate >= 0.95x, TTFT p90 <= 1.1x\n")
print("| seed | row | index | hit (x) | TTFT p90 (x, vs 1 gateway same column) | TTFT p90 (x, vs 1 gateway with events) | goal |")
print("|---|---|---|---|---|---|---|")
for seed, bench, rate, col, h, t, te in goals:
    ok = "met" if h >= 0.95 and t <= 1.1 else "NOT met"
    print(f"| {seed} | {bench} @ {rate:g} | {col} | {h:.3f} | {t:.2f} | {te:.2f} | {ok} |")
PY
cat "$out/active-active.md"
