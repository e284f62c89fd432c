// The shared buckets' Lua script, run by a real redis-server, against the local GCRA (gcra.h):
// same inputs (times on whole milliseconds), same decisions, remaining counts and waits.
#include "core/admission/shared_bucket_script.h"

#include <gtest/gtest.h>

#include <random>

#include "core/admission/gcra.h"
#include "redis_server.h"

namespace sluice {
namespace {

using std::chrono::milliseconds;
using testing::RedisServer;
using testing::redis_ints;

class ScriptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "redis-server did not start";
    c_ = server_.connect();
    ASSERT_TRUE(c_ && !c_->err);
    auto* r = static_cast<redisReply*>(redisCommand(c_, "SCRIPT LOAD %b", shared_bucket_script().data(),
                                                    shared_bucket_script().size()));
    ASSERT_TRUE(r && r->type == REDIS_REPLY_STRING) << (r && r->str ? r->str : "no reply");
    EXPECT_EQ(std::string(r->str, r->len), shared_bucket_script_sha1());
    freeReplyObject(r);
  }
  void TearDown() override {
    if (c_) redisFree(c_);
  }
  ScriptReply call(const std::vector<std::string>& argv, size_t n) {
    std::vector<int64_t> v;
    std::string err;
    EXPECT_TRUE(redis_ints(c_, argv, v, &err)) << err;
    auto r = parse_script_reply(v, n);
    EXPECT_TRUE(r.has_value());
    return r.value_or(ScriptReply{});
  }
  int64_t hget_held(const std::string& key) {
    auto* r = static_cast<redisReply*>(redisCommand(c_, "HGET sluice:held:t %s", key.c_str()));
    int64_t v = r && r->type == REDIS_REPLY_STRING ? std::stoll(std::string(r->str, r->len)) : -1;
    if (r) freeReplyObject(r);
    return v;
  }
  RedisServer server_;
  redisContext* c_ = nullptr;
};

