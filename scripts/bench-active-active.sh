#!/usr/bin/env bash
# Active-active gateways in the fleet simulator (issue 15): 8 engine replicas behind 1, 2, 4 and 8
# gateway replicas (round robin between them, each with its own PoolRouter and prefix index), with
# each gateway's learned index (its own dispatches only) vs an index fed by the engines' KV events
# (every gateway subscribes to every engine; events applied KV_DELAY_MS after the engine step).
# Same core picker and index code as the live gateway (src/core); fleetsim is the driver.
#
# usage: scripts/bench-active-active.sh [OUT_DIR]       (default bench/results)
#   env: SLUICE (binary), SEED (1), JOBS (2), KV_DELAY_MS (10), REQUESTS (3000)
# Writes OUT_DIR/active-active.{json,txt,md}: per workload and rate, for every gateway count the
# engine hit rate and TTFT p90, each as a ratio to one gateway with the same index.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$root/build-release/sluice}
SEED=${SEED:-1}
JOBS=${JOBS:-2}
KV_DELAY_MS=${KV_DELAY_MS:-10}
REQUESTS=${REQUESTS:-3000}
out=${1:-$root/bench/results}
mkdir -p "$out"
json=$out/active-active.json
: > "$json"
cmds=()
run() {  # NAME ARGS...: one fleetsim sweep over gateways x index, appended to the JSON lines
  local name=$1
  shift
  local cmd="sluice fleetsim --seed $SEED --replicas 8 --policy sluice --gateways 1,2,4,8 --index learned,events --kv-event-delay-ms $KV_DELAY_MS $*"
  cmds+=("$cmd")
  echo "== $name: $cmd" >&2
  "$SLUICE" fleetsim --seed "$SEED" --jobs "$JOBS" --replicas 8 --policy sluice --gateways 1,2,4,8 \
    --index learned,events --kv-event-delay-ms "$KV_DELAY_MS" "$@" --json-out "$out/active-active.part.json" >&2
  python3 - "$name" "$out/active-active.part.json" >> "$json" <<'PY'
import json, sys
for l in open(sys.argv[2]):
    if l.strip():
        d = json.loads(l)
        d["bench"] = sys.argv[1]
        print(json.dumps(d))
PY
  rm -f "$out/active-active.part.json"
}

run llmd --workload shared_prefix:llmd --rates 12,20 --requests "$REQUESTS"
run agent --workload agent_sessions,sessions=64 --rates 12,20 --requests $((REQUESTS / 2))

rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$root" status --porcelain -- src 2>/dev/null)" ] && rev="$rev + uncommitted"
python3 - "$json" "$rev" "${cmds[@]}" > "$out/active-active.md" <<'PY'
import json, sys
path, rev, cmds = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = [json.loads(l) for l in open(path) if l.strip()]
print("# Active-active gateways in fleetsim: learned index per gateway vs the engines' KV events\n")
print("8 engine replicas, policy sluice, arrivals split round robin between the gateway replicas. Made by:\n")
print("```")
print("scripts/bench-active-active.sh   # source: " + rev)
for c in cmds:
    print(c)
print("```\n")
print("hit = the engines' prefix-cache hits / lookups (tokens); TTFT p90 in ms; (x) = ratio to 1 gateway "
      "with the same index; pred/eng = the predicted cached tokens of the chosen replicas / the engines' "
      "own hits at admission.\n")
goals = []
for bench in dict.fromkeys(r["bench"] for r in rows):
    for rate in dict.fromkeys(r["offered_rate"] for r in rows if r["bench"] == bench):
        sub = [r for r in rows if r["bench"] == bench and r["offered_rate"] == rate]
        print(f"## {bench} @ {rate:g} req/s: {sub[0]['workload']}\n")
        print("| gateways | learned: hit | learned: TTFT p90 | learned: pred/eng | events: hit | events: TTFT p90 | events: pred/eng |")
        print("|---|---|---|---|---|---|---|")
        base = {}
        for r in sub:
            if r["gateways"] == 1:
                base[r["index"]] = r
        for g in sorted({r["gateways"] for r in sub}):
            cells = []
            for idx in ("learned", "events"):
                r = next((x for x in sub if x["gateways"] == g and x["index"] == idx), None)
                if r is None:
                    cells += ["-"] * 3
                    continue
                b = base[idx]
                hit, bh = r["fleet"]["prefix_hit_rate"], b["fleet"]["prefix_hit_rate"]
                p90, bp = r["figures"]["ttft_s"]["p90"], b["figures"]["ttft_s"]["p90"]
                eng = r["fleet"]["engine_cached_tokens"]
                pe = r["fleet"]["predicted_cached_tokens"] / eng if eng else float("nan")
                cells += [f"{hit * 100:.1f}% ({hit / bh if bh else float('nan'):.2f})",
                          f"{p90 * 1000:.0f} ms ({p90 / bp if bp else float('nan'):.2f})", f"{pe:.2f}"]
                if g == 8 and idx == "events":
                    goals.append((bench, rate, hit / bh if bh else 0, p90 / bp if bp else 99))
            print(f"| {g} | " + " | ".join(cells) + " |")
        print()
print("## Goals (with events, 8 gateways vs 1): hit rate >= 0.95x, TTFT p90 <= 1.1x\n")
for bench, rate, h, t in goals:
    ok = "met" if h >= 0.95 and t <= 1.1 else "NOT met"
    print(f"- {bench} @ {rate:g} req/s: hit {h:.3f}x, TTFT p90 {t:.2f}x: {ok}")
PY
cat "$out/active-active.md"
