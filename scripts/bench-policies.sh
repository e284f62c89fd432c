#!/usr/bin/env bash
# Policy comparisons in the fleet simulator (virtual time, deterministic for the seed), written to
# bench/results/<name>.json (one JSON object per run), <name>.md (tables, goals check, the command)
# and <name>-*.png (gnuplot).
#
# usage: scripts/bench-policies.sh [suite...]     suites: llmd8 llmd64 sglang8 sglang64 mixes tenants quick
#        hard (issue 13's suite: hot, agent, tool, kvp, burst, costmix at 8, 32 and 64 replicas),
#        or one of its parts: hot8 hot32 hot64 agent8 agent32 agent64 tool8 tool32 tool64 kvp8 kvp32
#        kvp64 burst8 burst32 burst64 costmix8 costmix32 costmix64; agentx32 (agent sessions swept
#        past saturation, for the sustainable rate: not in `hard`; files past-agent32-s<SEED>);
#        surge8 surge32 (a surge on the hot prefix, its holders over time: not in `hard`; files
#        hot-surge<N>-s<SEED>)
#        (no suite: llmd8 llmd64 sglang8 sglang64 mixes; mixes includes tenants)
#        The hard suite's files are named hard-<part>-s<SEED>; bench/suite/acceptance.py checks them.
#        MIXED=F: the hard parts on a mixed fleet, half the replicas F times slower (fleetsim's
#        --slow-replicas N/2 --slow-factor F); files mixed-<part>-s<SEED>
#        WHOLE=F: the hard parts with that share of the requests not streamed (fleetsim's
#        --whole-answers F: the gateway hears of such a request only at its end); files whole-<part>-s<SEED>
#        (whole-<part>-s<SEED>-w<F> when F is not 1; mixed-whole-... with MIXED too)
#        PROFILE=NAME: the hard parts on another engine profile (fleetsim's --profile, e.g.
#        llama-3-70b-tp4; the policy keeps its own default step-time terms, as a gateway not told the
#        engines' model does); files NAME-hard-<part><N>-s<SEED>.
#        RATES=r1,r2,...: the sweep's rates per 8 replicas instead of the part's own (another profile
#        has another capacity: bench/results/README.md, round 44, gives the 70B's)
# env:   SLUICE (default build-release/sluice), JOBS (parallel runs, default 2), SEED (default 1)
#        ONLY=p1,p2: rerun just these policies (those of them each run has) and replace their rows in
#        the existing <name>.json (the other policies' rows are kept; the .md then names both commands)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=${SLUICE:-$root/build-release/sluice}
JOBS=${JOBS:-2}
SEED=${SEED:-1}
out=$root/bench/results
mkdir -p "$out"
ALL=round_robin,random,least_request,power_of_two,cache_aware,llmd_default,sluice,oracle
HARD=round_robin,random,least_request,power_of_two,cache_aware,llmd_default,sluice
HARD_REQUESTS=${HARD_REQUESTS:-3000}
HARD_MAX_REQUESTS=${HARD_MAX_REQUESTS:-8000}
# 64 replicas: 24,000 requests (3,000 per 8 replicas, as at 8). 8,000 there were ~5 s of arrivals at
# the top rates, shorter than one request's decode: the sweep measured a transient in which round
# robin never fell below 90% (bench/results/README.md, round 21).
HARD_MAX_REQUESTS_64=${HARD_MAX_REQUESTS_64:-24000}

# hard PART REPLICAS RATES-PER-8-REPLICAS FLAGS...: one part of the hard suite; the rates scale with
# the replica count (given for 8 replicas), the requests too (HARD_REQUESTS per 8 replicas, at most
# HARD_MAX_REQUESTS = 8,000, HARD_MAX_REQUESTS_64 = 24,000 at 64 replicas: the simulator's cost grows
# with replicas x virtual time).
hard() {
  local part=$1 n=$2 rates8=${RATES:-$3}
  shift 3
  local per8=$HARD_REQUESTS
  if [ "$part" = agent ] || [ "$part" = agentx ]; then per8=$((HARD_REQUESTS / 2)); fi  # long sessions: half the requests
  if [ "$part" = surge ]; then per8=7200; fi  # three phases of 30 s at 80 req/s per 8 replicas
  local rates
  rates=$(python3 -c "import sys; n=$n; print(','.join(f'{float(r)*n/8:g}' for r in '$rates8'.split(',')))")
  local reqs
  local cap=$HARD_MAX_REQUESTS
  if [ "$n" -ge 64 ]; then cap=$HARD_MAX_REQUESTS_64; fi
  if [ "$part" = surge ]; then cap=$((per8 * n / 8)); fi  # the surge's phases are thirds of the requests
  reqs=$(python3 -c "print(min($cap, int($per8*$n/8)))")
  local name="hard-$part$n-s$SEED" title="Issue 13 hard suite: $part, $n replicas, seed $SEED"
  if [ "$part" = agentx ]; then
    name="past-agent$n-s$SEED" title="Agent sessions swept past saturation: $n replicas, seed $SEED"
  fi
  if [ "$part" = surge ]; then
    name="hot-surge$n-s$SEED" title="A surge on the hot prefix (10% -> 70% -> 10%), KV under pressure: $n replicas, seed $SEED"
  fi
  if [ -n "${MIXED:-}" ]; then
    name="mixed-$part$n-s$SEED" title="$title; a mixed fleet: $((n / 2)) of the replicas ${MIXED}x slower"
    set -- "$@" --slow-replicas $((n / 2)) --slow-factor "$MIXED"
  fi
  if [ -n "${WHOLE:-}" ]; then
    name="whole-$part$n-s$SEED" title="$title; ${WHOLE} of the requests not streamed (whole answers)"
    if [ -n "${MIXED:-}" ]; then name="mixed-$name"; fi
    if [ "$WHOLE" != 1 ]; then name="$name-w$WHOLE"; fi
    set -- "$@" --whole-answers "$WHOLE"
  fi
  if [ -n "${PROFILE:-}" ]; then
    name="$PROFILE-$name" title="$title; engine profile $PROFILE"
    set -- "$@" --profile "$PROFILE"
  fi
  run "$name" "$title" --policy "$HARD" --replicas "$n" \
    --rates "$rates" --requests "$reqs" "$@"
}

