#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "core/openai/request.h"
#include "model/workload/arrivals.h"
#include "model/workload/text.h"
#include "model/workload/trace.h"
#include "model/workload/workload.h"

namespace sluice::workload {
namespace {

std::unique_ptr<Workload> make(const std::string& spec, int64_t n = 100, uint64_t seed = 7, double rate = 10) {
  ArrivalSpec a;
  a.rate = rate;
  WorkloadLimits lim;
  lim.max_requests = n;
  auto w = make_workload(spec, a, lim, seed);
  if (auto* e = std::get_if<std::string>(&w)) ADD_FAILURE() << *e;
  return std::get_if<std::unique_ptr<Workload>>(&w) ? std::move(std::get<0>(w)) : nullptr;
}

std::vector<WorkloadRequest> all(Workload& w) {
  std::vector<WorkloadRequest> out;
  while (auto r = w.next()) out.push_back(std::move(*r));
  return out;
}

std::string error_of(const std::string& spec) {
  auto w = make_workload(spec, ArrivalSpec{}, WorkloadLimits{}, 1);
  auto* e = std::get_if<std::string>(&w);
  return e ? *e : "";
}

TEST(WorkloadText, ExactLengthAndVaried) {
  std::mt19937_64 rng(3);
  auto t = text_of_tokens(rng, 1000);
  ASSERT_EQ(t.size(), 4000u);
  std::set<std::string> chunks;
  for (size_t i = 0; i + 4 <= t.size(); i += 4) chunks.insert(t.substr(i, 4));
  EXPECT_GT(chunks.size(), 300u);  // not a repeated phrase
  EXPECT_EQ(text_for_id(1, 42, 512), text_for_id(1, 42, 512));
  EXPECT_NE(text_for_id(1, 42, 512), text_for_id(1, 43, 512));
  EXPECT_EQ(text_for_id(1, 42, 512).size(), 2048u);
}

TEST(WorkloadSpecParse, Errors) {
  EXPECT_NE(error_of("nope").find("unknown name 'nope'"), std::string::npos);
  EXPECT_NE(error_of("shared_prefix:huge").find("unknown preset 'huge'"), std::string::npos);
  EXPECT_NE(error_of("shared_prefix,groups=x").find("groups=x is not an integer"), std::string::npos);
  EXPECT_NE(error_of("shared_prefix,groups=0").find("outside"), std::string::npos);
  EXPECT_NE(error_of("shared_prefix,colour=red").find("unknown parameter 'colour'"), std::string::npos);
  EXPECT_NE(error_of("shared_prefix,groups").find("expected key=value"), std::string::npos);
  EXPECT_NE(error_of("cost_mix:big").find("no presets"), std::string::npos);
  EXPECT_NE(error_of("replay").find("file= is required"), std::string::npos);
  EXPECT_NE(error_of("replay,file=/nonexistent/x.jsonl").find("cannot read"), std::string::npos);
  EXPECT_EQ(error_of("shared_prefix:sglang,output=10"), "");
}

TEST(SharedPrefix, StructureAndLengths) {
  auto w = make("shared_prefix:small", 2000);
  auto reqs = all(*w);
  ASSERT_EQ(reqs.size(), 2000u);
  std::map<std::string, std::string> system_of;
  std::set<std::string> systems, questions;
  for (const auto& r : reqs) {
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].content.size(), 400u);  // 100 tokens
    EXPECT_EQ(r.messages[1].content.size(), 200u);  // 50 tokens
    EXPECT_EQ(r.max_tokens, 50);
    auto [it, fresh] = system_of.emplace(r.group, r.messages[0].content);
    EXPECT_EQ(it->second, r.messages[0].content) << "same group, same system prompt";
    systems.insert(r.messages[0].content);
    questions.insert(r.messages[1].content);
  }
  EXPECT_EQ(systems.size(), 10u);   // 10 groups x 10 prompts, all seen in 2000 draws
  EXPECT_EQ(questions.size(), 100u);
  EXPECT_GE(reqs[0].input_tokens(), 150);  // plus the template's headers
  EXPECT_LE(reqs[0].input_tokens(), 200);
}

TEST(SharedPrefix, Presets) {
  auto w = make("shared_prefix:llmd", 1);
  auto r = w->next();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->messages[0].content.size(), 6000u * 4);
  EXPECT_EQ(r->messages[1].content.size(), 1200u * 4);
  EXPECT_EQ(r->max_tokens, 1000);
  EXPECT_NE(w->describe().find("150 groups x 5 prompts"), std::string::npos);
  auto s = make("shared_prefix:sglang", 1);
  EXPECT_NE(s->describe().find("64 groups x 16 prompts, system 2048 question 128 output 256"), std::string::npos);
}

