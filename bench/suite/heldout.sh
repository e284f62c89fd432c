#!/usr/bin/env bash
# The hard suite's 12 sweeps at 8 and 32 replicas (the cells committed as bench/results/hard-*-s9)
# at other seeds, into a scratch directory: for checking a picker change on seeds it was not
# developed on without committing those seeds' results (which would make them seen). Every policy
# runs (one JSON line per run, as scripts/bench-policies.sh writes them); compare two pickers by
# rerunning only the sluice rows with the other binary:
#
#   bench/suite/heldout.sh OUTDIR SEED...                     all policies with $SLUICE
#   ONLY=sluice BASE=DIR bench/suite/heldout.sh OUTDIR SEED... sluice rows of DIR's cells rerun with
#                                                             $SLUICE, the others copied from DIR
#   bench/suite/margins.py 'DIR/hard-*.json' 'OUTDIR/hard-*.json'
#
# env: SLUICE (default build-release/sluice), JOBS (cells at once, default 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
SLUICE=${SLUICE:-$root/build-release/sluice}
JOBS=${JOBS:-2}
out=$1
shift
mkdir -p "$out"
for seed in "$@"; do
  for f in "$root"/bench/results/hard-*-s9.cmd; do
    part=$(basename "$f" .cmd)
    cell=${part%-s9}-s$seed
    # The cell's command (its first line) at this seed, without its provenance comment.
    read -r -a args <<<"$(head -1 "$f" | sed 's/ *#.*//; s/^sluice fleetsim //; s/--seed 9 /--seed '"$seed"' /')"
    if [ -n "${ONLY:-}" ]; then
      [ -f "${BASE:?BASE=DIR with the cells whose other rows are kept}/$cell.json" ] || { echo "no $BASE/$cell.json" >&2; exit 2; }
      keep=()
      skip=0
      for a in "${args[@]}"; do
        if [ $skip = 1 ]; then skip=0; continue; fi
        if [ "$a" = --policy ]; then skip=1; continue; fi
        keep+=("$a")
      done
      (
        "$SLUICE" fleetsim "${keep[@]}" --policy "$ONLY" --jobs 1 --json > "$out/$cell.only.json"
        python3 "$root/bench/suite/replace_rows.py" "$BASE/$cell.json" "$out/$cell.only.json" "$out/$cell.json" "$ONLY"
        rm -f "$out/$cell.only.json"
      ) &
    else
      ("$SLUICE" fleetsim "${args[@]}" --jobs 1 --json > "$out/$cell.json") &
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
  done
done
wait
