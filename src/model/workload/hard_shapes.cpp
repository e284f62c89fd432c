// The shapes the published presets miss (../shared/reference/workloads.md, "Shapes the presets
// above miss"): a hot prefix, agent sessions with growing contexts, a Mooncake-like tool-agent
// trace, KV pressure with Zipf-popular prefixes, and fan-out bursts of one prompt.
#include <algorithm>
#include <fmt/format.h>

#include "model/workload/generators.h"
#include "model/workload/text.h"

namespace sluice::workload {
namespace {

std::mt19937_64 content_rng(uint64_t seed, uint32_t salt) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), salt};
  return std::mt19937_64(seq);
}

// Hot prefix: a `hot_share` of requests carry one system prompt of `hot_system` tokens (group
// "hot"); the rest pick one of `groups` system prompts of `system` tokens uniformly. Every request
// has its own question. A surge: requests surge_start..surge_end - 1 (in the order they are made)
// carry the hot prompt with `surge_share` instead, so its demand rises and falls again at a constant
// total rate (the hot prefix's spreading and contraction over time).
class HotPrefix final : public ContentGenerator {
 public:
  struct Shape {
    double hot_share;
    int64_t hot_system, groups, system, question, output;
    double surge_share;
    int64_t surge_start, surge_end;  // surge_end <= surge_start: no surge
  };
  HotPrefix(Shape s, std::string model, bool stream, uint64_t seed) : s_(s), model_(std::move(model)), stream_(stream) {
    auto rng = content_rng(seed, 0x407u);
    hot_ = text_of_tokens(rng, s.hot_system);
    for (int64_t g = 0; g < s.groups; ++g) systems_.push_back(text_of_tokens(rng, s.system));
  }
  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    const bool surging = made_ >= s_.surge_start && made_ < s_.surge_end;
    ++made_;
    const bool hot = uniform01(rng) < (surging ? s_.surge_share : s_.hot_share);
    const size_t g = hot ? 0 : size_t(uniform_int(rng, 0, s_.groups - 1));
    r.model = model_;
    r.kind = ApiKind::chat;
    r.messages = {{"system", hot ? hot_ : systems_[g]}, {"user", text_of_tokens(rng, s_.question)}};
    r.max_tokens = s_.output;
    r.stream = stream_;
    r.group = hot ? "hot" : fmt::format("g{}", g);
    return true;
  }
  std::string describe() const override {
    std::string surge;
    if (s_.surge_end > s_.surge_start)
      surge = fmt::format(" ({:g}% for requests {}..{})", s_.surge_share * 100, s_.surge_start, s_.surge_end - 1);
    return fmt::format("hot_prefix {:g}%{} on one {}-token prefix, rest over {} groups of {}, question {} output {} tokens",
                       s_.hot_share * 100, surge, s_.hot_system, s_.groups, s_.system, s_.question, s_.output);
  }

 private:
  Shape s_;
  int64_t made_ = 0;
  std::string model_;
  bool stream_;
  std::string hot_;
  std::vector<std::string> systems_;
};

// Agent sessions: `sessions` concurrent sessions share a system prompt of `system` tokens; each
// request advances a uniformly chosen session by one turn: the previous turn's answer plus a tool
// result of tool_min..tool_max tokens are appended, so the context grows by 1-2k tokens a turn;
// after `turns` turns the session is replaced by a new one.
class AgentSessions final : public ContentGenerator {
 public:
  struct Shape {
    int64_t sessions, turns, system, task, tool_min, tool_max, answer;
  };
  AgentSessions(Shape s, std::string model, bool stream, uint64_t seed)
      : s_(s), model_(std::move(model)), stream_(stream), text_rng_(content_rng(seed, 0xa6e7u)) {
    system_ = text_of_tokens(text_rng_, s.system);
    sessions_.resize(size_t(s.sessions));
    for (auto& c : sessions_) start(c);
  }
  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    auto& c = sessions_[size_t(uniform_int(rng, 0, int64_t(sessions_.size()) - 1))];
    if (c.turns == s_.turns) start(c);
    if (c.turns > 0) {
      c.messages.push_back({"assistant", text_of_tokens(text_rng_, s_.answer)});
      c.messages.push_back({"tool", text_of_tokens(text_rng_, uniform_int(rng, s_.tool_min, s_.tool_max))});
    }
    c.turns += 1;
    r.model = model_;
    r.kind = ApiKind::chat;
    r.messages = c.messages;
    r.max_tokens = s_.answer;
    r.stream = stream_;
    r.group = fmt::format("s{}", c.id);
    return true;
  }
  std::string describe() const override {
    return fmt::format("agent_sessions {} sessions x {} turns, system {} task {} tool {}..{} answer {} tokens",
                       s_.sessions, s_.turns, s_.system, s_.task, s_.tool_min, s_.tool_max, s_.answer);
  }

 private:
  struct Session {
    uint64_t id = 0;
    int64_t turns = 0;
    std::vector<ChatMessage> messages;
  };
  void start(Session& c) {
    c.id = next_id_++;
    c.turns = 0;
    c.messages = {{"system", system_}, {"user", text_of_tokens(text_rng_, s_.task)}};
  }
  Shape s_;
  std::string model_;
  bool stream_;
  std::mt19937_64 text_rng_;
  std::string system_;
  std::vector<Session> sessions_;
  uint64_t next_id_ = 0;
};