TEST(Workload, DeterministicFromSeed) {
  for (const char* spec : {"shared_prefix:small", "multi_turn,users=5", "cost_mix,doc_min=100,doc_max=200",
                           "lora_mix", "tenants", "embeddings"}) {
    auto a = all(*make(spec, 50, 11));
    auto b = all(*make(spec, 50, 11));
    auto c = all(*make(spec, 50, 12));
    ASSERT_EQ(a.size(), b.size()) << spec;
    bool differs = false;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].body(), b[i].body()) << spec;
      EXPECT_EQ(a[i].arrival, b[i].arrival) << spec;
      differs |= a[i].body() != c[i].body();
    }
    EXPECT_TRUE(differs) << spec << ": another seed must give other requests";
  }
}

TEST(Workload, SameContentAtEveryRate) {
  auto a = all(*make("shared_prefix:small", 30, 5, 1.0));
  auto b = all(*make("shared_prefix:small", 30, 5, 50.0));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].body(), b[i].body());
  EXPECT_GT(a.back().arrival, b.back().arrival);
}

TEST(Workload, BodiesParseAsRequests) {
  for (const char* spec : {"shared_prefix:small", "lora_mix", "tenants", "embeddings"}) {
    for (const auto& r : all(*make(spec, 5))) {
      auto p = parse_request(r.kind, r.body());
      ASSERT_TRUE(p.ok()) << spec << ": " << p.error.message;
      EXPECT_EQ(p.request->model, r.model);
      if (r.kind == ApiKind::chat) {
        EXPECT_EQ(p.request->rendered, r.rendered());
        EXPECT_EQ(p.request->max_output_tokens.value_or(-1), r.max_tokens);
        EXPECT_TRUE(p.request->stream);
      }
    }
  }
}

TEST(MultiTurn, ConversationsGrow) {
  auto reqs = all(*make("multi_turn,users=3,rounds=4,system=50,question=10,answer=5", 60));
  std::map<std::string, std::string> last;
  std::set<std::string> convs;
  int grew = 0;
  for (const auto& r : reqs) {
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_LE(r.messages.size(), 1u + 4 * 2 - 1);
    auto text = r.rendered();
    auto it = last.find(r.group);
    if (it != last.end()) {
      // The new turn resends the history: the previous prompt minus its assistant header.
      const auto prev = it->second.substr(0, it->second.size() - 40);
      EXPECT_EQ(text.compare(0, prev.size(), prev), 0);
      EXPECT_GT(text.size(), it->second.size());
      ++grew;
    }
    last[r.group] = text;
    convs.insert(r.group);
  }
  EXPECT_GT(grew, 40);
  EXPECT_GT(convs.size(), 3u);  // finished conversations were replaced
}

TEST(CostMix, DocumentFractionAndLengths) {
  auto reqs = all(*make("cost_mix,doc_fraction=0.1,doc_min=2000,doc_max=3000", 3000));
  int docs = 0;
  for (const auto& r : reqs) {
    const auto n = int64_t(r.messages[0].content.size() / 4);
    if (r.group == "document") {
      ++docs;
      EXPECT_GE(n, 2000);
      EXPECT_LE(n, 3010);
    } else {
      EXPECT_GE(n, 100);
      EXPECT_LE(n, 400);
    }
  }
  EXPECT_NEAR(docs / 3000.0, 0.1, 0.02);
}

TEST(LoraMix, ZipfPopularity) {
  std::map<std::string, int> count;
  for (const auto& r : all(*make("lora_mix,adapters=4,zipf=1", 8000))) {
    EXPECT_EQ(r.model, r.adapter);
    ++count[r.adapter];
  }
  ASSERT_EQ(count.size(), 4u);
  // Zipf(1) over 4: weights 1, 1/2, 1/3, 1/4.
  EXPECT_NEAR(double(count["adapter-0"]) / count["adapter-1"], 2.0, 0.25);
  EXPECT_NEAR(double(count["adapter-0"]) / count["adapter-3"], 4.0, 0.6);
}

TEST(Tenants, NoisyNeighbourSendsTenTimes) {
  std::map<std::string, int> count;
  for (const auto& r : all(*make("tenants,tenants=4,factor=10", 6500))) ++count[r.tenant];
  ASSERT_EQ(count.size(), 4u);
  EXPECT_NEAR(double(count["noisy"]) / count["tenant-1"], 10.0, 2.0);
}

TEST(Embeddings, Shape) {
  for (const auto& r : all(*make("embeddings,input_min=10,input_max=20", 20))) {
    EXPECT_EQ(r.kind, ApiKind::embedding);
    EXPECT_STREQ(r.path(), "/v1/embeddings");
    EXPECT_GE(r.prompt.size(), 40u);
    EXPECT_LE(r.prompt.size(), 80u);
  }
}

TEST(Arrivals, PoissonRate) {
  ArrivalSpec a;
  a.rate = 20;
  ArrivalProcess p(a, 1);
  Duration last{};
  for (int i = 0; i < 20000; ++i) {
    auto t = p.next();
    EXPECT_GE(t, last);
    last = t;
  }
  EXPECT_NEAR(20000 / to_seconds(last), 20.0, 0.6);
}