hard_part() {
  local part=${1%%[0-9]*} n=${1##*[a-z]}
  case $part in
    # hot prefix: 50% of requests on one 6k prefix, the rest over 100 groups of 2k
    hot) hard hot "$n" 40,80,120,160,200 --workload hot_prefix ;;
    # agent sessions (8 per replica) growing past 16k tokens over 14 turns
    agent) if [ "$n" -le 8 ]; then r=4,8,12,16,20,24; else r=8,12,16,20,24; fi
      hard agent "$n" "$r" --workload "agent_sessions,sessions=$((n * 8))" ;;
    # the same agent sessions with the sweep carried on past saturation (to 40 per 8 replicas), so
    # the highest sustainable rate of each policy is inside it (not part of `hard`)
    agentx) hard agentx "$n" 8,12,16,20,24,28,32,36,40 --workload "agent_sessions,sessions=$((n * 8))" ;;
    # a surge on the hot prefix (not part of `hard`; files hot-surge<N>-s<SEED>): its share rises from
    # 10% to 70% for the middle third of the requests and falls back, at a constant total rate, over
    # 250 groups of 2k per 8 replicas on 4,000-block replicas (the KV under pressure, so a copy that
    # is no longer used is evicted): the replicas holding it over time (bench/suite/hot_holders.py)
    surge) local reqs=$((7200 * n / 8))
      hard surge "$n" 60,80 --workload "hot_prefix,hot_share=0.1,surge_share=0.7,surge_start=$((reqs / 3)),surge_end=$((2 * reqs / 3)),groups=$((250 * n / 8))" --kv-blocks 4000 ;;
    # Mooncake-like tool agent: 200 Zipf-popular 8-16k prefixes, short tails and outputs
    tool) hard tool "$n" 20,30,40,50,60 --workload tool_agent ;;
    # KV pressure: 150 prefixes of 3-5k tokens per replica (4.8M tokens at 8) on 12,000-block
    # replicas (1.5M tokens of KV at 8): the prefixes total ~3x the fleet's KV
    kvp) hard kvp "$n" 30,45,60,75,90 --workload "kv_pressure,prefixes=$((n * 150))" --kv-blocks 12000 ;;
    # bursts: 8 identical samples of one 4k-context prompt in a row, gamma arrivals (shape 0.25)
    burst) hard burst "$n" 30,60,90,120,150 --workload fan_out --arrival gamma --burstiness 0.25 ;;
    # 100x cost mix: short chats + 1% 50-100k-token documents
    costmix) hard costmix "$n" 20,40,60,80,100,120 --workload cost_mix ;;
    *) echo "unknown hard part $1" >&2; exit 2 ;;
  esac
}

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
  if [ -n "${ONLY:-}" ] && [ -f "$out/$name.json" ]; then
    # Replace ONLY's rows (those of ONLY's policies this run has): the same flags with --policy them.
    local args=() skip=0 a listed="" only=""
    for a in "$@"; do
      if [ $skip = 1 ]; then skip=0; listed=$a; continue; fi
      if [ "$a" = --policy ]; then skip=1; continue; fi
      args+=("$a")
    done
    set -- "${args[@]}"
    only=$(python3 -c "import sys; l=sys.argv[2].split(','); print(','.join(p for p in sys.argv[1].split(',') if p in l))" "$ONLY" "$listed")
    if [ -z "$only" ]; then echo "== $name: none of $ONLY in $listed, kept" >&2; return 0; fi
    "$SLUICE" fleetsim --seed "$SEED" --jobs "$JOBS" "$@" --policy "$only" --json-out "$out/$name.only.json" > "$out/$name.only.txt"
    python3 "$root/bench/suite/replace_rows.py" "$out/$name.json" "$out/$name.only.json" "$out/$name.json" "$only"
    rm -f "$out/$name.only.json"
    cmd="$(sed '/^# then the rows of/d' "$out/$name.cmd" 2>/dev/null || echo "$cmd")
# then the rows of $only replaced by: sluice fleetsim --seed $SEED $* --policy $only   # source: $rev"
  else
    "$SLUICE" fleetsim --seed "$SEED" --jobs "$JOBS" "$@" --json-out "$out/$name.json" > "$out/$name.txt"
    echo "$cmd" > "$out/$name.cmd"
  fi
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
    hard)
      for n in 8 32 64; do for p in hot agent tool kvp burst costmix; do hard_part "$p$n"; done; done ;;
    hot[0-9]*|agent[0-9]*|agentx[0-9]*|tool[0-9]*|kvp[0-9]*|burst[0-9]*|costmix[0-9]*|surge[0-9]*) hard_part "$1" ;;
    *) echo "unknown suite $1" >&2; exit 2 ;;
  esac
}

if [ $# -eq 0 ]; then set -- llmd8 llmd64 sglang8 sglang64 mixes; fi
for s in "$@"; do suite "$s"; done
