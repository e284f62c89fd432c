// The one sluice binary: every driver is a subcommand.
//   sluice serve     the gateway (with no config: in front of an embedded simulated fleet)
//   sluice validate  check a config file and print what it defines
//   sluice sim       the engine simulator (N vLLM-compatible replicas on loopback ports)
//   sluice fleetsim  policy comparisons on a simulated fleet in virtual time
//   sluice bench     open-loop HTTP load generator (the same workloads and figures)
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench_command.h"
#include "core/config.h"
#include "fleetsim/fleetsim_command.h"
#include "app/serve_command.h"
#include "sim/sim_command.h"

namespace {

void add_validate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("validate", "Validate a config file and summarise it");
  static std::string path;
  cmd->add_option("-c,--config", path, "YAML config file")->required();
  cmd->callback([] {
    try {
      auto cfg = sluice::load_config_file(path);
      fmt::print("{}: ok\n", path);
      fmt::print("  listen {}  admin {}  workers {}\n", cfg->listen.str(), cfg->admin.str(), cfg->workers);
      for (const auto& p : cfg->pools)
        fmt::print("  pool {} ({} endpoints, policy {})\n", p.name, p.endpoints.size(), p.policy);
      for (const auto& m : cfg->models) {
        std::string what = m.is_alias() ? " -> " + m.target : (m.adapter_of.empty() ? "" : " (adapter of " + m.adapter_of + ")");
        fmt::print("  model {}{} in pool {}\n", m.name, what, m.pool);
      }
    } catch (const sluice::ConfigError& e) {
      fmt::print(stderr, "invalid config: {}\n", e.what());
      throw CLI::RuntimeError(2);
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sluice: an LLM-aware inference gateway"};
  app.require_subcommand(1);
  sluice::add_serve_command(app);
  add_validate_command(app);
  sluice::add_sim_command(app);
  sluice::add_fleetsim_command(app);
  sluice::add_bench_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
