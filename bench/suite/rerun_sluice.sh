#!/usr/bin/env bash
# Reruns only the sluice rows of committed hard-suite cells into a scratch directory (the other
# policies' rows are copied from bench/results, which fleetsim's determinism makes exact for the
# same seed) and prints acceptance.py's summary for them. For trying a picker change in ~40 s per
# 18 cells at 8 replicas, without touching the committed results.
#
# usage: bench/suite/rerun_sluice.sh OUTDIR CELL...    (CELL: hard-hot8-s2, hard-kvp32-s1, ...)
# env:   SLUICE (default build-release/sluice), JOBS (cells at once, default 2), EXTRA (more fleetsim
#        arguments for the sluice runs, e.g. EXTRA='--policy-param decode_bound_price=1'),
#        BASE (the cells' CELL.cmd and CELL.json, default bench/results; bench/suite/heldout.sh's
#        scratch directory for seeds not committed)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
SLUICE=${SLUICE:-$root/build-release/sluice}
JOBS=${JOBS:-2}
out=$1
shift
mkdir -p "$out"
results=${BASE:-$root/bench/results}
for cell in "$@"; do
  [ -f "$results/$cell.cmd" ] || { echo "no $results/$cell.cmd" >&2; exit 2; }
  # The cell's own command (its first line), without its policy list and provenance comment.
  read -r -a args <<<"$(head -1 "$results/$cell.cmd" | sed 's/ *#.*//; s/^sluice fleetsim //; s/--policy [^ ]*//')"
  (
    read -r -a extra <<<"${EXTRA:-}"
    "$SLUICE" fleetsim "${args[@]}" --policy sluice "${extra[@]}" --jobs 1 --json > "$out/$cell.only.json"
    python3 "$root/bench/suite/replace_rows.py" "$results/$cell.json" "$out/$cell.only.json" "$out/$cell.json" sluice
  ) &
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.2; done
done
wait
files=()
for cell in "$@"; do files+=("$out/$cell.json"); done
python3 "$root/bench/suite/acceptance.py" "${files[@]}" | sed -n '/^| workload | replicas/,/^$/p'
