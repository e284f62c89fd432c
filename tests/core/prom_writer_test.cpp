#include "core/prom_writer.h"

#include <gtest/gtest.h>

#include "core/prom_text.h"

namespace sluice {
namespace {

TEST(PromWriter, FamilySampleAndEscapes) {
  std::string out;
  PromWriter w(out);
  w.family("x_total", "counter", "Help with \\ and\nnewline.");
  w.sample("x_total", {{"pool", "a\"b"}, {"endpoint", "c\\d\ne"}}, 3);
  w.sample("x_total", "", 0.25);
  EXPECT_EQ(out,
            "# HELP x_total Help with \\\\ and\\nnewline.\n# TYPE x_total counter\n"
            "x_total{pool=\"a\\\"b\",endpoint=\"c\\\\d\\ne\"} 3\n"
            "x_total 0.25\n");
  // The core parser reads back what the writer wrote.
  const PromText t = parse_prom_text(out);
  ASSERT_EQ(t.errors, 0u);
  ASSERT_EQ(t.samples.size(), 2u);
  EXPECT_EQ(*t.samples[0].label("pool"), "a\"b");
  EXPECT_EQ(*t.samples[0].label("endpoint"), "c\\d\ne");
  ASSERT_EQ(t.families.size(), 1u);
  EXPECT_EQ(t.families[0].help, "Help with \\ and\nnewline.");
}

TEST(PromWriter, NumberStyles) {
  EXPECT_EQ(format_prom_value(3), "3");
  EXPECT_EQ(format_prom_value(3, PromFloats::python), "3.0");
  EXPECT_EQ(format_prom_value(0.25, PromFloats::python), "0.25");
  EXPECT_EQ(format_prom_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(format_prom_value(-1.0 / 0.0, PromFloats::python), "-Inf");
  EXPECT_EQ(format_prom_value(0.0 / 0.0), "NaN");
}

TEST(PromWriter, HistogramIsCumulativeWithLeLast) {
  const BucketBounds b{0.1, 1};
  HistogramData h(b);
  for (double v : {0.05, 0.1, 0.5, 7.0}) h.observe(v);
  std::string out;
  PromWriter(out).histogram("t_seconds", "pool=\"chat\"", h);
  EXPECT_EQ(out,
            "t_seconds_bucket{pool=\"chat\",le=\"0.1\"} 2\n"
            "t_seconds_bucket{pool=\"chat\",le=\"1\"} 3\n"
            "t_seconds_bucket{pool=\"chat\",le=\"+Inf\"} 4\n"
            "t_seconds_sum{pool=\"chat\"} 7.65\n"
            "t_seconds_count{pool=\"chat\"} 4\n");
  out.clear();
  PromWriter(out, PromFloats::python).histogram("t", "", h);
  EXPECT_NE(out.find("t_bucket{le=\"1.0\"} 3.0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("t_count 4.0\n"), std::string::npos) << out;
}

TEST(PromWriter, AppendLabels) {
  std::string out;
  append_labels(out, {"pool", "endpoint"}, {"p", "e\"1"});
  EXPECT_EQ(out, "pool=\"p\",endpoint=\"e\\\"1\"");
}

}  // namespace
}  // namespace sluice
