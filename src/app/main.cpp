// The one sluice binary: every driver is a subcommand.
//   sluice serve     the gateway (with no config: in front of an embedded simulated fleet)
//   sluice validate  check a config file (every error at once) and print what it defines
//   sluice hash-key  the SHA-256 of an API key, as tenants[].key_sha256 wants it
//   sluice sim       the engine simulator (N vLLM-compatible replicas on loopback ports)
//   sluice fleetsim  policy comparisons on a simulated fleet in virtual time
//   sluice bench     open-loop HTTP load generator (the same workloads and figures)
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench_command.h"
#include "app/ops_commands.h"
#include "core/config.h"
#include "fleetsim/fleetsim_command.h"
#include "app/serve_command.h"
#include "sim/sim_command.h"


int main(int argc, char** argv) {
  CLI::App app{"sluice: an LLM-aware inference gateway"};
  app.require_subcommand(1);
  app.set_version_flag("--version", sluice::version_string());
  sluice::add_serve_command(app);
  sluice::add_validate_command(app);
  sluice::add_hash_key_command(app);
  sluice::add_sim_command(app);
  sluice::add_fleetsim_command(app);
  sluice::add_bench_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
