#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. install what is missing, build (Release with assertions on), run every unit and integration
#      test (real processes on loopback) through CTest;
#   2. the pure core's unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer;
#   3. each libFuzzer target briefly from its committed seed corpus.
# Usage: scripts/test.sh [extra ctest args]. SLUICE_SKIP_SANITIZE=1 / SLUICE_SKIP_FUZZ=1 skip 2 / 3.
# The full tree (gateway and integration tests too) under ASan + UBSan: scripts/test-asan.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SLUICE_BUILD_DIR:-$root/build-release}
start=$(date +%s)
phase() { echo "test.sh: $1 at $(( $(date +%s) - start ))s"; }

"$root/scripts/build.sh" "$dir"
phase "build done"
(cd "$dir" && ctest --output-on-failure --timeout 300 -j2 "$@")
phase "tests done"

if [ "${SLUICE_SKIP_SANITIZE:-0}" != 1 ]; then
  asan="$root/build-asan-core"
  if [ ! -f "$asan/build.ninja" ]; then
    cmake -S "$root" -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON >/dev/null
  fi
  ninja -C "$asan" sluice_core_tests
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 "$asan/sluice_core_tests" --gtest_brief=1
  phase "core tests under ASan+UBSan done"
fi

if [ "${SLUICE_SKIP_FUZZ:-0}" != 1 ]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-15} "$root/scripts/fuzz.sh"
  phase "fuzzing done"
fi
