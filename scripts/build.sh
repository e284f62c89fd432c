#!/usr/bin/env bash
# Configures and builds sluice (Ninja + ccache). Usage: scripts/build.sh [build-dir] [build-type]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build-release}
type=${2:-Release}
"$root/scripts/install-deps.sh"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" ${SLUICE_CMAKE_ARGS:-} >/dev/null
fi
ninja -C "$dir" ${SLUICE_TARGETS:-}