TEST(Arrivals, GammaBurstiness) {
  for (double shape : {0.25, 1.0, 4.0}) {
    ArrivalSpec a;
    a.kind = ArrivalKind::gamma;
    a.rate = 10;
    a.burstiness = shape;
    ArrivalProcess p(a, 2);
    double prev = 0, sum = 0, sum2 = 0;
    const int n = 40000;
    for (int i = 0; i < n; ++i) {
      const double t = to_seconds(p.next());
      sum += t - prev, sum2 += (t - prev) * (t - prev), prev = t;
    }
    const double mean = sum / n, var = sum2 / n - mean * mean;
    EXPECT_NEAR(mean, 0.1, 0.005) << shape;
    EXPECT_NEAR(var / (mean * mean), 1.0 / shape, 0.15 / shape) << shape;  // squared CV = 1/shape
  }
}

TEST(Arrivals, ConcurrencyAndDurationLimit) {
  ArrivalSpec c;
  c.kind = ArrivalKind::concurrency;
  c.concurrency = 4;
  auto w = std::get<0>(make_workload("shared_prefix:small", c, WorkloadLimits{10, {}}, 1));
  for (const auto& r : all(*w)) EXPECT_EQ(r.arrival, Duration::zero());
  ArrivalSpec p;
  p.rate = 10;
  auto d = std::get<0>(make_workload("shared_prefix:small", p, WorkloadLimits{100000, from_seconds(30)}, 1));
  auto reqs = all(*d);
  EXPECT_NEAR(double(reqs.size()), 300, 60);
  EXPECT_LE(reqs.back().arrival, from_seconds(30));
  ArrivalSpec bad;
  bad.rate = 0;
  EXPECT_FALSE(bad.validate().empty());
}

TEST(Trace, MooncakeSharingReproduced) {
  auto parsed = parse_trace(
      "{\"timestamp\": 1000, \"input_length\": 1000, \"output_length\": 10, \"hash_ids\": [1, 2]}\n"
      "{\"timestamp\": 1500, \"input_length\": 700, \"output_length\": 20, \"hash_ids\": [1, 3]}\n"
      "\n{\"timestamp\": 3000, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [9]}\n");
  ASSERT_TRUE(std::holds_alternative<std::vector<TraceEntry>>(parsed)) << std::get<std::string>(parsed);
  auto content = make_trace_content(std::get<0>(std::move(parsed)), 2.0, 512, "llama", 1);
  Workload w(std::move(content), ArrivalSpec{}, WorkloadLimits{}, 1);
  auto reqs = all(w);
  ASSERT_EQ(reqs.size(), 3u);
  EXPECT_EQ(reqs[0].arrival, Duration::zero());
  EXPECT_EQ(reqs[1].arrival, from_seconds(1.0));  // 0.5 s apart, time x2
  EXPECT_EQ(reqs[0].prompt.size(), 4000u);
  EXPECT_EQ(reqs[1].prompt.size(), 2800u);
  EXPECT_EQ(reqs[0].prompt.substr(0, 2048), reqs[1].prompt.substr(0, 2048));  // block 1 shared
  EXPECT_NE(reqs[0].prompt.substr(2048, 100), reqs[1].prompt.substr(2048, 100));
  EXPECT_EQ(reqs[1].max_tokens, 20);
}

TEST(Trace, ExplicitFormatAndErrors) {
  auto ok = parse_trace(
      "{\"arrival_s\": 0.5, \"tenant\": \"a\", \"model\": \"m\", \"messages\": [{\"role\": \"user\", "
      "\"content\": \"hi \\\"there\\\"\"}], \"max_tokens\": 7}\n");
  ASSERT_TRUE(std::holds_alternative<std::vector<TraceEntry>>(ok));
  const auto& e = std::get<0>(ok)[0];
  EXPECT_EQ(e.tenant, "a");
  EXPECT_EQ(e.messages[0].content, "hi \"there\"");
  EXPECT_EQ(e.output_length, 7);
  auto err = [](const char* text) {
    auto r = parse_trace(text);
    return std::holds_alternative<std::string>(r) ? std::get<std::string>(r) : "";
  };
  EXPECT_NE(err("{\"arrival_s\": 1, \"prompt\": \"x\"}\nnot json\n").find("line 2"), std::string::npos);
  EXPECT_NE(err("{\"prompt\": \"x\"}").find("missing timestamp"), std::string::npos);
  EXPECT_NE(err("{\"arrival_s\": 2, \"prompt\": \"x\"}\n{\"arrival_s\": 1, \"prompt\": \"y\"}").find("back in time"),
            std::string::npos);
  EXPECT_NE(err("{\"arrival_s\": 1}").find("no content"), std::string::npos);
  EXPECT_NE(err("").find("no requests"), std::string::npos);
}

}  // namespace
}  // namespace sluice::workload
