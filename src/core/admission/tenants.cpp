#include "core/admission/tenants.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_set>

namespace sluice {

namespace {

using Digest = std::array<unsigned char, 32>;

const EVP_MD* sha256_md() {
  // Fetched once: implicit fetching by EVP_sha256() on every call costs a lookup.
  static const EVP_MD* md = [] {
    const EVP_MD* m = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return m != nullptr ? m : EVP_sha256();
  }();
  return md;
}

bool sha256(std::string_view data, Digest& out) {
  unsigned int len = 0;
  return EVP_Digest(data.data(), data.size(), out.data(), &len, sha256_md(), nullptr) == 1 &&
         len == out.size();
}

uint64_t prefix_of(const Digest& d) {
  uint64_t p = 0;
  std::memcpy(&p, d.data(), sizeof p);
  return p;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool parse_hex_digest(std::string_view hex, Digest& out) {
  if (hex.size() != 64) return false;
  for (size_t i = 0; i < 32; ++i) {
    int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

std::string check_limits(const RateLimits& l, const std::string& where, bool allow_concurrent) {
  auto bad = [&](const std::optional<int64_t>& v) { return v.has_value() && *v <= 0; };
  if (bad(l.requests_per_min)) return where + ".requests_per_min: must be > 0";
  if (bad(l.input_tokens_per_min)) return where + ".input_tokens_per_min: must be > 0";
  if (bad(l.output_tokens_per_min)) return where + ".output_tokens_per_min: must be > 0";
  if (bad(l.tokens_per_day)) return where + ".tokens_per_day: must be > 0";
  if (bad(l.max_concurrent)) return where + ".max_concurrent: must be > 0";
  if (!allow_concurrent && l.max_concurrent) return where + ".max_concurrent: only allowed tenant-wide";
  return {};
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

const ModelLimits* Tenant::limits_for_model(std::string_view model) const {
  for (const auto& m : model_limits)
    if (m.model == model) return &m;
  return nullptr;
}

bool Tenant::allows_model(std::string_view model) const {
  if (allowed_models.empty()) return true;
  for (const auto& m : allowed_models)
    if (m == model) return true;
  return false;
}

TenantRegistryResult TenantRegistry::build(const TenantsSpec& spec) {
  auto reg = std::make_shared<TenantRegistry>();
  std::unordered_set<std::string> names;
  reg->tenants_.reserve(spec.tenants.size());
  for (size_t i = 0; i < spec.tenants.size(); ++i) {
    const TenantSpec& t = spec.tenants[i];
    const std::string where = fmt::format("tenants[{}]", i);
    if (t.name.empty()) return {nullptr, where + ".name: must not be empty"};
    if (!names.insert(t.name).second) return {nullptr, where + ".name: duplicate tenant '" + t.name + "'"};
    if (!std::isfinite(t.weight) || t.weight <= 0)
      return {nullptr, where + ".weight: must be a finite number > 0"};
    if (auto e = check_limits(t.limits, where + ".limits", true); !e.empty()) return {nullptr, e};
    std::unordered_set<std::string> models;
    for (size_t m = 0; m < t.model_limits.size(); ++m) {
      const std::string mwhere = fmt::format("{}.models[{}]", where, m);
      if (t.model_limits[m].model.empty()) return {nullptr, mwhere + ".model: must not be empty"};
      if (!models.insert(t.model_limits[m].model).second)
        return {nullptr, mwhere + ".model: duplicate model '" + t.model_limits[m].model + "'"};
      if (auto e = check_limits(t.model_limits[m].limits, mwhere + ".limits", false); !e.empty())
        return {nullptr, e};
    }
    std::unordered_set<std::string> allowed;
    for (size_t m = 0; m < t.allowed_models.size(); ++m) {
      const std::string mwhere = fmt::format("{}.allowed_models[{}]", where, m);
      if (t.allowed_models[m].empty()) return {nullptr, mwhere + ": must not be empty"};
      if (!allowed.insert(t.allowed_models[m]).second)
        return {nullptr, mwhere + ": duplicate model '" + t.allowed_models[m] + "'"};
    }
    const TenantId id = static_cast<TenantId>(reg->tenants_.size());
    for (size_t k = 0; k < t.key_sha256_hex.size(); ++k) {
      Digest d;
      if (!parse_hex_digest(t.key_sha256_hex[k], d))
        return {nullptr, fmt::format("{}.key_sha256[{}]: expected 64 hex digits (SHA-256 of the key)", where, k)};
      auto& bucket = reg->keys_[prefix_of(d)];
      for (const auto& e : bucket)
        if (e.digest == d)
          return {nullptr, fmt::format("{}.key_sha256[{}]: key already belongs to tenant '{}'", where,
                                       k, e.tenant == id ? t.name : reg->tenants_[e.tenant].name)};
      bucket.push_back({d, id});
    }
    reg->tenants_.push_back(Tenant{id, t.name, t.priority, t.weight, t.limits, t.model_limits, t.allowed_models});
  }
  if (!spec.anonymous_tenant.empty()) {
    reg->anonymous_ = reg->find(spec.anonymous_tenant);
    if (reg->anonymous_ == nullptr)
      return {nullptr, "admission.anonymous_tenant: no tenant named '" + spec.anonymous_tenant + "'"};
  }
  return {std::move(reg), {}};
}

const Tenant* TenantRegistry::find(std::string_view name) const {
  for (const auto& t : tenants_)
    if (t.name == name) return &t;
  return nullptr;
}

AuthResult TenantRegistry::authenticate(std::string_view authorization) const {
  authorization = trim(authorization);
  if (authorization.empty()) return authenticate_key({});
  constexpr std::string_view kScheme = "bearer";
  const bool scheme_ok =
      authorization.size() >= kScheme.size() &&
      std::equal(kScheme.begin(), kScheme.end(), authorization.begin(),
                 [](char a, char b) { return a == (b | 0x20); }) &&
      (authorization.size() == kScheme.size() || authorization[kScheme.size()] == ' ' ||
       authorization[kScheme.size()] == '\t');
  if (!scheme_ok) return AuthResult{nullptr, unauthorized_denial(false)};
  std::string_view key = trim(authorization.substr(kScheme.size()));
  if (key.empty()) return AuthResult{nullptr, unauthorized_denial(true)};
  return authenticate_key(key);
}

AuthResult TenantRegistry::authenticate_key(std::string_view key) const {
  if (key.empty()) {
    if (anonymous_ != nullptr) return AuthResult{anonymous_, {}};
    return AuthResult{nullptr, unauthorized_denial(true)};
  }
  Digest d;
  if (!sha256(key, d)) return AuthResult{nullptr, unauthorized_denial(false)};
  const Tenant* found = nullptr;
  if (auto it = keys_.find(prefix_of(d)); it != keys_.end()) {
    for (const auto& e : it->second)
      if (CRYPTO_memcmp(e.digest.data(), d.data(), d.size()) == 0) found = &tenants_[e.tenant];
  }
  OPENSSL_cleanse(d.data(), d.size());
  if (found == nullptr) return AuthResult{nullptr, unauthorized_denial(false)};
  return AuthResult{found, {}};
}

std::string sha256_hex(std::string_view key) {
  Digest d;
  if (!sha256(key, d)) return {};
  std::string out;
  out.reserve(64);
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char c : d) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

}  // namespace sluice
