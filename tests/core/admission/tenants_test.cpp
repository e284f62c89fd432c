#include "core/admission/tenants.h"

#include <gtest/gtest.h>

namespace sluice {
namespace {

TenantsSpec two_tenants() {
  TenantsSpec s;
  TenantSpec a;
  a.name = "acme";
  a.key_sha256_hex = {sha256_hex("sk-acme-1"), sha256_hex("sk-acme-2")};
  a.priority = 2;
  a.weight = 2.0;
  a.limits.requests_per_min = 100;
  TenantSpec b;
  b.name = "free";
  b.key_sha256_hex = {sha256_hex("sk-free")};
  b.priority = -1;
  s.tenants = {a, b};
  return s;
}

TEST(Tenants, Sha256HexMatchesKnownVector) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Tenants, AuthenticatesBearerKeys) {
  auto built = TenantRegistry::build(two_tenants());
  ASSERT_TRUE(built.registry) << built.error;
  const auto& reg = *built.registry;
  struct Case {
    const char* header;
    const char* tenant;  // nullptr = 401
    const char* code;
  };
  const Case cases[] = {
      {"Bearer sk-acme-1", "acme", nullptr},
      {"Bearer sk-acme-2", "acme", nullptr},
      {"bearer   sk-free ", "free", nullptr},
      {"BEARER sk-free", "free", nullptr},
      {"Bearer sk-nope", nullptr, "invalid_api_key"},
      {"Bearer sk-acme-", nullptr, "invalid_api_key"},
      {"Basic sk-acme-1", nullptr, "invalid_api_key"},
      {"Bearersk-acme-1", nullptr, "invalid_api_key"},
      {"Bearer ", nullptr, "missing_api_key"},
      {"", nullptr, "missing_api_key"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.header);
    AuthResult r = reg.authenticate(c.header);
    if (c.tenant != nullptr) {
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r.tenant->name, c.tenant);
      EXPECT_FALSE(r.denial);
    } else {
      ASSERT_FALSE(r.ok());
      ASSERT_TRUE(r.denial);
      EXPECT_EQ(r.denial->error.status, 401);
      EXPECT_EQ(r.denial->error.code, c.code);
      EXPECT_EQ(r.denial->reason, RejectReason::unauthorized);
      // The presented key never appears in the answer.
      EXPECT_EQ(r.denial->error.message.find("sk-"), std::string::npos);
    }
  }
}

TEST(Tenants, AnonymousTenantOnlyForMissingKeys) {
  TenantsSpec s = two_tenants();
  s.anonymous_tenant = "free";
  auto built = TenantRegistry::build(s);
  ASSERT_TRUE(built.registry) << built.error;
  EXPECT_EQ(built.registry->authenticate("").tenant->name, "free");
  EXPECT_FALSE(built.registry->authenticate("Bearer wrong").ok());
}

TEST(Tenants, UppercaseHexAccepted) {
  TenantsSpec s;
  TenantSpec t;
  t.name = "x";
  std::string hex = sha256_hex("k");
  for (auto& c : hex) c = static_cast<char>(std::toupper(c));
  t.key_sha256_hex = {hex};
  s.tenants = {t};
  auto built = TenantRegistry::build(s);
  ASSERT_TRUE(built.registry) << built.error;
  EXPECT_TRUE(built.registry->authenticate_key("k").ok());
}

TEST(Tenants, ValidationNamesTheField) {
  struct Case {
    const char* name;
    void (*mutate)(TenantsSpec&);
    const char* want;
  };
  const Case cases[] = {
      {"empty name", [](TenantsSpec& s) { s.tenants[0].name = ""; }, "tenants[0].name"},
      {"dup name", [](TenantsSpec& s) { s.tenants[1].name = "acme"; }, "tenants[1].name: duplicate"},
      {"short key", [](TenantsSpec& s) { s.tenants[0].key_sha256_hex[1] = "abc"; },
       "tenants[0].key_sha256[1]"},
      {"non-hex key", [](TenantsSpec& s) { s.tenants[0].key_sha256_hex[0] = std::string(64, 'g'); },
       "tenants[0].key_sha256[0]"},
      {"key shared", [](TenantsSpec& s) { s.tenants[1].key_sha256_hex = {sha256_hex("sk-acme-1")}; },
       "already belongs to tenant 'acme'"},
      {"zero weight", [](TenantsSpec& s) { s.tenants[0].weight = 0; }, "tenants[0].weight"},
      {"nan weight", [](TenantsSpec& s) { s.tenants[0].weight = std::nan(""); }, "tenants[0].weight"},
      {"negative limit", [](TenantsSpec& s) { s.tenants[1].limits.input_tokens_per_min = -5; },
       "tenants[1].limits.input_tokens_per_min"},
      {"zero concurrency", [](TenantsSpec& s) { s.tenants[1].limits.max_concurrent = 0; },
       "tenants[1].limits.max_concurrent"},
      {"model concurrency",
       [](TenantsSpec& s) {
         s.tenants[0].model_limits = {ModelLimits{"m", {}}};
         s.tenants[0].model_limits[0].limits.max_concurrent = 3;
       },
       "tenants[0].models[0].limits.max_concurrent"},
      {"dup model",
       [](TenantsSpec& s) { s.tenants[0].model_limits = {ModelLimits{"m", {}}, ModelLimits{"m", {}}}; },
       "tenants[0].models[1].model: duplicate"},
      {"unknown anonymous", [](TenantsSpec& s) { s.anonymous_tenant = "ghost"; }, "admission.anonymous_tenant"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    TenantsSpec s = two_tenants();
    c.mutate(s);
    auto built = TenantRegistry::build(s);
    EXPECT_FALSE(built.registry);
    EXPECT_NE(built.error.find(c.want), std::string::npos) << built.error;
  }
}

TEST(Tenants, DenseIdsAndModelScope) {
  TenantsSpec s = two_tenants();
  s.tenants[0].model_limits = {ModelLimits{"big", {}}};
  auto built = TenantRegistry::build(s);
  ASSERT_TRUE(built.registry);
  EXPECT_EQ(built.registry->find("acme")->id, 0u);
  EXPECT_EQ(built.registry->find("free")->id, 1u);
  EXPECT_NE(built.registry->tenant(0).limits_for_model("big"), nullptr);
  EXPECT_EQ(built.registry->tenant(0).limits_for_model("small"), nullptr);
}

}  // namespace
}  // namespace sluice
