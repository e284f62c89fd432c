// Picker microbenchmarks: decision time of the `sluice` policy for 64 endpoints and a 16k-character
// prompt with the prefix index at capacity, and the index's memory per (block, endpoint) entry.
//
//   cmake -B build-rel -DCMAKE_BUILD_TYPE=Release && ninja -C build-rel sluice_microbench &&
//   build-rel/sluice_microbench --benchmark_filter=Picker   (main() is bench/micro/main.cpp)
//
// The index is filled by learning 16k-character requests (a 8k-character prefix from one of 400
// families + a unique 8k-character tail) on endpoints chosen as the policy would place them, until
// every endpoint's LRU is at its capacity (31,250 blocks, the default) and then churned. Counters:
// median_us (per-decision median over the run), entries, bytes_per_entry.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "core/picker/llmd_default.h"
#include "core/picker/sluice_policy.h"

namespace sluice {
namespace {

constexpr size_t kEndpoints = 64;
constexpr size_t kPromptChars = 16384;

struct Fixture {
  std::vector<EngineSignals> signals{kEndpoints};
  std::vector<EndpointLoad> loads{kEndpoints};
  std::vector<std::string> names;
  std::vector<EndpointView> views;
  std::vector<std::string> families;
  std::mt19937_64 rng{7};

