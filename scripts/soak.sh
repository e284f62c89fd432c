#!/usr/bin/env bash
# Soak test: N minutes (default 5) of mixed streaming load through `sluice serve` in front of
# `sluice sim` replicas, with replica kills/restarts, SIGSTOP/SIGCONT hangs, SIGHUP reloads and
# client aborts; prints requests, errors by cause, RSS and fds over time, and fails unless the
# gateway never crashed and every gauge is back to zero at the end (scripts/soak.py).
# Not part of CI. Usage: scripts/soak.sh [--minutes N] [--sluice path] [soak.py flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sluice="$root/build-release/sluice"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --sluice) sluice=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -x "$sluice" ] || { echo "no sluice binary at $sluice (build it: scripts/build.sh)" >&2; exit 2; }
echo "sluice $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ), $(nproc) cores"
exec python3 "$root/scripts/soak.py" --sluice "$sluice" "${args[@]}"
