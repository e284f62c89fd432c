#include "core/tls_config.h"

#include <fstream>

#include "core/config_yaml.h"

namespace sluice {

namespace {

std::string readable_file(const YAML::Node& n, const std::string& path) {
  const auto f = config_yaml::get<std::string>(n, path, "a file path");
  if (f.empty()) config_yaml::fail(path, "must not be empty");
  std::ifstream in(f);
  if (!in) config_yaml::fail(path, "cannot read '" + f + "'");
  return f;
}

}  // namespace

TlsServerConfig parse_tls_server(const YAML::Node& n, const std::string& path) {
  config_yaml::check_keys(n, path, {"cert_file", "key_file"});
  if (!n["cert_file"]) config_yaml::fail(path + ".cert_file", "is required");
  if (!n["key_file"]) config_yaml::fail(path + ".key_file", "is required");
  TlsServerConfig t;
  t.cert_file = readable_file(n["cert_file"], path + ".cert_file");
  t.key_file = readable_file(n["key_file"], path + ".key_file");
  return t;
}

void parse_tls_client(const YAML::Node& n, const std::string& path, TlsClientConfig& out) {
  config_yaml::check_keys(n, path, {"ca_file", "verify", "server_name"});
  if (n["ca_file"]) out.ca_file = readable_file(n["ca_file"], path + ".ca_file");
  if (n["verify"]) out.verify = config_yaml::get<bool>(n["verify"], path + ".verify", "true or false");
  if (n["server_name"]) out.server_name = config_yaml::get<std::string>(n["server_name"], path + ".server_name", "a host name");
}

}  // namespace sluice
