#include "core/openai/sse.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sluice {
namespace {

struct Seen {
  std::string raw, event, id, data;
  bool has_data;
};

std::vector<Seen> drain(SseParser& p) {
  std::vector<Seen> out;
  SseEvent ev;
  while (p.next(ev)) out.push_back({std::string(ev.raw), std::string(ev.event), std::string(ev.id), std::string(ev.data), ev.has_data});
  return out;
}

// Feeds `input` split every `step` bytes, collecting every event.
std::vector<Seen> parse_in_steps(const std::string& input, size_t step, std::string* rest = nullptr) {
  SseParser p;
  std::vector<Seen> all;
  for (size_t i = 0; i < input.size(); i += step) {
    p.append(std::string_view(input).substr(i, step));
    for (auto& s : drain(p)) all.push_back(s);
  }
  if (rest) *rest = std::string(p.pending());
  return all;
}

TEST(SseParser, SingleEventWithLf) {
  SseParser p;
  p.append("data: {\"a\":1}\n\n");
  auto ev = drain(p);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "{\"a\":1}");
  EXPECT_TRUE(ev[0].has_data);
  EXPECT_EQ(ev[0].raw, "data: {\"a\":1}\n\n");
  EXPECT_EQ(p.pending(), "");
}

TEST(SseParser, IncompleteEventIsHeldUntilItsBlankLine) {
  SseParser p;
  p.append("data: hel");
  EXPECT_TRUE(drain(p).empty());
  EXPECT_EQ(p.pending(), "data: hel");
  p.append("lo\n");
  EXPECT_TRUE(drain(p).empty());
  p.append("\ndata: x");
  auto ev = drain(p);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "hello");
  EXPECT_EQ(p.pending(), "data: x");
}

TEST(SseParser, EverySplitPointGivesTheSameEventsAndBytes) {
  const std::string input =
      "data: {\"id\":1}\r\n\r\n"
      ": ping\n\n"
      "event: message\rid: 7\rdata: line1\rdata: line2\r\r"
      "data:nospace\n\n"
      "data: [DONE]\r\n\r\n"
      "data: tail";
  for (size_t step = 1; step <= input.size(); ++step) {
    std::string rest;
    auto ev = parse_in_steps(input, step, &rest);
    ASSERT_EQ(ev.size(), 5u) << "step " << step;
    EXPECT_EQ(ev[0].data, "{\"id\":1}");
    EXPECT_FALSE(ev[1].has_data);
    EXPECT_EQ(ev[2].event, "message");
    EXPECT_EQ(ev[2].id, "7");
    EXPECT_EQ(ev[2].data, "line1\nline2");
    EXPECT_EQ(ev[3].data, "nospace");
    EXPECT_EQ(ev[4].data, "[DONE]");
    std::string joined;
    for (auto& e : ev) joined += e.raw;
    EXPECT_EQ(joined + rest, input) << "bytes must be conserved, step " << step;
    // A LF that completes a CRLF split across reads is carried by the next block's raw bytes.
    EXPECT_TRUE(rest == "data: tail" || rest == "\ndata: tail") << rest;
  }
}

TEST(SseParser, CrLfSplitBetweenReadsIsOneLineEnd) {
  SseParser p;
  p.append("data: a\r");
  EXPECT_TRUE(drain(p).empty());
  p.append("\n\r");
  auto ev = drain(p);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "a");
  p.append("\ndata: b\n\n");
  ev = drain(p);
  ASSERT_EQ(ev.size(), 1u) << "the LF after a CR must not end an empty block";
  EXPECT_EQ(ev[0].data, "b");
}

TEST(SseParser, EmptyDataLineCounts) {
  SseParser p;
  p.append("data\n\ndata:\n\n");
  auto ev = drain(p);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_TRUE(ev[0].has_data);
  EXPECT_EQ(ev[0].data, "");
  EXPECT_TRUE(ev[1].has_data);
}

TEST(SseParser, OversizedEventFails) {
  SseParser p(64);
  p.append(std::string(100, 'x'));
  SseEvent ev;
  EXPECT_FALSE(p.next(ev));
  EXPECT_TRUE(p.failed());
}

TEST(SseParser, MultiLineDataViewSurvivesUntilNextCall) {
  SseParser p;
  p.append("data: a\ndata: b\n\ndata: c\ndata: d\n\n");
  SseEvent ev;
  ASSERT_TRUE(p.next(ev));
  EXPECT_EQ(ev.data, "a\nb");
  ASSERT_TRUE(p.next(ev));
  EXPECT_EQ(ev.data, "c\nd");
  EXPECT_EQ(p.events(), 2u);
}

}  // namespace
}  // namespace sluice
