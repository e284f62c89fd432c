// `sluice bench`: the open-loop HTTP load generator (load_client.h) with the workloads of
// core/workload and the figures of core/workload/stats.h.
#pragma once
#include <CLI/CLI.hpp>

namespace sluice {
void add_bench_command(CLI::App& app);
}
