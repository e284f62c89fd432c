// The engines' API key (`upstream_auth:` on a pool or an endpoint): a vLLM started with --api-key
// wants `Authorization: Bearer <key>` on its /v1 routes. The key is read once when the config is
// loaded (and again on every reload) from a file or an environment variable, never from the YAML
// itself, and it is never logged or echoed in an error; sluice sends it in place of the client's
// Authorization header (which, with tenants, is the gateway's own key and is never forwarded).
//
//   upstream_auth:
//     api_key_file: /run/secrets/vllm-api-key   # the file's content, trailing whitespace trimmed
//     # or: api_key_env: VLLM_API_KEY           # the variable's value
//
// An endpoint's own `upstream_auth` replaces its pool's.
#pragma once
#include <string>

#include <yaml-cpp/yaml.h>

namespace sluice {

// The Authorization header value ("Bearer <key>"); throws ConfigError naming `path`'s key.
std::string parse_upstream_auth(const YAML::Node& n, const std::string& path);

// A digest of the header value for a pool's fingerprint (a rotated key makes a reload rebuild
// the pool's runtime); "" when there is no key.
std::string upstream_auth_fingerprint(const std::string& authorization);

}  // namespace sluice
