#!/usr/bin/env bash
# The whole tree (gateway, simulator, every unit and integration test) under AddressSanitizer +
# UndefinedBehaviorSanitizer. Slower to build than CI's budget allows, so CI runs only the core's
# unit tests under the sanitizers (scripts/test.sh); run this before landing data-path changes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SLUICE_ASAN_BUILD_DIR:-$root/build-asan}
"$root/scripts/install-deps.sh"
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON >/dev/null
fi
ninja -C "$dir"
cd "$dir"
ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure --timeout 600 -j2 "$@"
