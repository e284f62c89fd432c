#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, then runs every unit and integration
# test (real processes on loopback) through CTest, then each libFuzzer target briefly.
# Usage: scripts/test.sh [extra ctest args]. SLUICE_SKIP_FUZZ=1 skips the fuzzing pass.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SLUICE_BUILD_DIR:-$root/build-release}
start=$(date +%s)
"$root/scripts/build.sh" "$dir"
echo "test.sh: build done in $(( $(date +%s) - start ))s"
cd "$dir"
ctest --output-on-failure --timeout 300 -j2 "$@"
echo "test.sh: tests done at $(( $(date +%s) - start ))s"
if [ "${SLUICE_SKIP_FUZZ:-0}" != 1 ]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-15} "$root/scripts/fuzz.sh"
  echo "test.sh: fuzzing done at $(( $(date +%s) - start ))s"
fi
