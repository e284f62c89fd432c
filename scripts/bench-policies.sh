#!/usr/bin/env bash
# Policy comparisons in the fleet simulator (virtual time, deterministic for the seed), written to
# bench/results/<name>.json (one JSON object per run), <name>.md (tables, goals check, the command)
# and <name>-*.png (gnuplot).
#
# usage: scripts/bench-policies.sh [suite...]     suites: llmd8 llmd64 sglang8 sglang64 mixes tenants quick
#        (no suite: llmd8 llmd64 sglang8 sglang64 mixes; mixes includes tenants)
# env:   SLUICE (default build-release/sluice), JOBS (parallel runs, default 2), SEED (default 1)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$root/build-release/sluice}
JOBS=${JOBS:-2}
SEED=${SEED:-1}
out=$root/bench/results
mkdir -p "$out"
ALL=round_robin,random,least_request,power_of_two,cache_aware,llmd_default,sluice,oracle

# run NAME TITLE FLAGS...: one fleetsim invocation + its report.
run() {
  local name=$1 title=$2
  shift 2
  local cmd="sluice fleetsim --seed $SEED $*"
  local rev
  rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git -C "$root" status --porcelain -- src 2>/dev/null)" ]; then rev="$rev + uncommitted changes under src/"; fi
  cmd="$cmd   # source: $rev"
  echo "== $name: $cmd" >&2
  "$SLUICE" fleetsim --seed "$SEED" --jobs "$JOBS" "$@" --json-out "$out/$name.json" > "$out/$name.txt"
  python3 "$root/scripts/bench-report.py" "$out/$name.json" --title "$title" --command "$cmd"
}

suite() {
  case $1 in
    quick)
      run quick "Quick smoke: small shared prefix, 4 replicas" --policy "$ALL" --replicas 4 \
        --workload shared_prefix:small --rates 20,40 --requests 300 ;;
    llmd8)
      run llmd-8 "llm-d shared prefix (150x5, 6000/1200/1000), 8 replicas" --policy "$ALL" --replicas 8 \
        --workload shared_prefix:llmd --rates 2,4,6,8,10,12,14,16,20,25,30,40 --requests 3000 ;;
    llmd64)
      run llmd-64 "llm-d shared prefix (150x5, 6000/1200/1000), 64 replicas" --policy "$ALL" --replicas 64 \
        --workload shared_prefix:llmd --rates 32,64,96,112,128,160,240 --requests 6000 ;;
    sglang8)
      run sglang-8 "SGLang generated shared prefix (64x16, 2048/128/256), 8 replicas" --policy "$ALL" --replicas 8 \
        --workload shared_prefix:sglang --rates 50,100,150,200,250,300,350,400,500 --requests 6000 ;;
    sglang64)
      run sglang-64 "SGLang generated shared prefix (64x16, 2048/128/256), 64 replicas" --policy "$ALL" --replicas 64 \
        --workload shared_prefix:sglang --rates 800,1600,2400,3200,4000 --requests 16000 ;;
    mixes)
      run cost-mix-8 "100x cost mix (short chats + 1% 50-100k-token documents), 8 replicas" --policy "$ALL" \
        --replicas 8 --workload cost_mix --rates 20,40,60,80,100 --requests 4000
      run tenants-8 "Noisy neighbour (one tenant sends 10x the tokens), 8 replicas" --policy "$ALL" \
        --replicas 8 --workload tenants --rates 40,80,120,160 --requests 4000 --tenants
      suite tenants
      run lora-8 "LoRA mix (8 adapters, Zipf 1.0, max 4 resident), 8 replicas" --policy "$ALL" \
        --replicas 8 --workload lora_mix --rates 20,40,80,120,160 --requests 4000 ;;
    tenants)
      # The same at saturation behind a gateway queue (4 in flight per replica): FIFO vs the admission
      # layer's VTC queue alone vs VTC + fair shares of the slots (the live gateway's default). Per-tenant
      # figures are in the .txt. The light variant has tenants that are really light (noisy x30).
      run tenants-fifo-4 "Noisy neighbour at saturation, gateway FIFO queue, 4 replicas" \
        --policy round_robin,least_request,sluice --replicas 4 --workload tenants,input=300,output=50 \
        --rates 60,120 --requests 3000 --max-in-flight 4 --tenants
      run tenants-vtc-4 "Noisy neighbour at saturation, gateway VTC queue alone (core/admission), 4 replicas" \
        --policy round_robin,least_request,sluice --replicas 4 --workload tenants,input=300,output=50 \
        --rates 60,120 --requests 3000 --max-in-flight 4 --fair-queue --no-fair-share --tenants
      run tenants-fair-4 "Noisy neighbour at saturation, gateway VTC queue + fair shares of the slots, 4 replicas" \
        --policy round_robin,least_request,sluice --replicas 4 --workload tenants,input=300,output=50 \
        --rates 60,120 --requests 3000 --max-in-flight 4 --fair-queue --tenants
      run tenants-light-vtc-4 "Light tenants (noisy x30) at saturation, VTC queue alone, 4 replicas" \
        --policy least_request,sluice --replicas 4 --workload tenants,factor=30,input=300,output=50 \
        --rates 60,120 --requests 3000 --max-in-flight 4 --fair-queue --no-fair-share --tenants
      run tenants-light-fair-4 "Light tenants (noisy x30) at saturation, VTC queue + fair shares, 4 replicas" \
        --policy least_request,sluice --replicas 4 --workload tenants,factor=30,input=300,output=50 \
        --rates 60,120 --requests 3000 --max-in-flight 4 --fair-queue --tenants ;;
    *) echo "unknown suite $1" >&2; exit 2 ;;
  esac
}

if [ $# -eq 0 ]; then set -- llmd8 llmd64 sglang8 sglang64 mixes; fi
for s in "$@"; do suite "$s"; done
