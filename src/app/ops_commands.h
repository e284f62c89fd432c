// The operator's subcommands: `validate` (every error of a config at once, the parser serve uses;
// core/config_validate.h), `hash-key` (the key_sha256 form of an API key) and the version string.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace sluice {

void add_validate_command(CLI::App& app);
void add_hash_key_command(CLI::App& app);
// "sluice 0.1.0 (revision abc123, Release)".
std::string version_string();

}  // namespace sluice
