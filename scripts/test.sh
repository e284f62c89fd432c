#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   1. install what is missing; build the whole tree (gateway, simulator, tools, unit tests) under
#      AddressSanitizer + UndefinedBehaviorSanitizer and run every unit and integration test
#      (real processes on loopback) through CTest (scripts/test-asan.sh: a Debug build in
#      build-asan; any sanitizer report from any process, gateway and simulator included, fails
#      the run);
#   2. each libFuzzer target briefly from its committed seed corpus (scripts/fuzz.sh).
# The tree is built once: on this 2-core machine a second, Release build of everything took as long
# as the rest of the run, and CI has 25 minutes. What a Release build adds is its latency
# assertions (the sanitized binaries are several times slower, so tests skip them there; the
# speed goals themselves are checked by the committed benchmarks): SLUICE_TEST_RELEASE=1 runs the
# same suite against a Release build (build-release) as well, first.
# Usage: scripts/test.sh [extra ctest args, passed to each ctest run]. SLUICE_SKIP_SANITIZE=1 runs
# the Release suite instead of the sanitized one; SLUICE_SKIP_FUZZ=1 skips 2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SLUICE_BUILD_DIR:-$root/build-release}
start=$(date +%s)
phase() { echo "test.sh: $1 at $(( $(date +%s) - start ))s"; }

if [ "${SLUICE_TEST_RELEASE:-0}" = 1 ] || [ "${SLUICE_SKIP_SANITIZE:-0}" = 1 ]; then
  "$root/scripts/build.sh" "$dir"
  phase "Release build done"
  (cd "$dir" && ctest --output-on-failure --timeout 300 -j2 "$@")
  phase "Release tests done"
fi

if [ "${SLUICE_SKIP_SANITIZE:-0}" != 1 ]; then
  "$root/scripts/test-asan.sh" "$@"
  phase "whole tree under ASan+UBSan done"
fi

if [ "${SLUICE_SKIP_FUZZ:-0}" != 1 ]; then
  FUZZ_SECONDS=${FUZZ_SECONDS:-12} "$root/scripts/fuzz.sh"
  phase "fuzzing done"
fi
