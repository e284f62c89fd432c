#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) and runs each for FUZZ_SECONDS (default 20;
# scripts/test.sh runs each for 12 s; run longer by hand: FUZZ_SECONDS=600 scripts/fuzz.sh). Each target starts
# from its committed seed corpus in fuzz/corpus/<target>/; new inputs go to a scratch copy. A crash
# leaves its input in fuzz/ as crash-*: turn it into a regression test.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${SLUICE_FUZZ_BUILD_DIR:-$root/build-fuzz}
secs=${FUZZ_SECONDS:-20}
"$root/scripts/install-deps.sh"
if [ ! -f "$dir/build.ninja" ]; then
  # OSS-Fuzz's flags (-O1, line tables only): fast enough to fuzz, about half the compile time
  # of RelWithDebInfo's -O2 -g.
  CC=clang CXX=clang++ cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DSLUICE_FUZZ=ON >/dev/null
fi
ninja -C "$dir"
status=0
for src in "$root"/fuzz/*_fuzz.cpp; do
  name=$(basename "$src" .cpp)
  seeds="$root/fuzz/corpus/${name%_fuzz}"
  work="$dir/corpus-run/${name%_fuzz}"
  mkdir -p "$work"
  [ -d "$seeds" ] && cp -n "$seeds"/* "$work"/ 2>/dev/null || true
  echo "fuzz: $name for ${secs}s"
  log="$dir/$name.log"
  if (cd "$root/fuzz" && "$dir/$name" -max_total_time="$secs" -max_len=65536 -timeout=10 -print_final_stats=1 "$work" >"$log" 2>&1); then
    tail -4 "$log"
  else
    # The failure's report (the sanitizer's or libFuzzer's: the check that failed, the stack, the
    # input written as crash-*), which a CI log otherwise loses.
    report='^==[0-9]+==|^SUMMARY|runtime error'
    if grep -qE "$report" "$log"; then grep -E -A40 "$report" "$log" | head -80 || true; else tail -40 "$log"; fi
    echo "fuzz: $name FAILED (full output: $log)"; status=1
  fi
done
exit $status
