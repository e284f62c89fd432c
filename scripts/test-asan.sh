#!/usr/bin/env bash
# The whole tree (gateway, simulator, every unit and integration test) under AddressSanitizer +
# UndefinedBehaviorSanitizer: a Debug build in build-asan, then every CTest test. CI runs this
# (scripts/test.sh); run it by hand before landing data-path changes. Usage:
# scripts/test-asan.sh [extra ctest args], e.g. -L integration or -R Trace.
#
# Reports go to one file per process in <build>/sanitizer-logs/ (ASAN_OPTIONS/UBSAN_OPTIONS
# log_path), not to stderr: integration tests start gateways and simulators whose stderr they read
# or discard and whose exit status they mostly do not check (a SIGTERM'd simulator, a killed
# gateway), so a report there would otherwise pass unseen. Any file there fails the run and is
# printed.
# SLUICE_SANITIZED=1 is exported to the tests: the sanitized binaries are several times slower, so a
# test that asserts a latency goal should skip that assertion (the Release run in scripts/test.sh
# checks it); timeouts stay as they are (the suite passes with them under the sanitizers).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SLUICE_ASAN_BUILD_DIR:-$root/build-asan}
start=$(date +%s)
phase() { echo "test-asan.sh: $1 at $(( $(date +%s) - start ))s"; }
"$root/scripts/install-deps.sh"
if [ ! -f "$dir/build.ninja" ]; then
  # Line tables only (-g1): reports still name file:line for every frame, and the -O0 build of
  # the Asio/Beast coroutine code compiles ~25% faster than with full -g (src/bench/load_client.cpp:
  # 54 s -> 41 s). For gdb with locals, reconfigure with -DCMAKE_CXX_FLAGS_DEBUG=-g.
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_DEBUG=-g1 >/dev/null
fi
# What the tests run, and the microbenchmarks (so that they keep compiling: CI builds only this tree).
ninja -C "$dir" sluice sluice_tests sluice_microbench
phase "build done"

logs="$dir/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
status=0
(
  cd "$dir"
  export SLUICE_SANITIZED=1
  export ASAN_OPTIONS="detect_leaks=1:log_path=$logs/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export UBSAN_OPTIONS="print_stacktrace=1:log_path=$logs/ubsan${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
  ctest --output-on-failure --timeout 600 -j2 "$@"
) || status=$?
phase "tests done"

reports=("$logs"/*)
if [ -e "${reports[0]}" ]; then
  for f in "${reports[@]}"; do
    echo "==== sanitizer report: $f"
    cat "$f"
  done
  echo "test-asan.sh: ${#reports[@]} process(es) wrote sanitizer reports (above; kept in $logs)"
  status=1
fi
exit $status
