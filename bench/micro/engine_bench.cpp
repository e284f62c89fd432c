// CPU cost of the engine model (src/core/engine) per generated token, and how many replicas one
// core can simulate in real time.
//
//   BM_EngineDecode/<running>: an engine holding `running` decoding requests (closed loop, 128
//     output tokens each, 200-token shared-prefix prompts); reports ns of CPU per generated token
//     and `sim_s_per_cpu_s`: simulated seconds per CPU second = how many such replicas one core
//     keeps up with in real time (the engine model alone, without HTTP).
#include <benchmark/benchmark.h>

#include <random>

#include "model/engine/engine.h"

namespace {

using namespace sluice;
using namespace sluice::engine;

void BM_EngineDecode(benchmark::State& state) {
  const int running = static_cast<int>(state.range(0));
  EngineConfig cfg;
  cfg.max_num_seqs = 4096;
  Engine e(cfg);
  std::mt19937_64 rng(1);
  RequestId next = 1;
  Time now{};
  auto submit = [&] {
    EngineRequest r;
    r.id = next++;
    for (TokenId i = 0; i < 128; ++i) r.prompt.push_back(i);
    for (int i = 0; i < 72; ++i) r.prompt.push_back(static_cast<TokenId>(rng() % kVocabSize));
    r.max_output_tokens = 128;
    e.submit(std::move(r), now);
  };
  for (int i = 0; i < running; ++i) submit();
  int64_t tokens = 0;
  const Time start = now;
  for (auto _ : state) {
    auto res = e.step(now);
    now = res.end;
    for (const auto& o : res.outputs) {
      tokens += o.new_tokens;
      if (o.finished) submit();
    }
    benchmark::DoNotOptimize(res);
  }
  state.counters["ns_per_token"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["tokens_per_step"] = static_cast<double>(tokens) / static_cast<double>(state.iterations());
  // Simulated seconds per CPU second: the number of replicas like this one core runs in real time.
  state.counters["sim_s_per_cpu_s"] = benchmark::Counter(to_seconds(now - start), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineDecode)->Arg(1)->Arg(128)->Arg(1024)->Arg(2000);

void BM_Tokenize(benchmark::State& state) {
  const std::string text(static_cast<size_t>(state.range(0)), 'x');
  for (auto _ : state) benchmark::DoNotOptimize(tokenize(text));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Tokenize)->Arg(4096)->Arg(400000);

}  // namespace

