#!/usr/bin/env bash
# The hard suite's 12 sweeps at 8 and 32 replicas (the cells committed as bench/results/hard-*-s9)
# at other seeds, into a scratch directory: for checking a picker change on seeds it was not
# developed on without committing those seeds' results (which would make them seen). Every policy
# runs; each cell gets its JSON lines (as scripts/bench-policies.sh writes them) and its command
# (CELL.cmd), so bench/suite/rerun_sluice.sh can rerun only the sluice rows with another binary:
#
#   bench/suite/heldout.sh OUTDIR SEED...
#   BASE=OUTDIR SLUICE=OTHER bench/suite/rerun_sluice.sh OTHERDIR $(cd OUTDIR && ls *.cmd | sed 's/.cmd$//')
#   bench/suite/margins.py 'OUTDIR/hard-*.json' 'OTHERDIR/hard-*.json'
#
# env: SLUICE (default build-release/sluice), JOBS (cells at once, default 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
SLUICE=${SLUICE:-$root/build-release/sluice}
JOBS=${JOBS:-2}
out=$1
shift
mkdir -p "$out"
rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
for seed in "$@"; do
  for f in "$root"/bench/results/hard-*-s9.cmd; do
    part=$(basename "$f" .cmd)
    cell=${part%-s9}-s$seed
    # The cell's command (its first line) at this seed, without its provenance comment.
    read -r -a args <<<"$(head -1 "$f" | sed 's/ *#.*//; s/^sluice fleetsim //; s/--seed 9 /--seed '"$seed"' /')"
    echo "sluice fleetsim ${args[*]}   # source: $rev ($SLUICE)" > "$out/$cell.cmd"
    ("$SLUICE" fleetsim "${args[@]}" --jobs 1 --json > "$out/$cell.json") &
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
  done
done
wait
