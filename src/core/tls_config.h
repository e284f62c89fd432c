// YAML for TLS (plain data in core/config.h; the OpenSSL work is the gateway's, gateway/tls/):
//
//   tls: {cert_file: /etc/sluice/tls/server.crt, key_file: /etc/sluice/tls/server.key}
//       HTTPS on `listen` (PEM: the chain, leaf first, and its private key; TLS 1.2+).
//   pools[].upstream_tls / pools[].endpoints[].upstream_tls:
//       {ca_file: /etc/sluice/tls/engines-ca.pem, verify: true, server_name: vllm.internal}
//       for endpoints written https://host:port: the CA bundle to verify them with (empty: the
//       system store), whether to verify at all, and the name to verify (and send as SNI;
//       empty: the endpoint's host).
// Files are checked to be readable here, so `sluice validate` refuses what serve would.
#pragma once
#include <string>

#include <yaml-cpp/yaml.h>

#include "core/config.h"

namespace sluice {

TlsServerConfig parse_tls_server(const YAML::Node& n, const std::string& path);
// Fills ca_file / verify / server_name (not `enabled`, which the https:// scheme sets).
void parse_tls_client(const YAML::Node& n, const std::string& path, TlsClientConfig& out);

}  // namespace sluice
