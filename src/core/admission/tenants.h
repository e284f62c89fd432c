/*
 * Tenants: who a request belongs to, and the limits, priority and fairness weight that apply.
 *
 * Configuration (`TenantsSpec`, plain data filled from YAML by the config layer) is validated
 * once by `TenantRegistry::build` into an immutable registry shared by all requests; a reload
 * builds a new one. Each tenant gets a dense `TenantId` (its index) that the budget, the VTC and
 * the queue use to index per-tenant state.
 *
 * Authentication: `Authorization: Bearer <key>`. Config stores only SHA-256 hashes of keys (hex).
 * A presented key is hashed (OpenSSL EVP, SHA-256) and looked up in a table keyed by the first
 * 8 bytes of the digest; candidates are confirmed with CRYPTO_memcmp over all 32 bytes (constant
 * time). Timing can only reveal facts about the digest, never about the key itself. Keys are never
 * stored, returned or put in error messages. A missing key maps to the anonymous tenant if one is
 * configured, else 401; an unknown key is always 401 (a wrong key is never silently downgraded).
 *
 * Limits (all optional; absent = unlimited): requests/min, input tokens/min, output tokens/min,
 * tokens/day (input + output), max concurrent requests. Each rate is a GCRA bucket whose size is
 * one period's allowance. Per-model limits are a narrower scope checked in addition to the
 * tenant-wide limits for requests to that model. Defaults: priority 0, weight 1.
 *
 * Model allow-list (`allowed_models`, optional): the only model names the tenant may request or
 * see listed; any other is answered as if it did not exist (404 model_not_found, never revealing
 * that the name is configured). Absent = every configured model.
 */
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/admission/outcome.h"

namespace sluice {

using TenantId = uint32_t;

struct RateLimits {
  std::optional<int64_t> requests_per_min;
  std::optional<int64_t> input_tokens_per_min;
  std::optional<int64_t> output_tokens_per_min;
  std::optional<int64_t> tokens_per_day;
  std::optional<int64_t> max_concurrent;  // tenant-wide only
};

struct ModelLimits {
  std::string model;  // client-facing model name
  RateLimits limits;  // max_concurrent must be unset here
};

struct TenantSpec {
  std::string name;
  std::vector<std::string> key_sha256_hex;  // 64 hex digits each
  int priority = 0;                         // higher first; negative = sheddable
  double weight = 1.0;                      // VTC fairness weight, > 0
  RateLimits limits;
  std::vector<ModelLimits> model_limits;
  // The client-facing model names (as configured: an alias or an adapter is its own name) this
  // tenant may use and see in /v1/models; empty = every model. Checked against the configured
  // models at load (core/config.cpp).
  std::vector<std::string> allowed_models;
};

struct TenantsSpec {
  std::vector<TenantSpec> tenants;
  std::string anonymous_tenant;  // name of the tenant for requests without a key; "" = none
};

struct Tenant {
  TenantId id = 0;
  std::string name;
  int priority = 0;
  double weight = 1.0;
  RateLimits limits;
  std::vector<ModelLimits> model_limits;
  std::vector<std::string> allowed_models;  // empty = every model

  // The per-model scope for `model`, or nullptr.
  const ModelLimits* limits_for_model(std::string_view model) const;
  // The tenant may use `model` (a client-facing name): no allow-list, or the name is on it.
  bool allows_model(std::string_view model) const;
};

struct AuthResult {
  const Tenant* tenant = nullptr;  // set on success
  std::optional<Denial> denial;    // 401 when !ok()
  bool ok() const { return tenant != nullptr; }
};

class TenantRegistry;
struct TenantRegistryResult {
  std::shared_ptr<const TenantRegistry> registry;  // null on error
  std::string error;                               // names the offending field
};

class TenantRegistry {
 public:
  // Validates: non-empty unique names, 64-hex-digit keys unique across tenants, weight finite and
  // > 0, every limit > 0, no max_concurrent per model, unique model names per tenant, the
  // anonymous tenant exists. Never throws.
  static TenantRegistryResult build(const TenantsSpec& spec);

  // `authorization` is the raw Authorization header value ("" when absent).
  AuthResult authenticate(std::string_view authorization) const;
  // The bare key (e.g. from `x-api-key`); "" = no key.
  AuthResult authenticate_key(std::string_view key) const;

  const Tenant& tenant(TenantId id) const { return tenants_[id]; }
  const Tenant* find(std::string_view name) const;
  size_t size() const { return tenants_.size(); }
  const std::vector<Tenant>& tenants() const { return tenants_; }

 private:
  using Digest = std::array<unsigned char, 32>;
  struct KeyEntry {
    Digest digest;
    TenantId tenant;
  };
  std::vector<Tenant> tenants_;
  std::unordered_map<uint64_t, std::vector<KeyEntry>> keys_;  // by the digest's first 8 bytes
  const Tenant* anonymous_ = nullptr;
};

// Lower-case hex SHA-256 of `key`, the form stored in config (for tooling and tests).
std::string sha256_hex(std::string_view key);

}  // namespace sluice