  Fixture() {
    for (size_t i = 0; i < kEndpoints; ++i) {
      names.push_back("ep" + std::to_string(i));
      signals[i].present = true;
      signals[i].waiting = static_cast<double>(i % 5);
      signals[i].running = 30;
      signals[i].kv_usage = 0.5;
      signals[i].kv_capacity_blocks = 31250;
      loads[i].in_flight = 8;
      loads[i].prefill_requests = 2;
      loads[i].prefill_tokens = 3000;
    }
    for (size_t i = 0; i < kEndpoints; ++i) views.push_back({i, names[i], false, &signals[i], &loads[i]});
    for (int f = 0; f < 400; ++f) families.push_back(random_text(kPromptChars / 2));
  }
  std::string random_text(size_t n) {
    std::string s(n, ' ');
    for (auto& c : s) c = static_cast<char>('a' + rng() % 26);
    return s;
  }
  std::string prompt(size_t family) { return families[family] + random_text(kPromptChars / 2); }
  PickRequest req(const std::string& text) {
    PickRequest r;
    r.model = "llama";
    r.text = text;
    r.input_tokens = static_cast<int64_t>(text.size() / 4);
    r.max_output_tokens = 256;
    return r;
  }
  // Fills the policy's index to capacity on every endpoint.
  template <class P>
  void fill(P& policy, const PrefixIndex& idx) {
    std::vector<Candidate> out;
    std::string tail = random_text(kPromptChars / 2);
    size_t step = 0;
    while (idx.entries() < kEndpoints * 31250 || step < 20000) {
      size_t fam = rng() % families.size();
      // Unique tails without generating 16k random characters each time: rotate a random tail.
      std::rotate(tail.begin(), tail.begin() + static_cast<long>(1 + rng() % 64), tail.end());
      std::string text = families[fam] + tail;
      size_t endpoint = (fam * 7 + (rng() % 4 == 0 ? rng() % kEndpoints : 0)) % kEndpoints;
      policy.on_dispatch(req(text), endpoint, Time{});
      ++step;
    }
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

template <class P>
void run_decisions(benchmark::State& state, P& policy, const PrefixIndex& idx, bool hit, bool hot = false) {
  Fixture& f = fixture();
  std::vector<std::string> prompts;
  std::vector<size_t> fams;
  for (int i = 0; i < 64; ++i) {
    fams.push_back(f.rng() % f.families.size());
    prompts.push_back(hit ? f.prompt(fams.back()) : f.random_text(kPromptChars));
  }
  std::vector<Candidate> out;
  // hot: every prompt's family (its cached prefix) has just been asked for 8 times by prompts with
  // other tails (dispatched where the policy picked), so its demand is non-zero and the copy
  // credit's terms are computed for every endpoint (the decision's most expensive case); the
  // measured prompts match as deep as in the plain hit case.
  if (hot)
    for (int k = 0; k < 8; ++k)
      for (const size_t fam : fams) {
        const std::string t = f.prompt(fam);
        auto r = f.req(t);
        policy.rank(r, f.views, Time{}, out);
        policy.on_dispatch(r, out[0].endpoint, Time{});
      }
  // One decision dispatched first, as in a gateway that has been dispatching: the policy's pool-wide
  // state from its last dispatch (sluice's pace share, the work price's phi) is the fixture's.
  {
    auto r = f.req(f.random_text(kPromptChars));
    policy.rank(r, f.views, Time{}, out);
    policy.on_dispatch(r, out[0].endpoint, Time{});
  }
  std::vector<double> us;
  us.reserve(static_cast<size_t>(state.max_iterations));
  size_t i = 0;
  for (auto _ : state) {
    auto r = f.req(prompts[i++ % prompts.size()]);
    auto t0 = std::chrono::steady_clock::now();
    policy.rank(r, f.views, Time{}, out);
    auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(out.data());
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  state.counters["median_us"] = us.empty() ? 0 : us[us.size() / 2];
  state.counters["p99_us"] = us.empty() ? 0 : us[us.size() * 99 / 100];
  state.counters["entries"] = static_cast<double>(idx.entries());
  state.counters["bytes_per_entry"] = static_cast<double>(idx.memory_bytes()) / std::max<double>(1, static_cast<double>(idx.entries()));
  state.counters["index_MB"] = static_cast<double>(idx.memory_bytes()) / 1e6;
}

SluicePolicy& sluice_policy() {
  static SluicePolicy* p = [] {
    auto* p = new SluicePolicy({}, PoolKind::chat);
    p->on_endpoints_reset(kEndpoints);
    std::vector<Candidate> out;
    p->rank(fixture().req("x"), fixture().views, Time{}, out);  // adopt capacities
    fixture().fill(*p, p->prefix().index());
    return p;
  }();
  return *p;
}

void BM_PickerSluiceDecision64x16kHit(benchmark::State& state) {
  run_decisions(state, sluice_policy(), sluice_policy().prefix().index(), true);
}
void BM_PickerSluiceDecision64x16kMiss(benchmark::State& state) {
  run_decisions(state, sluice_policy(), sluice_policy().prefix().index(), false);
}
void BM_PickerSluiceDecision64x16kHotHit(benchmark::State& state) {
  run_decisions(state, sluice_policy(), sluice_policy().prefix().index(), true, true);
}
// A decision that also refreshes the pace fit (at most every 100 ms: SluicePolicy::refresh_pace),
// with every endpoint's pace learned from prefill and streamed-decode samples of several sizes: the
// tail a decision takes once per 100 ms. Each iteration is 100 ms later than the last (/100), or at
// the same time (/0: the decision alone).
void BM_PickerSluiceDecision64PaceRefresh(benchmark::State& state) {
  const int64_t step_ms = state.range(0);  // 0: the same decision without the refresh, to compare
  Fixture& f = fixture();
  SluicePolicy p({}, PoolKind::chat);
  p.on_endpoints_reset(kEndpoints);
  for (int i = 0; i < 64; ++i)
    for (size_t e = 0; e < kEndpoints; ++e) {
      PrefillSample s;
      s.tokens = 100.0 * double(1 + i % 8) * double(1 + i % 3);
      s.pairs = s.tokens * s.tokens / 2;
      s.elapsed_ms = 5.0 + s.tokens * 0.03 * (e % 2 ? 2.0 : 1.0);
      p.on_prefill_done(e, s, Time{});
      DecodeSample d;
      d.streamed = true;
      d.tokens = 16.0 * double(1 + i % 5);
      d.decoding = 8;
      d.kv_read = 8000;
      d.elapsed_ms = d.tokens * 8.0 * (e % 2 ? 2.0 : 1.0);
      p.on_decode_done(e, d, Time{});
    }
  const std::string text = f.random_text(kPromptChars);
  std::vector<Candidate> out;
  std::vector<double> us;
  int64_t ms = 0;
  for (auto _ : state) {
    ms += step_ms;
    auto r = f.req(text);
    auto t0 = std::chrono::steady_clock::now();
    p.rank(r, f.views, Time{std::chrono::milliseconds(ms)}, out);
    auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(out.data());
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  state.counters["median_us"] = us.empty() ? 0 : us[us.size() / 2];
}
BENCHMARK(BM_PickerSluiceDecision64PaceRefresh)->Arg(100)->Arg(0)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PickerSluiceDecision64x16kHit)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PickerSluiceDecision64x16kHotHit)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PickerSluiceDecision64x16kMiss)->Unit(benchmark::kMicrosecond);

// The same decision for a prompt shorter than one block: scoring and ranking 64 endpoints only.
void BM_PickerSluiceDecision64NoPrefix(benchmark::State& state) {
  Fixture& f = fixture();
  SluicePolicy& p = sluice_policy();
  std::vector<Candidate> out;
  auto r = f.req("short prompt");
  for (auto _ : state) {
    p.rank(r, f.views, Time{}, out);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_PickerSluiceDecision64NoPrefix)->Unit(benchmark::kMicrosecond);

// Scoring and ranking 64 endpoints (no prefix, empty index) side by side: decode in plain ms without
// the eviction term (round 4's pricing) vs the default (SLO-priced, evictions priced).
void score_only(benchmark::State& state, SluiceParams params) {
  Fixture& f = fixture();
  SluicePolicy p(params, PoolKind::chat);
  p.on_endpoints_reset(kEndpoints);
  std::vector<Candidate> out;
  auto r = f.req("short prompt");
  for (auto _ : state) {
    p.rank(r, f.views, Time{}, out);
    benchmark::DoNotOptimize(out.data());
  }
}
void BM_PickerSluiceScore64PlainMs(benchmark::State& state) {
  SluiceParams plain;
  plain.decode_price = 0;
  plain.eviction_price = 0;
  score_only(state, plain);
}
void BM_PickerSluiceScore64SloPriced(benchmark::State& state) { score_only(state, SluiceParams{}); }
BENCHMARK(BM_PickerSluiceScore64PlainMs)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PickerSluiceScore64SloPriced)->Unit(benchmark::kMicrosecond);

void BM_PickerHash16k(benchmark::State& state) {
  std::string t = fixture().random_text(kPromptChars);
  std::vector<uint64_t> blocks;
  for (auto _ : state) {
    PrefixIndex::hash_blocks(t, 64, PrefixIndex::seed("llama", "", ""), 8192, blocks);
    benchmark::DoNotOptimize(blocks.data());
  }
}
BENCHMARK(BM_PickerHash16k)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sluice
