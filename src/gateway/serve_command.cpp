#include "gateway/serve_command.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "gateway/server.h"

namespace sluice {

int run_gateway(std::shared_ptr<const Config> config, const ServeOptions& options) {
  std::unique_ptr<Server> server;
  try {
    server = std::make_unique<Server>(std::move(config), options);
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

int serve_embedded_default(const ServeOptions&) {
  spdlog::error("no config given: the embedded simulated fleet is not wired yet; run `sluice serve -c FILE`");
  return 2;
}

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Run the gateway (with no config: in front of an embedded simulated fleet)");
  static std::string config_path;
  static ServeOptions options;
  static std::string log_level = "info";
  cmd->add_option("-c,--config", config_path, "YAML config file");
  cmd->add_option("--access-log", options.access_log, "access log: a file path, - for stdout, off")->capture_default_str();
  cmd->add_option("--workers", options.workers, "worker threads (overrides the config)");
  cmd->add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  cmd->callback([] {
    // Operational logs go to stderr; stdout is the access log's by default.
    spdlog::set_default_logger(spdlog::stderr_color_mt("sluice"));
    spdlog::set_level(spdlog::level::from_str(log_level));
    int code;
    if (config_path.empty()) {
      code = serve_embedded_default(options);
    } else {
      std::shared_ptr<const Config> cfg;
      try {
        cfg = load_config_file(config_path);
      } catch (const ConfigError& e) {
        spdlog::error("invalid config: {}", e.what());
        throw CLI::RuntimeError(2);
      }
      code = run_gateway(cfg, options);
    }
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace sluice
