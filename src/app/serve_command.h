// `sluice serve`: runs the gateway until SIGTERM/SIGINT (then drains and exits 0).
//   sluice serve -c FILE [--access-log PATH|-|off] [--workers N] [--log-level LEVEL]
// Without -c, serve_embedded_default() runs the gateway in front of an embedded simulated fleet
// (to be wired once the engine simulator lands; until then it explains that -c is needed).
#pragma once
#include <memory>

#include <CLI/CLI.hpp>

#include "core/config.h"

namespace sluice {

struct ServeOptions;

void add_serve_command(CLI::App& app);

// Runs the gateway for `config`; blocks until shutdown; returns the exit code.
int run_gateway(std::shared_ptr<const Config> config, const ServeOptions& options);

// The hook for `sluice serve` with no config: start simulated replicas, build the embedded default
// config for them (default_config_yaml), call run_gateway, stop the replicas, return the code.
struct EmbeddedDefaults {
  int replicas = 4;
  double time_scale = 1.0;
  uint16_t port = 8080;
  uint16_t admin_port = 9090;
};
int serve_embedded_default(const ServeOptions& options, const EmbeddedDefaults& defaults);

}  // namespace sluice