// Zipf-popular prefixes: `prefixes` prefixes of prefix_min..prefix_max tokens (lengths fixed by the
// seed), popularity Zipf(`zipf`), a unique tail of tail_min..tail_max tokens and `output` tokens.
// As tool_agent: Mooncake's tool-agent shape (long tool/system prefixes 8-16k, short unique tails,
// short outputs). As kv_pressure: many shorter prefixes whose total exceeds the fleet's KV.
class ZipfPrefixes final : public ContentGenerator {
 public:
  struct Shape {
    int64_t prefixes, prefix_min, prefix_max, tail_min, tail_max, output_min, output_max;
    double zipf;
  };
  ZipfPrefixes(std::string name, Shape s, std::string model, bool stream, uint64_t seed)
      : name_(std::move(name)), s_(s), model_(std::move(model)), stream_(stream),
        cumulative_(zipf_cumulative(size_t(s.prefixes), s.zipf)) {
    auto rng = content_rng(seed, 0x2193u);
    for (int64_t i = 0; i < s.prefixes; ++i) {
      const int64_t n = uniform_int(rng, s.prefix_min, s.prefix_max);
      total_ += n;
      prefixes_.push_back(text_of_tokens(rng, n));
    }
  }
  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    const size_t i = pick_weighted(cumulative_, rng);
    r.model = model_;
    r.kind = ApiKind::chat;
    r.messages = {{"system", prefixes_[i]}, {"user", text_of_tokens(rng, uniform_int(rng, s_.tail_min, s_.tail_max))}};
    r.max_tokens = uniform_int(rng, s_.output_min, s_.output_max);
    r.stream = stream_;
    r.group = fmt::format("p{}", i);
    return true;
  }
  std::string describe() const override {
    return fmt::format("{} {} prefixes of {}..{} tokens ({:.1f}M in all) Zipf {:g}, tail {}..{} output {}..{} tokens",
                       name_, s_.prefixes, s_.prefix_min, s_.prefix_max, double(total_) / 1e6, s_.zipf, s_.tail_min,
                       s_.tail_max, s_.output_min, s_.output_max);
  }

 private:
  std::string name_;
  Shape s_;
  std::string model_;
  bool stream_;
  std::vector<double> cumulative_;
  std::vector<std::string> prefixes_;
  int64_t total_ = 0;
};

// Fan-out: each of `groups` contexts of `context` tokens is sent as `samples` identical requests in
// a row (n samples of one prompt, or parallel agent calls on one context); with a bursty arrival
// process they land inside one scrape interval. The context picked for the next fan-out is uniform.
class FanOut final : public ContentGenerator {
 public:
  FanOut(int64_t groups, int64_t samples, int64_t context, int64_t question, int64_t output, std::string model,
         bool stream, uint64_t seed)
      : samples_(samples), context_tokens_(context), question_(question), output_(output), model_(std::move(model)),
        stream_(stream) {
    auto rng = content_rng(seed, 0xfa17u);
    for (int64_t g = 0; g < groups; ++g) contexts_.push_back(text_of_tokens(rng, context));
  }
  bool fill(WorkloadRequest& r, std::mt19937_64& rng) override {
    if (left_ == 0) {
      group_ = size_t(uniform_int(rng, 0, int64_t(contexts_.size()) - 1));
      question_text_ = text_of_tokens(rng, question_);
      left_ = samples_;
    }
    --left_;
    r.model = model_;
    r.kind = ApiKind::chat;
    r.messages = {{"system", contexts_[group_]}, {"user", question_text_}};
    r.max_tokens = output_;
    r.stream = stream_;
    r.group = fmt::format("f{}", group_);
    return true;
  }
  std::string describe() const override {
    return fmt::format("fan_out {} contexts of {} tokens, {} samples each, question {} output {} tokens",
                       contexts_.size(), context_tokens_, samples_, question_, output_);
  }

 private:
  int64_t samples_, context_tokens_, question_, output_;
  std::string model_;
  bool stream_;
  std::vector<std::string> contexts_;
  size_t group_ = 0;
  std::string question_text_;
  int64_t left_ = 0;
};

}  // namespace

