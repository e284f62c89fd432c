// Workloads: a content generator (what each request contains) combined with an arrival process
// (when it is sent), deterministic from one seed. Content and arrivals draw from separate
// generators, so the same seed sends the same requests at every rate of a sweep.
//
// Spec strings (`--workload`): name[:preset][,key=value...]
//   shared_prefix  groups x prompts: each group shares a system prompt, each prompt has its own
//                  question.  keys: groups, prompts, system, question, output.
//                  presets: llmd (150 x 5, 6000/1200/1000), llmd_low_cache (150 x 5, 1200/6000/1000),
//                  sglang (64 x 16, 2048/128/256), small (10 x 10, 100/50/50, the default),
//                  repetition (10 x 50, 256/256/128).
//   multi_turn     conversations that grow: `users` active conversations of `rounds` turns sharing
//                  one system prompt; each turn resends the history.  keys: users 320, rounds 10,
//                  system 1000, question 100, answer 100.
//   cost_mix       short chats (short_min..short_max tokens, 100..400) plus a `doc_fraction` (0.01)
//                  of documents of doc_min..doc_max (50000..100000) tokens.  keys also: output 128,
//                  doc_output 256.
//   lora_mix       `adapters` (8) LoRA adapters with Zipf(`zipf` 1.0) popularity, each with its own
//                  system prompt.  keys: system 500, question 200, output 100, base_fraction 0.
//   tenants        `tenants` (4) tenants; `noisy` sends `factor` (10) times the tokens of each other.
//                  keys: input 500, output 100.
//   embeddings     embedding inputs of input_min..input_max tokens (50..500).  key: model (embed).
//   replay         a JSONL trace (`file=`), see trace.h.  keys: file, scale (time multiplier, 1).
//   hot_prefix     a `hot_share` (0.5) of requests on one prefix of hot_system (6000) tokens, the rest
//                  over `groups` (100) prefixes of `system` (2000).  keys also: question 200, output 200;
//                  a surge: surge_share for requests surge_start..surge_end - 1 (its demand rises and
//                  falls at a constant total rate).
//   agent_sessions `sessions` (64) concurrent agent sessions of `turns` (14) turns: system 2000 + task
//                  200, each turn appends the answer (150) and a tool result of tool_min..tool_max
//                  (1000..2000) tokens, so contexts grow past 16k.
//   tool_agent     Mooncake-like: `prefixes` (200) tool prefixes of prefix_min..prefix_max (8000..16000)
//                  tokens, Zipf(`zipf` 1.0) popular, unique tails tail_min..tail_max (50..400),
//                  outputs output_min..output_max (16..64).
//   kv_pressure    the same keys; defaults 1000 prefixes of 3000..5000 tokens (4M in all), Zipf 0.6,
//                  tails 100..300, outputs 64..128.
//   fan_out        `samples` (8) identical requests in a row on one of `groups` (200) contexts of
//                  `context` (4000) tokens.  keys also: question 100, output 150.
// Every generator also takes model= (default llama; embed for embeddings) and stream= (1).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <variant>

#include "model/workload/arrivals.h"
#include "model/workload/request.h"

namespace sluice::workload {

struct WorkloadSpec {
  std::string name;
  std::string preset;
  std::map<std::string, std::string> params;
  std::string text;  // as given
};

// Parses the spec string; error message on failure.
std::variant<WorkloadSpec, std::string> parse_workload_spec(const std::string& text);

class ContentGenerator {
 public:
  virtual ~ContentGenerator() = default;
  // Fills everything but index (and arrival, unless has_own_arrivals()). False when exhausted.
  virtual bool fill(WorkloadRequest& r, std::mt19937_64& rng) = 0;
  // A trace brings its own arrival offsets.
  virtual bool has_own_arrivals() const { return false; }
  virtual std::string describe() const = 0;
};

struct WorkloadLimits {
  int64_t max_requests = 1000;            // stop after this many
  std::optional<Duration> max_duration;  // or when the next arrival is past this offset
};

class Workload {
 public:
  Workload(std::unique_ptr<ContentGenerator> content, const ArrivalSpec& arrivals,
           const WorkloadLimits& limits, uint64_t seed);
  // The next request, arrivals non-decreasing; nullopt when a limit is reached.
  std::optional<WorkloadRequest> next();
  const ArrivalSpec& arrivals() const { return spec_; }
  std::string describe() const;

 private:
  std::unique_ptr<ContentGenerator> content_;
  ArrivalSpec spec_;
  WorkloadLimits limits_;
  ArrivalProcess arrivals_;
  std::mt19937_64 rng_;
  uint64_t index_ = 0;
};

// Builds the content generator named by `spec`, validating every parameter; error on failure.
std::variant<std::unique_ptr<ContentGenerator>, std::string> make_content(const WorkloadSpec& spec,
                                                                          uint64_t seed);

// Everything at once: parse, validate, build.
std::variant<std::unique_ptr<Workload>, std::string> make_workload(const std::string& spec_text,
                                                                   const ArrivalSpec& arrivals,
                                                                   const WorkloadLimits& limits,
                                                                   uint64_t seed);

std::vector<std::string> workload_names();

}  // namespace sluice::workload
