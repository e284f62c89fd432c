#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, then runs every unit and integration
# test (real processes on loopback) through CTest. Usage: scripts/test.sh [extra ctest args]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SLUICE_BUILD_DIR:-$root/build-release}
"$root/scripts/build.sh" "$dir"
cd "$dir"
ctest --output-on-failure --timeout 300 -j2 "$@"
