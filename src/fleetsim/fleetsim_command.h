// `sluice fleetsim`: compare picker policies on a simulated fleet in virtual time (fleet_sim.h).
#pragma once
#include <CLI/CLI.hpp>

namespace sluice {
void add_fleetsim_command(CLI::App& app);
}