Time at_ms(int64_t ms) { return Time(milliseconds(ms)); }
int64_t ceil_ms(Duration d) { return (d.count() + 999'999) / 1'000'000; }

TEST_F(ScriptTest, RandomSequenceMatchesLocalGcra) {
  for (const GcraSpec spec : {GcraSpec{600, std::chrono::minutes(1), 600}, GcraSpec{7, std::chrono::minutes(1), 7},
                              GcraSpec{100000, std::chrono::hours(24), 100000}, GcraSpec{3000, std::chrono::minutes(1), 1000}}) {
    SharedBucketRef b{"sluice:b:test:" + std::to_string(spec.limit) + ":" + std::to_string(spec.burst), spec};
    Gcra g(spec);
    std::mt19937_64 rng(spec.limit);
    int64_t now = 1'700'000'000'000;  // epoch ms
    int granted = 0, refused = 0;
    for (int i = 0; i < 400; ++i) {
      now += static_cast<int64_t>(rng() % 400);
      const int op = static_cast<int>(rng() % 4);
      const int64_t n = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(std::max<int64_t>(2, spec.burst / 4)));
      const Time t = at_ms(now);
      if (op <= 1) {  // reserve
        const auto r = call(reserve_argv("sluice:held:t", {&b}, {{n, 0}}, 60000, now), 1);
        const bool want = g.try_consume(n, t);
        ASSERT_EQ(r.granted, want) << "step " << i << " n=" << n;
        (want ? granted : refused)++;
        if (!want) {
          EXPECT_EQ(r.retry_ms, ceil_ms(g.time_until(n, t))) << "step " << i;
        }
        EXPECT_EQ(r.buckets[0].granted, want ? n : 0);
        EXPECT_EQ(r.buckets[0].remaining, g.remaining(t)) << "step " << i;
        EXPECT_EQ(r.buckets[0].reset_ms, ceil_ms(g.time_until_full(t))) << "step " << i;
      } else if (op == 2) {  // settle: refund
        const auto r = call(settle_argv("sluice:held:t", {&b}, {{-n, -1}}, 60000, now), 1);
        g.refund(n, t);
        EXPECT_EQ(r.buckets[0].remaining, g.remaining(t)) << "step " << i;
        EXPECT_EQ(r.buckets[0].reset_ms, ceil_ms(g.time_until_full(t))) << "step " << i;
      } else {  // settle: charge (may go into debt)
        const auto r = call(settle_argv("sluice:held:t", {&b}, {{n, -1}}, 60000, now), 1);
        g.force_consume(n, t);
        EXPECT_EQ(r.buckets[0].remaining, g.remaining(t)) << "step " << i;
        EXPECT_EQ(r.buckets[0].reset_ms, ceil_ms(g.time_until_full(t))) << "step " << i;
      }
    }
    EXPECT_GT(granted, 20);
    EXPECT_GT(refused, 5);
  }
}

TEST_F(ScriptTest, AllOrNothingAcrossBucketsAndTheLeaseSlice) {
  SharedBucketRef rpm{"sluice:b:a:rpm", GcraSpec{10, std::chrono::minutes(1), 10}};
  SharedBucketRef otpm{"sluice:b:a:otpm", GcraSpec{1000, std::chrono::minutes(1), 1000}};
  const int64_t now = 5'000'000;
  // The slice is granted up to what fits beyond the need.
  auto r = call(reserve_argv("sluice:held:t", {&rpm, &otpm}, {{1, 3}, {600, 900}}, 60000, now), 2);
  ASSERT_TRUE(r.granted);
  EXPECT_EQ(r.buckets[0].granted, 4);
  EXPECT_EQ(r.buckets[1].granted, 1000);
  EXPECT_EQ(r.buckets[1].remaining, 0);
  EXPECT_EQ(hget_held(otpm.key), 1000);
  // The output bucket is empty: nothing is charged anywhere, the wait is the output bucket's.
  r = call(reserve_argv("sluice:held:t", {&rpm, &otpm}, {{1, 0}, {60, 0}}, 60000, now), 2);
  EXPECT_FALSE(r.granted);
  EXPECT_EQ(r.worst, 2);
  EXPECT_EQ(r.retry_ms, 3600);  // 60 tokens at 1000/min
  EXPECT_EQ(r.buckets[0].remaining, 6);
  // Settling sets the replica's held units; 0 removes the field.
  r = call(settle_argv("sluice:held:t", {&rpm, &otpm}, {{0, 0}, {-400, 250}}, 60000, now), 2);
  EXPECT_EQ(r.buckets[1].remaining, 400);
  EXPECT_EQ(hget_held(otpm.key), 250);
  EXPECT_EQ(hget_held(rpm.key), -1);
}

TEST_F(ScriptTest, BeatCountsReplicasInTheWindow) {
  std::vector<int64_t> v;
  ASSERT_TRUE(redis_ints(c_, beat_argv("sluice:replicas", "a", 10000, 1'000'000), v));
  ASSERT_TRUE(redis_ints(c_, beat_argv("sluice:replicas", "b", 10000, 1'001'000), v));
  EXPECT_EQ(v[1], 2);
  ASSERT_TRUE(redis_ints(c_, beat_argv("sluice:replicas", "b", 10000, 1'012'000), v));
  EXPECT_EQ(v[1], 1);  // a fell out of the window
  ASSERT_TRUE(redis_ints(c_, beat_argv("sluice:replicas", "b", 10000, 0), v));  // server clock
  EXPECT_GT(v[2], 1'600'000'000'000);
}

TEST(SharedBucketScript, RejectsMalformedReplies) {
  EXPECT_FALSE(parse_script_reply({1, 0, 0}, 1));                  // too short
  EXPECT_FALSE(parse_script_reply({2, 0, 0, 1, 1, 1}, 1));         // bad flag
  EXPECT_FALSE(parse_script_reply({1, 1, 0, 1, 1, 1}, 1));         // granted with a worst bucket
  EXPECT_FALSE(parse_script_reply({0, 3, 0, 0, 1, 1}, 1));         // worst out of range
  EXPECT_FALSE(parse_script_reply({1, 0, 0, -1, 1, 1}, 1));        // negative grant
  EXPECT_TRUE(parse_script_reply({0, 1, 5, 0, 1, 1}, 1).has_value());
}

}  // namespace
}  // namespace sluice
