// Shared-prefix groups, growing multi-turn conversations and embedding inputs.
#include <fmt/format.h>

#include "model/workload/generators.h"
#include "model/workload/text.h"

namespace sluice::workload {
namespace {

std::mt19937_64 content_rng(uint64_t seed, uint32_t salt) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), salt};
  return std::mt19937_64(seq);
}

// Shared prefix: the texts are fixed by the seed up front; each request picks a (group, prompt)
// uniformly. Group g's requests share the system prompt; the question is the prompt's own.
class SharedPrefix final : public ContentGenerator {
 public:
  SharedPrefix(int64_t groups, int64_t prompts, int64_t system, int64_t question, int64_t output,
               std::string model, bool stream, uint64_t seed)
      : prompts_(prompts), system_tokens_(system), question_tokens_(question), output_(output),
        model_(std::move(model)), stream_(stream) {
    auto rng = content_rng(seed, 0x5f1du);
    systems_.reserve(size_t(groups));
    for (int64_t g = 0; g < groups; ++g) systems_.push_back(text_of_tokens(rng, system));
    questions_.reserve(size_t(groups * prompts));
    for (int64_t i = 0; i < groups * prompts; ++i) questions_.push_back(text_of_tokens(rng, question));
  }

  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    const auto g = size_t(uniform_int(rng, 0, int64_t(systems_.size()) - 1));
    const auto q = size_t(uniform_int(rng, 0, prompts_ - 1));
    r.model = model_;
    r.kind = ApiKind::chat;
    r.messages = {{"system", systems_[g]}, {"user", questions_[g * size_t(prompts_) + q]}};
    r.max_tokens = output_;
    r.stream = stream_;
    r.group = fmt::format("g{}", g);
    return true;
  }

  std::string describe() const override {
    return fmt::format("shared_prefix {} groups x {} prompts, system {} question {} output {} tokens",
                       systems_.size(), prompts_, system_tokens_, question_tokens_, output_);
  }

 private:
  int64_t prompts_, system_tokens_, question_tokens_, output_;
  std::string model_;
  bool stream_;
  std::vector<std::string> systems_, questions_;
};

// Multi-turn: `users` conversations are active; each request advances a uniformly chosen one by a
// turn (its history plus a new question); a conversation that reaches `rounds` is replaced.
class MultiTurn final : public ContentGenerator {
 public:
  MultiTurn(int64_t users, int64_t rounds, int64_t system, int64_t question, int64_t answer,
            std::string model, bool stream, uint64_t seed)
      : rounds_(rounds), question_(question), answer_(answer), model_(std::move(model)), stream_(stream),
        text_rng_(content_rng(seed, 0x3a17u)) {
    system_ = text_of_tokens(text_rng_, system);
    convs_.resize(size_t(users));
    for (auto& c : convs_) start(c);
  }

  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    auto& c = convs_[size_t(uniform_int(rng, 0, int64_t(convs_.size()) - 1))];
    if (c.turns == rounds_) start(c);
    if (c.turns > 0) c.messages.push_back({"assistant", text_of_tokens(text_rng_, answer_)});
    c.messages.push_back({"user", text_of_tokens(text_rng_, question_)});
    c.turns += 1;
    r.model = model_;
    r.kind = ApiKind::chat;
    r.messages = c.messages;
    r.max_tokens = answer_;
    r.stream = stream_;
    r.group = fmt::format("c{}", c.id);
    return true;
  }

  std::string describe() const override {
    return fmt::format("multi_turn {} users x {} rounds, system {} question {} answer {} tokens",
                       convs_.size(), rounds_, system_.size() / kCharsPerToken, question_, answer_);
  }

 private:
  struct Conversation {
    uint64_t id = 0;
    int64_t turns = 0;
    std::vector<ChatMessage> messages;
  };
  void start(Conversation& c) {
    c.id = next_id_++;
    c.turns = 0;
    c.messages = {{"system", system_}};
  }
  int64_t rounds_, question_, answer_;
  std::string model_;
  bool stream_;
  std::mt19937_64 text_rng_;
  std::string system_;
  std::vector<Conversation> convs_;
  uint64_t next_id_ = 0;
};

class Embeddings final : public ContentGenerator {
 public:
  Embeddings(int64_t lo, int64_t hi, std::string model) : lo_(lo), hi_(hi), model_(std::move(model)) {}
  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    r.model = model_;
    r.kind = ApiKind::embedding;
    r.prompt = text_of_tokens(rng, uniform_int(rng, lo_, hi_));
    r.max_tokens = 0;
    r.stream = false;
    return true;
  }
  std::string describe() const override {
    return fmt::format("embeddings {}..{} tokens, model {}", lo_, hi_, model_);
  }

 private:
  int64_t lo_, hi_;
  std::string model_;
};

struct SharedPrefixPreset {
  const char* name;
  int64_t groups, prompts, system, question, output;
};
constexpr SharedPrefixPreset kPresets[] = {
    {"llmd", 150, 5, 6000, 1200, 1000},        {"llmd_low_cache", 150, 5, 1200, 6000, 1000},
    {"sglang", 64, 16, 2048, 128, 256},        {"small", 10, 10, 100, 50, 50},
    {"repetition", 10, 50, 256, 256, 128},
};

}  // namespace

std::unique_ptr<ContentGenerator> make_shared_prefix(const std::string& preset, Params& p, uint64_t seed) {
  SharedPrefixPreset d = kPresets[3];
  if (!preset.empty()) {
    bool found = false;
    for (const auto& x : kPresets)
      if (preset == x.name) d = x, found = true;
    if (!found) {
      std::string names;
      for (const auto& x : kPresets) names += (names.empty() ? "" : ", ") + std::string(x.name);
      p.fail("unknown preset '" + preset + "' (known: " + names + ")");
      return nullptr;
    }
  }
  const auto groups = p.integer("groups", d.groups, 1, 100000);
  const auto prompts = p.integer("prompts", d.prompts, 1, 100000);
  const auto system = p.integer("system", d.system, 0, 1000000);
  const auto question = p.integer("question", d.question, 1, 1000000);
  const auto output = p.integer("output", d.output, 1, 1000000);
  const auto model = p.text("model", "llama");
  const bool stream = p.flag("stream", true);
  if (groups * prompts > 10000000) p.fail("groups x prompts is above 10,000,000");
  if (!p.ok()) return nullptr;
  return std::make_unique<SharedPrefix>(groups, prompts, system, question, output, model, stream, seed);
}

std::unique_ptr<ContentGenerator> make_multi_turn(Params& p, uint64_t seed) {
  const auto users = p.integer("users", 320, 1, 1000000);
  const auto rounds = p.integer("rounds", 10, 1, 1000);
  const auto system = p.integer("system", 1000, 0, 1000000);
  const auto question = p.integer("question", 100, 1, 1000000);
  const auto answer = p.integer("answer", 100, 1, 1000000);
  const auto model = p.text("model", "llama");
  const bool stream = p.flag("stream", true);
  if (!p.ok()) return nullptr;
  return std::make_unique<MultiTurn>(users, rounds, system, question, answer, model, stream, seed);
}

std::unique_ptr<ContentGenerator> make_embeddings(Params& p, uint64_t) {
  const auto lo = p.integer("input_min", 50, 1, 1000000);
  const auto hi = p.integer("input_max", 500, 1, 1000000);
  const auto model = p.text("model", "embed");
  if (hi < lo) p.fail("input_max is below input_min");
  if (!p.ok()) return nullptr;
  return std::make_unique<Embeddings>(lo, hi, model);
}

}  // namespace sluice::workload
