#include "core/upstream_auth.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/admission/tenants.h"
#include "core/config_yaml.h"

namespace sluice {

namespace {

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// A key that would break the request head (CR, LF, other control bytes) is refused.
bool header_safe(const std::string& k) {
  for (unsigned char c : k)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

}  // namespace

std::string parse_upstream_auth(const YAML::Node& n, const std::string& path) {
  using namespace config_yaml;
  check_keys(n, path, {"api_key_file", "api_key_env"});
  const bool file = static_cast<bool>(n["api_key_file"]), env = static_cast<bool>(n["api_key_env"]);
  if (file == env) fail(path, "give exactly one of api_key_file and api_key_env");
  std::string key;
  if (file) {
    const std::string where = path + ".api_key_file";
    const auto name = get<std::string>(n["api_key_file"], where, "a file path");
    std::ifstream in(name);
    if (!in) fail(where, "cannot read '" + name + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    key = trimmed(ss.str());
    if (key.empty()) fail(where, "'" + name + "' is empty");
    if (!header_safe(key)) fail(where, "the key in '" + name + "' contains control characters");
  } else {
    const std::string where = path + ".api_key_env";
    const auto name = get<std::string>(n["api_key_env"], where, "an environment variable name");
    const char* v = std::getenv(name.c_str());
    key = v ? trimmed(v) : std::string();
    if (key.empty()) fail(where, "environment variable " + name + " is not set or empty");
    if (!header_safe(key)) fail(where, "the key in " + name + " contains control characters");
  }
  return "Bearer " + key;
}

std::string upstream_auth_fingerprint(const std::string& authorization) {
  return authorization.empty() ? std::string() : "\nupstream_auth sha256 " + sha256_hex(authorization);
}

}  // namespace sluice
