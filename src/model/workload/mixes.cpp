// Mixed workloads: the 100x cost mix, the LoRA popularity mix and the noisy-neighbour tenants.
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "model/workload/generators.h"
#include "model/workload/text.h"

namespace sluice::workload {

size_t pick_weighted(const std::vector<double>& cumulative, std::mt19937_64& rng) {
  const double x = uniform01(rng) * cumulative.back();
  auto it = std::upper_bound(cumulative.begin(), cumulative.end(), x);
  return std::min(size_t(it - cumulative.begin()), cumulative.size() - 1);
}

std::vector<double> zipf_cumulative(size_t n, double s) {
  std::vector<double> c(n);
  double acc = 0;
  for (size_t i = 0; i < n; ++i) c[i] = acc += 1.0 / std::pow(double(i + 1), s);
  return c;
}

namespace {

// Mostly short chats, with a small fraction of long documents (each distinct): the request cost
// spans two orders of magnitude.
class CostMix final : public ContentGenerator {
 public:
  struct Shape {
    int64_t short_min, short_max, output, doc_min, doc_max, doc_output;
    double doc_fraction;
  };
  CostMix(Shape s, std::string model, bool stream) : s_(s), model_(std::move(model)), stream_(stream) {}

  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    const bool doc = uniform01(rng) < s_.doc_fraction;
    r.model = model_;
    r.kind = ApiKind::chat;
    r.stream = stream_;
    if (doc) {
      std::string text = "Summarise the following document.\n";
      append_text(rng, uniform_int(rng, s_.doc_min, s_.doc_max), text);
      r.messages = {{"user", std::move(text)}};
      r.max_tokens = s_.doc_output;
      r.group = "document";
    } else {
      r.messages = {{"user", text_of_tokens(rng, uniform_int(rng, s_.short_min, s_.short_max))}};
      r.max_tokens = s_.output;
      r.group = "chat";
    }
    return true;
  }

  std::string describe() const override {
    return fmt::format("cost_mix chats {}..{} tokens (output {}), {:g}% documents {}..{} tokens (output {})",
                       s_.short_min, s_.short_max, s_.output, s_.doc_fraction * 100, s_.doc_min, s_.doc_max,
                       s_.doc_output);
  }

 private:
  Shape s_;
  std::string model_;
  bool stream_;
};

// Requests to LoRA adapters (named adapter-<i>) with Zipf popularity; each adapter's requests share
// that adapter's system prompt. A `base_fraction` goes to the base model.
class LoraMix final : public ContentGenerator {
 public:
  LoraMix(int64_t adapters, double zipf, int64_t system, int64_t question, int64_t output, double base_fraction,
          std::string model, bool stream, uint64_t seed)
      : zipf_(zipf), question_(question), output_(output), base_fraction_(base_fraction), model_(std::move(model)),
        stream_(stream), cumulative_(zipf_cumulative(size_t(adapters), zipf)) {
    std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), 0x10a4u};
    std::mt19937_64 rng(seq);
    for (int64_t i = 0; i <= adapters; ++i) systems_.push_back(text_of_tokens(rng, system));
  }

  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    const bool base = uniform01(rng) < base_fraction_;
    const size_t a = base ? cumulative_.size() : pick_weighted(cumulative_, rng);
    r.kind = ApiKind::chat;
    r.stream = stream_;
    r.adapter = base ? "" : adapter_name(a);
    r.model = base ? model_ : r.adapter;
    r.messages = {{"system", systems_[a]}, {"user", text_of_tokens(rng, question_)}};
    r.max_tokens = output_;
    r.group = base ? "base" : r.adapter;
    return true;
  }

  std::string describe() const override {
    return fmt::format("lora_mix {} adapters Zipf {:g}, system {} question {} output {} tokens, base {:g}%",
                       cumulative_.size(), zipf_, systems_[0].size() / kCharsPerToken, question_, output_,
                       base_fraction_ * 100);
  }
  static std::string adapter_name(size_t i) { return fmt::format("adapter-{}", i); }

 private:
  double zipf_;
  int64_t question_, output_;
  double base_fraction_;
  std::string model_;
  bool stream_;
  std::vector<double> cumulative_;
  std::vector<std::string> systems_;
};