std::unique_ptr<ContentGenerator> make_hot_prefix(Params& p, uint64_t seed) {
  HotPrefix::Shape s{};
  s.hot_share = p.real("hot_share", 0.5, 0.0, 1.0);
  s.hot_system = p.integer("hot_system", 6000, 1, 1000000);
  s.groups = p.integer("groups", 100, 1, 100000);
  s.system = p.integer("system", 2000, 0, 1000000);
  s.question = p.integer("question", 200, 1, 1000000);
  s.output = p.integer("output", 200, 1, 1000000);
  s.surge_share = p.real("surge_share", s.hot_share, 0.0, 1.0);
  s.surge_start = p.integer("surge_start", 0, 0, 1000000000);
  s.surge_end = p.integer("surge_end", 0, 0, 1000000000);
  const auto model = p.text("model", "llama");
  const bool stream = p.flag("stream", true);
  if (s.surge_end < s.surge_start) p.fail("surge_end is below surge_start");
  if (!p.ok()) return nullptr;
  return std::make_unique<HotPrefix>(s, model, stream, seed);
}

std::unique_ptr<ContentGenerator> make_agent_sessions(Params& p, uint64_t seed) {
  AgentSessions::Shape s{};
  s.sessions = p.integer("sessions", 64, 1, 1000000);
  s.turns = p.integer("turns", 14, 1, 1000);
  s.system = p.integer("system", 2000, 0, 1000000);
  s.task = p.integer("task", 200, 1, 1000000);
  s.tool_min = p.integer("tool_min", 1000, 0, 1000000);
  s.tool_max = p.integer("tool_max", 2000, 0, 1000000);
  s.answer = p.integer("answer", 150, 1, 1000000);
  const auto model = p.text("model", "llama");
  const bool stream = p.flag("stream", true);
  if (s.tool_max < s.tool_min) p.fail("tool_max is below tool_min");
  if (!p.ok()) return nullptr;
  return std::make_unique<AgentSessions>(s, model, stream, seed);
}

namespace {
std::unique_ptr<ContentGenerator> make_zipf(const char* name, ZipfPrefixes::Shape d, Params& p, uint64_t seed) {
  ZipfPrefixes::Shape s{};
  s.prefixes = p.integer("prefixes", d.prefixes, 1, 1000000);
  s.prefix_min = p.integer("prefix_min", d.prefix_min, 1, 1000000);
  s.prefix_max = p.integer("prefix_max", d.prefix_max, 1, 1000000);
  s.tail_min = p.integer("tail_min", d.tail_min, 1, 1000000);
  s.tail_max = p.integer("tail_max", d.tail_max, 1, 1000000);
  s.output_min = p.integer("output_min", d.output_min, 1, 1000000);
  s.output_max = p.integer("output_max", d.output_max, 1, 1000000);
  s.zipf = p.real("zipf", d.zipf, 0.0, 10.0);
  const auto model = p.text("model", "llama");
  const bool stream = p.flag("stream", true);
  if (s.prefix_max < s.prefix_min) p.fail("prefix_max is below prefix_min");
  if (s.tail_max < s.tail_min) p.fail("tail_max is below tail_min");
  if (s.output_max < s.output_min) p.fail("output_max is below output_min");
  if (s.prefixes * s.prefix_max > 400000000) p.fail("prefixes x prefix_max is above 400M tokens");
  if (!p.ok()) return nullptr;
  return std::make_unique<ZipfPrefixes>(name, s, model, stream, seed);
}
}  // namespace

std::unique_ptr<ContentGenerator> make_tool_agent(Params& p, uint64_t seed) {
  return make_zipf("tool_agent", {200, 8000, 16000, 50, 400, 16, 64, 1.0}, p, seed);
}

std::unique_ptr<ContentGenerator> make_kv_pressure(Params& p, uint64_t seed) {
  return make_zipf("kv_pressure", {1000, 3000, 5000, 100, 300, 64, 128, 0.6}, p, seed);
}

std::unique_ptr<ContentGenerator> make_fan_out(Params& p, uint64_t seed) {
  const auto groups = p.integer("groups", 200, 1, 100000);
  const auto samples = p.integer("samples", 8, 1, 10000);
  const auto context = p.integer("context", 4000, 1, 1000000);
  const auto question = p.integer("question", 100, 1, 1000000);
  const auto output = p.integer("output", 150, 1, 1000000);
  const auto model = p.text("model", "llama");
  const bool stream = p.flag("stream", true);
  if (!p.ok()) return nullptr;
  return std::make_unique<FanOut>(groups, samples, context, question, output, model, stream, seed);
}

}  // namespace sluice::workload
