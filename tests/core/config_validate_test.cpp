// core/config_validate.h (every error at once, in the file's numbering, no consequences), and the
// checks issue 19 moved into the parser: policy parameters, endpoint URL forms, upstream_auth,
// TLS file checks.
#include "core/config_validate.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/picker/engine_metrics.h"
#include "core/picker/policy_factory.h"
#include "core/prom_text.h"

namespace sluice {
namespace {

const std::string kModels = "models: [{name: m, pool: p}]\n";

std::string pool(const std::string& extra, const std::string& endpoints = "['127.0.0.1:1']") {
  return "pools: [{name: p, endpoints: " + endpoints + extra + "}]\n";
}

std::string only_error(const std::string& yaml) {
  const auto v = validate_config_text(yaml);
  if (v.errors.size() != 1) return "expected one error, got " + std::to_string(v.errors.size());
  return v.errors[0];
}

TEST(ConfigValidate, ValidConfigHasNoErrorsAndAConfig) {
  const auto v = validate_config_text(pool("") + kModels);
  EXPECT_TRUE(v.ok());
  ASSERT_NE(v.config, nullptr);
  EXPECT_EQ(v.config->pools[0].endpoints[0].address.port, 1);
}

TEST(ConfigValidate, ListsEveryErrorInTheFilesNumbering) {
  const std::string yaml = R"(
workers: 0
pools:
  - name: p
    policy_params: {prefix_wieght: 1}
    endpoints: ['127.0.0.1:x', '127.0.0.1:2', 'http://127.0.0.1:3/v1', '127.0.0.1:4']
  - name: q
    endpoints: ['127.0.0.1:5']
    retry: {max_retries: 11}
models:
  - {name: a, pool: p}
  - {name: b, pool: nope}
  - {name: c, alias_of: missing}
)";
  const auto v = validate_config_text(yaml);
  EXPECT_EQ(v.config, nullptr);
  // In the order the parser meets them; indices as written in the file (endpoints[2], not [1],
  // after endpoints[0] was set aside).
  const std::vector<std::string> want = {"workers: must be between",
                                         "pools[0].policy_params.prefix_wieght: unknown parameter",
                                         "pools[0].endpoints[0]: ",
                                         "pools[0].endpoints[2]: 'http://127.0.0.1:3/v1' has a path",
                                         "pools[1].retry.max_retries: must be between",
                                         "models[1].pool: unknown pool 'nope'",
                                         "models[2]: points at 'missing'"};
  ASSERT_EQ(v.errors.size(), want.size()) << ::testing::PrintToString(v.errors);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(v.errors[i].rfind(want[i], 0), 0u) << v.errors[i];
}

TEST(ConfigValidate, ConsequencesOfARemovedNodeAreNotReported) {
  // The only endpoint is bad: the pool goes, and "unknown pool 'p'" for the model is its consequence.
  const auto v = validate_config_text(pool("", "['nohost']") + kModels);
  ASSERT_EQ(v.errors.size(), 1u) << ::testing::PrintToString(v.errors);
  EXPECT_EQ(v.errors[0].rfind("pools[0].endpoints[0]: ", 0), 0u) << v.errors[0];
}

TEST(ConfigValidate, SyntaxErrorIsOneError) {
  const auto v = validate_config_text("pools: [\n");
  ASSERT_EQ(v.errors.size(), 1u);
  EXPECT_NE(v.errors[0].find("YAML syntax error"), std::string::npos);
}

TEST(ConfigValidate, PolicyParamsAreCheckedAtParseTime) {
  EXPECT_NE(only_error(pool(", policy: llmd_default, policy_params: {prefix_wieght: 3}") + kModels)
                .find("pools[0].policy_params.prefix_wieght: unknown parameter for policy 'llmd_default' (known: "),
            std::string::npos);
  EXPECT_TRUE(validate_config_text(pool(", policy: llmd_default, policy_params: {prefix_weight: 3}") + kModels).ok());
  EXPECT_NE(only_error(pool(", policy: round_robin, policy_params: {x: 1}") + kModels).find("(known: none)"), std::string::npos);
}

TEST(ConfigValidate, EndpointUrlForms) {
  auto port_of = [](const std::string& ep) {
    auto v = validate_config_text(pool("", "['" + ep + "']") + kModels);
    return v.ok() ? v.config->pools[0].endpoints[0].address.port : uint16_t(0);
  };
  EXPECT_EQ(port_of("127.0.0.1:8000"), 8000);
  EXPECT_EQ(port_of("http://127.0.0.1:8001"), 8001);
  EXPECT_EQ(port_of("http://127.0.0.1:8002/"), 8002);
  EXPECT_EQ(port_of("http://[::1]:8003"), 8003);
  auto v = validate_config_text(pool("", "['https://127.0.0.1:8443']") + kModels);
  ASSERT_TRUE(v.ok()) << ::testing::PrintToString(v.errors);
  EXPECT_TRUE(v.config->pools[0].endpoints[0].tls.enabled);
  EXPECT_TRUE(v.config->pools[0].endpoints[0].tls.verify);
  EXPECT_NE(only_error(pool("", "['http://127.0.0.1:8000/v1']") + kModels).find("has a path or query"), std::string::npos);
  EXPECT_NE(only_error(pool("", "['http://127.0.0.1']") + kModels).find("has no port"), std::string::npos);
  EXPECT_NE(only_error(pool("", "['ftp://127.0.0.1:21']") + kModels).find("unsupported scheme 'ftp'"), std::string::npos);
  EXPECT_NE(only_error(pool("", "['http://u:p@127.0.0.1:1']") + kModels).find("user information"), std::string::npos);
  EXPECT_NE(only_error(pool("", "[{address: '127.0.0.1:1', upstream_tls: {verify: false}}]") + kModels)
                .find("pools[0].endpoints[0].upstream_tls: applies to https:// endpoints only"),
            std::string::npos);
}

TEST(ConfigValidate, UpstreamAuthFromFileAndEnvNeverInMessages) {
  const std::string path = ::testing::TempDir() + "/sluice-engine-key";
  {
    std::ofstream f(path);
    f << "sekrit-engine-key\n";
  }
  auto v = validate_config_text(pool(", upstream_auth: {api_key_file: " + path + "}") + kModels);
  ASSERT_TRUE(v.ok()) << ::testing::PrintToString(v.errors);
  EXPECT_EQ(v.config->pools[0].endpoints[0].authorization, "Bearer sekrit-engine-key");
  // The fingerprint carries a digest of the key, not the key (a rotation rebuilds the pool).
  EXPECT_EQ(v.config->pools[0].fingerprint.find("sekrit"), std::string::npos);
  EXPECT_NE(v.config->pools[0].fingerprint.find("upstream_auth sha256"), std::string::npos);

  ::setenv("SLUICE_TEST_ENGINE_KEY", "from-env", 1);
  v = validate_config_text(pool(", upstream_auth: {api_key_env: SLUICE_TEST_ENGINE_KEY}",
                                "['127.0.0.1:1', {address: '127.0.0.1:2', upstream_auth: {api_key_file: " + path + "}}]") +
                           kModels);
  ASSERT_TRUE(v.ok()) << ::testing::PrintToString(v.errors);
  EXPECT_EQ(v.config->pools[0].endpoints[0].authorization, "Bearer from-env");
  EXPECT_EQ(v.config->pools[0].endpoints[1].authorization, "Bearer sekrit-engine-key");  // the endpoint's own

  EXPECT_NE(only_error(pool(", upstream_auth: {api_key_env: SLUICE_TEST_UNSET_KEY_VAR}") + kModels)
                .find("pools[0].upstream_auth.api_key_env: environment variable SLUICE_TEST_UNSET_KEY_VAR is not set"),
            std::string::npos);
  EXPECT_NE(only_error(pool(", upstream_auth: {}") + kModels).find("give exactly one of"), std::string::npos);
  {
    std::ofstream f(path);
    f << "bad\r\nInjected: header\n";
  }
  const auto e = only_error(pool(", upstream_auth: {api_key_file: " + path + "}") + kModels);
  EXPECT_NE(e.find("contains control characters"), std::string::npos);
  EXPECT_EQ(e.find("Injected"), std::string::npos) << "the key's content is never echoed";
}

TEST(ConfigValidate, TlsFilesMustBeReadable) {
  EXPECT_NE(only_error(pool("") + kModels + "tls: {cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}\n")
                .find("tls.cert_file: cannot read '/nonexistent/c.pem'"),
            std::string::npos);
  EXPECT_NE(only_error(pool("") + kModels + "tls: {key_file: /nonexistent/k.pem}\n").find("tls.cert_file: is required"),
            std::string::npos);
}

TEST(ConfigValidate, AKeyGivenTwiceIsAnError) {
  // yaml-cpp keeps the first of two equal keys; the parser refuses the pair instead.
  EXPECT_EQ(only_error("pools: [{name: p, policy: sluice, policy: llmd_default, endpoints: ['127.0.0.1:1']}]\n" + kModels)
                .rfind("pools[0].policy: duplicate key", 0),
            0u);
  EXPECT_EQ(only_error(pool("") + kModels + "workers: 2\nworkers: 3\n").rfind("workers: duplicate key", 0), 0u);
}

TEST(ConfigValidate, DutyCycleGpusSelectAnEndpointsGpusOnANodesExporter) {
  auto v = validate_config_text(
      pool("", "[{address: '127.0.0.1:1', duty_cycle_url: 'http://127.0.0.1:9400/metrics', duty_cycle_gpus: [2, 3]}]") + kModels);
  ASSERT_TRUE(v.ok()) << ::testing::PrintToString(v.errors);
  const auto& gpus = v.config->pools[0].endpoints[0].duty_cycle_gpus;
  ASSERT_EQ(gpus, (std::vector<std::string>{"2", "3"}));
  const auto text = parse_prom_text(
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"a\"} 0.1\n"
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"1\",UUID=\"b\"} 0.1\n"
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"2\",UUID=\"c\"} 0.9\n"
      "DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"3\",UUID=\"d\"} 0.7\n");
  EXPECT_NEAR(*map_duty_cycle(text, gpus), 0.8, 1e-9);   // this endpoint's two GPUs
  EXPECT_NEAR(*map_duty_cycle(text), 0.45, 1e-9);        // every GPU on the node
  EXPECT_FALSE(map_duty_cycle(text, {"7"}).has_value());  // none of its GPUs reported: unknown, not 0
  EXPECT_NE(only_error(pool("", "[{address: '127.0.0.1:1', duty_cycle_gpus: [0]}]") + kModels)
                .find("pools[0].endpoints[0].duty_cycle_gpus: needs duty_cycle_url"),
            std::string::npos);
}

TEST(ConfigValidate, KeyHashErrorsNameTheYamlKey) {
  const auto e = only_error(pool("") + kModels + "tenants: [{name: a, key_sha256: [abc]}]\n");
  EXPECT_EQ(e.rfind("tenants[0].key_sha256[0]: expected 64 hex digits", 0), 0u) << e;
}

}  // namespace
}  // namespace sluice
