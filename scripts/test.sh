#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. install what is missing, build (Release with assertions on), run every integration test
#      (real processes on loopback) through CTest;
#   2. the whole tree under AddressSanitizer + UndefinedBehaviorSanitizer
#      (scripts/test-asan.sh: a Debug build in build-asan, every unit and integration test; any
#      sanitizer report from any process, gateway and simulator included, fails the run);
#   3. each libFuzzer target briefly from its committed seed corpus.
# Usage: scripts/test.sh [extra ctest args, passed to 1 and 2]. SLUICE_SKIP_SANITIZE=1 /
# SLUICE_SKIP_FUZZ=1 skip 2 / 3.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SLUICE_BUILD_DIR:-$root/build-release}
start=$(date +%s)
phase() { echo "test.sh: $1 at $(( $(date +%s) - start ))s"; }

# The unit tests run once, in step 2 (under the sanitizers they check more); step 1 builds what the
# integration tests and the main job run (and the microbenchmarks, so they keep compiling) and runs
# the integration tests against the Release binary, where the latency assertions are made. Without
# step 2 (SLUICE_SKIP_SANITIZE=1), step 1 builds and runs everything.
if [ "${SLUICE_SKIP_SANITIZE:-0}" != 1 ]; then
  SLUICE_TARGETS="sluice sluice_microbench" "$root/scripts/build.sh" "$dir"
  phase "build done"
  (cd "$dir" && ctest --output-on-failure --timeout 300 -j2 -L integration "$@")
else
  "$root/scripts/build.sh" "$dir"
  phase "build done"
  (cd "$dir" && ctest --output-on-failure --timeout 300 -j2 "$@")
fi
phase "tests done"

if [ "${SLUICE_SKIP_SANITIZE:-0}" != 1 ]; then
  "$root/scripts/test-asan.sh" "$@"
  phase "whole tree under ASan+UBSan done"
fi

if [ "${SLUICE_SKIP_FUZZ:-0}" != 1 ]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-15} "$root/scripts/fuzz.sh"
  phase "fuzzing done"
fi
