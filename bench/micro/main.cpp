// The one main() of sluice_microbench: every other bench/micro/*.cpp only registers benchmarks.
#include <benchmark/benchmark.h>

BENCHMARK_MAIN();
