// `sluice sim`: serves N simulated vLLM replicas from one process (see src/sim/replica.h).
#pragma once

namespace CLI {
class App;
}

namespace sluice {

void add_sim_command(CLI::App& app);

}  // namespace sluice
