#include "core/admission/admission_config.h"

#include <fmt/format.h>

#include "core/config_yaml.h"

namespace sluice {

namespace {

using namespace config_yaml;

RateLimits parse_limits(const YAML::Node& n, const std::string& path) {
  check_keys(n, path, {"requests_per_min", "input_tokens_per_min", "output_tokens_per_min", "tokens_per_day",
                       "max_concurrent"});
  RateLimits l;
  auto opt = [&](const char* key, std::optional<int64_t>& into) {
    if (n[key]) into = get_int(n[key], path + "." + key, 1);
  };
  opt("requests_per_min", l.requests_per_min);
  opt("input_tokens_per_min", l.input_tokens_per_min);
  opt("output_tokens_per_min", l.output_tokens_per_min);
  opt("tokens_per_day", l.tokens_per_day);
  opt("max_concurrent", l.max_concurrent);
  return l;
}

TenantSpec parse_tenant(const YAML::Node& n, const std::string& path) {
  check_keys(n, path, {"name", "key_sha256", "priority", "weight", "limits", "models", "allowed_models"});
  TenantSpec t;
  if (!n["name"]) fail(path + ".name", "required");
  t.name = get<std::string>(n["name"], path + ".name", "a string");
  if (const auto& k = n["key_sha256"]) {
    if (k.IsScalar()) {
      t.key_sha256_hex.push_back(get<std::string>(k, path + ".key_sha256", "a string"));
    } else if (k.IsSequence()) {
      for (size_t i = 0; i < k.size(); ++i)
        t.key_sha256_hex.push_back(get<std::string>(k[i], fmt::format("{}.key_sha256[{}]", path, i), "a string"));
    } else {
      fail(path + ".key_sha256", "expected a hex string or a list of them");
    }
  }
  if (n["priority"]) t.priority = static_cast<int>(get_int(n["priority"], path + ".priority", -1000, 1000));
  if (n["weight"]) t.weight = get_positive(n["weight"], path + ".weight");
  if (n["limits"]) t.limits = parse_limits(n["limits"], path + ".limits");
  if (const auto& ms = n["models"]) {
    if (!ms.IsSequence()) fail(path + ".models", "expected a list");
    for (size_t i = 0; i < ms.size(); ++i) {
      const std::string mp = fmt::format("{}.models[{}]", path, i);
      check_keys(ms[i], mp, {"model", "limits"});
      if (!ms[i]["model"]) fail(mp + ".model", "required");
      ModelLimits m;
      m.model = get<std::string>(ms[i]["model"], mp + ".model", "a string");
      if (ms[i]["limits"]) m.limits = parse_limits(ms[i]["limits"], mp + ".limits");
      t.model_limits.push_back(std::move(m));
    }
  }
  if (const auto& am = n["allowed_models"]) {
    if (!am.IsSequence() || am.size() == 0) fail(path + ".allowed_models", "expected a non-empty list of model names");
    for (size_t i = 0; i < am.size(); ++i)
      t.allowed_models.push_back(get<std::string>(am[i], fmt::format("{}.allowed_models[{}]", path, i), "a model name"));
  }
  return t;
}

void parse_admission(const YAML::Node& a, AdmissionSpec& spec) {
  check_keys(a, "admission", {"anonymous_tenant", "default_max_output_tokens", "concurrency_retry_after_ms",
                              "queue", "vtc", "fair_share"});
  AdmissionConfig& c = spec.config;
  if (a["anonymous_tenant"])
    spec.tenants.anonymous_tenant = get<std::string>(a["anonymous_tenant"], "admission.anonymous_tenant", "a string");
  if (a["default_max_output_tokens"])
    c.default_max_output_tokens = get_int(a["default_max_output_tokens"], "admission.default_max_output_tokens", 1);
  if (a["concurrency_retry_after_ms"])
    c.concurrency_retry_base = std::chrono::milliseconds(
        get_int(a["concurrency_retry_after_ms"], "admission.concurrency_retry_after_ms", 1, 3'600'000));
  if (const auto& q = a["queue"]) {
    check_keys(q, "admission.queue", {"max_requests", "max_bytes", "ttl_ms", "ttl_ms_by_priority", "retry_after_ms"});
    if (q["max_requests"]) c.queue.max_requests = get_int(q["max_requests"], "admission.queue.max_requests", 0, 10'000'000);
    if (q["max_bytes"]) c.queue.max_bytes = get_int(q["max_bytes"], "admission.queue.max_bytes", 0, int64_t{1} << 40);
    if (q["ttl_ms"])
      c.queue.default_ttl = std::chrono::milliseconds(get_int(q["ttl_ms"], "admission.queue.ttl_ms", 1, 86'400'000));
    if (const auto& tp = q["ttl_ms_by_priority"]) {
      if (!tp.IsMap()) fail("admission.queue.ttl_ms_by_priority", "expected a mapping of priority: milliseconds");
      for (const auto& kv : tp) {
        const std::string key = kv.first.as<std::string>();
        const std::string p = "admission.queue.ttl_ms_by_priority." + key;
        const int prio = static_cast<int>(get_int(kv.first, p, -1000, 1000));
        c.queue.ttl_by_priority.emplace_back(prio, std::chrono::milliseconds(get_int(kv.second, p, 1, 86'400'000)));
      }
    }
    if (q["retry_after_ms"])
      c.queue.retry_base =
          std::chrono::milliseconds(get_int(q["retry_after_ms"], "admission.queue.retry_after_ms", 1, 3'600'000));
  }
  if (const auto& f = a["fair_share"]) {
    check_keys(f, "admission.fair_share", {"enabled", "active_window_ms", "spare_slots"});
    if (f["enabled"]) c.fair_share.enabled = get<bool>(f["enabled"], "admission.fair_share.enabled", "true or false");
    if (f["active_window_ms"])
      c.fair_share.active_window =
          std::chrono::milliseconds(get_int(f["active_window_ms"], "admission.fair_share.active_window_ms", 0, 3'600'000));
    if (f["spare_slots"]) c.fair_share.spare = get_int(f["spare_slots"], "admission.fair_share.spare_slots", 0, 1'000'000);
  }
  if (const auto& v = a["vtc"]) {
    check_keys(v, "admission.vtc", {"w_in", "w_out"});
    if (v["w_in"]) c.queue.vtc.w_in = get_positive(v["w_in"], "admission.vtc.w_in");
    if (v["w_out"]) c.queue.vtc.w_out = get_positive(v["w_out"], "admission.vtc.w_out");
  }
}

}  // namespace

AdmissionSpecResult parse_admission_yaml(const YAML::Node& root) {
  AdmissionSpecResult r;
  try {
    if (const auto& ts = root["tenants"]) {
      if (!ts.IsSequence()) fail("tenants", "expected a list");
      r.spec.enabled = true;
      for (size_t i = 0; i < ts.size(); ++i) r.spec.tenants.tenants.push_back(parse_tenant(ts[i], fmt::format("tenants[{}]", i)));
    }
    if (const auto& a = root["admission"]) parse_admission(a, r.spec);
  } catch (const ConfigError& e) {
    r.error = e.what();
  } catch (const YAML::Exception& e) {
    r.error = std::string("admission config: ") + e.what();
  }
  return r;
}

AdmissionSpecResult parse_admission_yaml(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    AdmissionSpecResult r;
    r.error = fmt::format("YAML syntax error at line {}, column {}: {}", e.mark.line + 1, e.mark.column + 1, e.msg);
    return r;
  }
  return parse_admission_yaml(root);
}

}  // namespace sluice
