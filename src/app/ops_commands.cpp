#include "app/ops_commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <iostream>

#include "core/admission/admission_config.h"
#include "core/admission/tenants.h"
#include "core/build_info.h"
#include "core/config_validate.h"

namespace sluice {

std::string version_string() {
  return fmt::format("sluice {} (revision {}, {})", build_version(), build_revision(), build_type());
}

namespace {

void print_summary(const std::string& path, const Config& cfg) {
  fmt::print("{}: ok\n", path);
  fmt::print("  listen {}  admin {}  workers {}\n", cfg.listen.str(), cfg.admin.str(), cfg.workers);
  for (const auto& p : cfg.pools)
    fmt::print("  pool {} ({} endpoints, policy {})\n", p.name, p.endpoints.size(), p.policy);
  for (const auto& m : cfg.models) {
    std::string what = m.is_alias() ? " -> " + m.target : (m.adapter_of.empty() ? "" : " (adapter of " + m.adapter_of + ")");
    fmt::print("  model {}{} in pool {}\n", m.name, what, m.pool);
  }
  const AdmissionSpec& a = *cfg.admission;
  if (!a.enabled) {
    fmt::print("  tenants: none (admission off: no API keys are checked, client Authorization is forwarded)\n");
    return;
  }
  for (const auto& t : a.tenants.tenants) {
    std::string limits;
    auto add = [&](const char* name, const std::optional<int64_t>& v) {
      if (v) limits += fmt::format("{}{} {}", limits.empty() ? "" : ", ", name, *v);
    };
    add("requests/min", t.limits.requests_per_min);
    add("input tokens/min", t.limits.input_tokens_per_min);
    add("output tokens/min", t.limits.output_tokens_per_min);
    add("tokens/day", t.limits.tokens_per_day);
    add("max concurrent", t.limits.max_concurrent);
    std::string models = "every model";
    if (!t.allowed_models.empty()) models = "models " + fmt::format("{}", fmt::join(t.allowed_models, ", "));
    fmt::print("  tenant {} ({} keys, priority {}, weight {}; {}; {})\n", t.name, t.key_sha256_hex.size(), t.priority,
               t.weight, limits.empty() ? "no limits" : limits, models);
  }
  if (!a.tenants.anonymous_tenant.empty())
    fmt::print("  requests without a key: tenant {}\n", a.tenants.anonymous_tenant);
  else
    fmt::print("  requests without a key: refused (401)\n");
}

}  // namespace

void add_validate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("validate", "Validate a config file (the checks serve runs, every error at once)");
  static std::string path;
  cmd->add_option("-c,--config", path, "YAML config file")->required();
  cmd->callback([] {
    const ConfigValidation v = validate_config_file(path);
    if (!v.ok()) {
      fmt::print(stderr, "invalid config: {}: {} error{}\n", path, v.errors.size(), v.errors.size() == 1 ? "" : "s");
      for (const auto& e : v.errors) fmt::print(stderr, "  {}\n", e);
      throw CLI::RuntimeError(2);
    }
    print_summary(path, *v.config);
  });
}

void add_hash_key_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "hash-key",
      "Print the SHA-256 (hex) of an API key, the form tenants[].key_sha256 takes. Reads the key from stdin "
      "(one line) unless given; hash the raw key, without \"Bearer \"");
  static std::string key;
  cmd->add_option("key", key, "the API key (better: on stdin, so it stays out of shell history and ps)");
  cmd->callback([] {
    std::string k = key;
    if (k.empty()) {
      if (isatty(STDIN_FILENO)) fmt::print(stderr, "API key: ");
      std::getline(std::cin, k);
    }
    while (!k.empty() && (k.back() == '\n' || k.back() == '\r')) k.pop_back();
    if (k.empty()) {
      fmt::print(stderr, "hash-key: empty key\n");
      throw CLI::RuntimeError(2);
    }
    if (k.size() > 7 && (k.compare(0, 7, "Bearer ") == 0 || k.compare(0, 7, "bearer ") == 0))
      fmt::print(stderr, "hash-key: note: the key starts with \"Bearer \"; clients send \"Authorization: Bearer <key>\" "
                         "and only <key> is hashed, so drop the prefix unless it is part of the key\n");
    fmt::print("{}\n", sha256_hex(k));
  });
}

}  // namespace sluice
