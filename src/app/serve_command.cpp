#include "app/serve_command.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "extproc/ext_proc_service.h"
#include "gateway/discovery/k8s_discovery.h"
#include "gateway/redis/peer_load_link.h"
#include "gateway/server.h"
#include "sim/embedded_fleet.h"

#include <fmt/format.h>

namespace sluice {

int run_gateway(std::shared_ptr<const Config> config, const ServeOptions& options) {
  std::unique_ptr<Server> server;
  try {
    server = std::make_unique<Server>(std::move(config), options);
    // The Endpoint Picker's gRPC listener (`ext_proc:`), on the same gateway and workers.
    if (const auto& ep = server->gateway().startup_config().ext_proc)
      server->add_service(std::make_unique<ExtProcService>(server->gateway(), *ep, server->worker_executors()));
    // Pools whose endpoints come from Kubernetes (`discovery:`).
    if (auto discovery = std::make_unique<KubernetesDiscovery>(server->gateway(), server->loop_starter()); !discovery->empty())
      server->add_service(std::move(discovery));
    // Gateway replicas sharing in-flight load over Redis pub/sub (`peer_load:`).
    if (const auto& pl = server->gateway().startup_config().peer_load)
      server->add_service(std::make_unique<PeerLoadLink>(server->gateway(), *pl));
  } catch (const std::exception& e) {
    spdlog::error("cannot start the gateway: {}", e.what());
    return 1;
  }
  const int code = server->run();
  if (server->gateway().connections.load() > 0) {
    // A coroutine did not unwind in time: skip destruction rather than free state it still uses.
    spdlog::warn("{} connections still open at exit", server->gateway().connections.load());
    (void)server.release();
  }
  return code;
}

int serve_embedded_default(const ServeOptions& options, const EmbeddedDefaults& defaults) {
  sim::EmbeddedFleetOptions fo;
  fo.chat_replicas = defaults.replicas;
  fo.time_scale = defaults.time_scale;
  std::unique_ptr<sim::EmbeddedFleet> fleet;
  std::shared_ptr<const Config> cfg;
  try {
    fleet = std::make_unique<sim::EmbeddedFleet>(fo);
    cfg = parse_config(default_config_yaml(fleet->chat_ports(), fleet->embedding_port(), defaults.port, defaults.admin_port));
  } catch (const std::exception& e) {
    spdlog::error("cannot start the embedded simulated fleet: {}", e.what());
    return 1;
  }
  std::string ports;
  for (auto p : fleet->chat_ports()) ports += fmt::format(" {}", p);
  fmt::print(stderr,
             "sluice: no config given, so the gateway runs in front of an embedded simulated fleet\n"
             "  {} chat replicas (Llama-3-8B on H100 cost model) on 127.0.0.1 ports{}, one embedding replica on {}\n"
             "  API        http://127.0.0.1:{}/v1   (models: meta-llama/Llama-3.1-8B-Instruct, alias llama-3-8b, adapter sql-lora, BAAI/bge-small-en-v1.5)\n"
             "  metrics    http://127.0.0.1:{}/metrics\n"
             "  dashboard  http://127.0.0.1:{}/dashboard\n"
             "  try:\n"
             "    curl -sN http://127.0.0.1:{}/v1/chat/completions -H 'content-type: application/json' \\\n"
             "      -d '{{\"model\":\"llama-3-8b\",\"stream\":true,\"max_tokens\":32,\"messages\":[{{\"role\":\"user\",\"content\":\"Hello\"}}]}}'\n"
             "  Ctrl-C stops the gateway (draining streams) and the fleet.\n",
             fleet->chat_ports().size(), ports, fleet->embedding_port(), defaults.port, defaults.admin_port,
             defaults.admin_port, defaults.port);
  const int code = run_gateway(cfg, options);
  fleet->stop();
  return code;
}

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Run the gateway (with no config: in front of an embedded simulated fleet)");
  static std::string config_path;
  static ServeOptions options;
  static std::string log_level = "info";
  static EmbeddedDefaults defaults;
  cmd->add_option("--sim-replicas", defaults.replicas, "with no config: simulated chat replicas")->capture_default_str();
  cmd->add_option("--sim-time-scale", defaults.time_scale, "with no config: simulated clock speed-up")->capture_default_str();
  cmd->add_option("--port", defaults.port, "with no config: the API port")->capture_default_str();
  cmd->add_option("--admin-port", defaults.admin_port, "with no config: the admin (metrics, dashboard) port")->capture_default_str();
  cmd->add_option("-c,--config", config_path, "YAML config file");
  cmd->add_option("--access-log", options.access_log, "access log: a file path, - for stdout, off")->capture_default_str();
  cmd->add_option("--workers", options.workers, "worker threads (overrides the config)");
  cmd->add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  cmd->callback([cmd] {
    // The demo-fleet flags mean nothing with a config file: refuse them rather than ignore them.
    if (!config_path.empty())
      for (const char* flag : {"--port", "--admin-port", "--sim-replicas", "--sim-time-scale"})
        if (cmd->count(flag) > 0) {
          fmt::print(stderr, "sluice serve: {} applies only without -c (the embedded simulated fleet); "
                             "with a config file the listen addresses are `listen` and `admin` in it\n", flag);
          throw CLI::RuntimeError(2);
        }
    // Operational logs go to stderr; stdout is the access log's by default.
    spdlog::set_default_logger(spdlog::stderr_color_mt("sluice"));
    spdlog::set_level(spdlog::level::from_str(log_level));
    int code;
    if (config_path.empty()) {
      code = serve_embedded_default(options, defaults);
    } else {
      std::shared_ptr<const Config> cfg;
      try {
        cfg = load_config_file(config_path);
      } catch (const ConfigError& e) {
        spdlog::error("invalid config: {}", e.what());
        throw CLI::RuntimeError(2);
      }
      options.config_path = config_path;
      code = run_gateway(cfg, options);
    }
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace sluice