// Tenants `noisy`, tenant-1 .. tenant-(n-1): same request shape, the noisy one sends `factor`
// times as many requests (and so tokens) as each other tenant.
class Tenants final : public ContentGenerator {
 public:
  Tenants(int64_t tenants, double factor, int64_t input, int64_t output, std::string model, bool stream)
      : factor_(factor), input_(input), output_(output), model_(std::move(model)), stream_(stream) {
    double acc = 0;
    for (int64_t i = 0; i < tenants; ++i) cumulative_.push_back(acc += (i == 0 ? factor : 1.0));
  }

  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    const size_t t = pick_weighted(cumulative_, rng);
    r.tenant = t == 0 ? "noisy" : fmt::format("tenant-{}", t);
    r.model = model_;
    r.kind = ApiKind::chat;
    r.stream = stream_;
    r.messages = {{"user", text_of_tokens(rng, input_)}};
    r.max_tokens = output_;
    r.group = r.tenant;
    return true;
  }

  std::string describe() const override {
    return fmt::format("tenants {} (noisy x{:g}), input {} output {} tokens", cumulative_.size(), factor_,
                       input_, output_);
  }

 private:
  double factor_;
  int64_t input_, output_;
  std::string model_;
  bool stream_;
  std::vector<double> cumulative_;
};

}  // namespace

std::unique_ptr<ContentGenerator> make_cost_mix(Params& p, uint64_t) {
  CostMix::Shape s{};
  s.short_min = p.integer("short_min", 100, 1, 1000000);
  s.short_max = p.integer("short_max", 400, 1, 1000000);
  s.output = p.integer("output", 128, 1, 1000000);
  s.doc_min = p.integer("doc_min", 50000, 1, 10000000);
  s.doc_max = p.integer("doc_max", 100000, 1, 10000000);
  s.doc_output = p.integer("doc_output", 256, 1, 1000000);
  s.doc_fraction = p.real("doc_fraction", 0.01, 0.0, 1.0);
  const auto model = p.text("model", "llama");
  const bool stream = p.flag("stream", true);
  if (s.short_max < s.short_min) p.fail("short_max is below short_min");
  if (s.doc_max < s.doc_min) p.fail("doc_max is below doc_min");
  if (!p.ok()) return nullptr;
  return std::make_unique<CostMix>(s, model, stream);
}

std::unique_ptr<ContentGenerator> make_lora_mix(Params& p, uint64_t seed) {
  const auto adapters = p.integer("adapters", 8, 1, 10000);
  const auto zipf = p.real("zipf", 1.0, 0.0, 10.0);
  const auto system = p.integer("system", 500, 0, 1000000);
  const auto question = p.integer("question", 200, 1, 1000000);
  const auto output = p.integer("output", 100, 1, 1000000);
  const auto base = p.real("base_fraction", 0.0, 0.0, 1.0);
  const auto model = p.text("model", "llama");
  const bool stream = p.flag("stream", true);
  if (!p.ok()) return nullptr;
  return std::make_unique<LoraMix>(adapters, zipf, system, question, output, base, model, stream, seed);
}

std::unique_ptr<ContentGenerator> make_tenants(Params& p, uint64_t) {
  const auto tenants = p.integer("tenants", 4, 2, 10000);
  const auto factor = p.real("factor", 10.0, 0.01, 1e6);
  const auto input = p.integer("input", 500, 1, 1000000);
  const auto output = p.integer("output", 100, 1, 1000000);
  const auto model = p.text("model", "llama");
  const bool stream = p.flag("stream", true);
  if (!p.ok()) return nullptr;
  return std::make_unique<Tenants>(tenants, factor, input, output, model, stream);
}

}  // namespace sluice::workload
