#include "core/prom_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace sluice {
namespace {

TEST(PromText, FamiliesLabelsAndValues) {
  const char* text =
      "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
      "# TYPE vllm:num_requests_waiting gauge\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 3.0\n"
      "# TYPE vllm:prefix_cache_hits counter\n"
      "vllm:prefix_cache_hits_total{engine=\"0\"} 1.5e3 1700000000000\n"
      "plain 42\n";
  PromText t = parse_prom_text(text);
  EXPECT_EQ(t.errors, 0u);
  ASSERT_EQ(t.samples.size(), 3u);
  EXPECT_EQ(t.samples[0].name, "vllm:num_requests_waiting");
  EXPECT_DOUBLE_EQ(t.samples[0].value, 3.0);
  ASSERT_NE(t.samples[0].label("model_name"), nullptr);
  EXPECT_EQ(*t.samples[0].label("model_name"), "m");
  EXPECT_EQ(t.samples[0].label("nope"), nullptr);
  ASSERT_GE(t.samples[0].family, 0);
  EXPECT_EQ(t.families[t.samples[0].family].type, "gauge");
  EXPECT_EQ(t.families[t.samples[0].family].help, "Number of requests waiting.");
  // _total links to the family declared without it.
  ASSERT_GE(t.samples[1].family, 0);
  EXPECT_EQ(t.families[t.samples[1].family].name, "vllm:prefix_cache_hits");
  EXPECT_DOUBLE_EQ(t.samples[1].value, 1500);
  EXPECT_EQ(t.samples[1].timestamp_ms, 1700000000000);
  EXPECT_EQ(t.samples[2].family, -1);
  EXPECT_FALSE(t.samples[2].timestamp_ms.has_value());
}

TEST(PromText, LabelEscapesAndTrailingComma) {
  PromText t = parse_prom_text("m{a=\"x\\\"y\\\\z\\nw\",b=\"\",} 1\n");
  ASSERT_EQ(t.errors, 0u) << t.first_error;
  ASSERT_EQ(t.samples.size(), 1u);
  EXPECT_EQ(*t.samples[0].label("a"), "x\"y\\z\nw");
  EXPECT_EQ(*t.samples[0].label("b"), "");
}

TEST(PromText, SpecialValues) {
  PromText t = parse_prom_text("a +Inf\nb -Inf\nc NaN\nd nan\ne 1e-3\nf -2\nh_bucket{le=\"+Inf\"} 7\n");
  ASSERT_EQ(t.errors, 0u) << t.first_error;
  ASSERT_EQ(t.samples.size(), 7u);
  EXPECT_TRUE(std::isinf(t.samples[0].value) && t.samples[0].value > 0);
  EXPECT_TRUE(std::isinf(t.samples[1].value) && t.samples[1].value < 0);
  EXPECT_TRUE(std::isnan(t.samples[2].value));
  EXPECT_TRUE(std::isnan(t.samples[3].value));
  EXPECT_DOUBLE_EQ(t.samples[4].value, 1e-3);
  EXPECT_DOUBLE_EQ(t.samples[5].value, -2);
  EXPECT_EQ(*t.samples[6].label("le"), "+Inf");
}

TEST(PromText, CommentsBlankLinesCrlfAndEof) {
  PromText t = parse_prom_text("# just a comment\r\n\r\n   \n# EOF\nx 1\r\n");
  EXPECT_EQ(t.errors, 0u);
  ASSERT_EQ(t.samples.size(), 1u);
  EXPECT_EQ(t.samples[0].name, "x");
}

TEST(PromText, MalformedLinesAreSkippedAndCounted) {
  struct Case {
    const char* line;
  } cases[] = {
      {"{a=\"b\"} 1"},        // no name
      {"m{a=\"b\" 1"},        // unterminated label set
      {"m{a=b} 1"},           // unquoted value
      {"m{a=\"b} 1"},         // unterminated value
      {"m{a=\"\\q\"} 1"},     // bad escape
      {"m"},                  // no value
      {"m abc"},              // bad value
      {"m 1 2 3"},            // trailing characters
      {"m 1 notatime"},       // bad timestamp
      {"m{1a=\"x\"} 1"},      // bad label name
      {"# TYPE"},             // TYPE without name
  };
  for (const auto& c : cases) {
    std::string text = std::string("ok 1\n") + c.line + "\nok2 2\n";
    PromText t = parse_prom_text(text);
    EXPECT_EQ(t.errors, 1u) << c.line;
    EXPECT_EQ(t.first_error_line, 2u) << c.line;
    EXPECT_FALSE(t.first_error.empty());
    ASSERT_EQ(t.samples.size(), 2u) << c.line;
    EXPECT_EQ(t.samples[1].name, "ok2");
  }
}

TEST(PromText, LimitsBoundWork) {
  PromParseLimits lim;
  lim.max_samples = 2;
  lim.max_line_bytes = 16;
  PromText t = parse_prom_text("a 1\nb 2\nc 3\nthis_name_is_far_too_long_for_the_limit 4\n", lim);
  EXPECT_EQ(t.samples.size(), 2u);
  EXPECT_EQ(t.errors, 2u);
}

TEST(PromText, RandomGarbageNeverCrashes) {
  std::mt19937 rng(7);
  const std::string alphabet = "abc_:{}=\",\\ \n#+-.0123456789InfNaTYPEHELP\t\r";
  for (int i = 0; i < 2000; ++i) {
    std::string s;
    int n = rng() % 200;
    for (int j = 0; j < n; ++j) s += alphabet[rng() % alphabet.size()];
    PromText t = parse_prom_text(s);
    EXPECT_LE(t.samples.size(), s.size());
  }
}

}  // namespace
}  // namespace sluice
