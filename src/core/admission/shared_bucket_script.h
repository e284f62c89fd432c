/*
 * The shared GCRA buckets' server-side script: the Lua text Redis runs atomically (EVALSHA), the
 * argument lists the gateway sends and the decoding of its integer replies. Pure: no sockets.
 *
 * State per bucket (one Redis hash per tenant x model scope x dimension, key
 * `<prefix>b:<tenant>:<model or *>:<dimension>:<limit>/<period_ms>`): `t` = the server time in ms
 * of the last change, `d` = max(TAT - t, 0) in "scaled milliseconds" (ms x limit), so one unit
 * costs exactly `period_ms` and TAT = t + d / limit. This is the local Gcra (gcra.h) at millisecond
 * resolution: the same inequalities in the same integer arithmetic, so equal inputs (times on
 * whole milliseconds) give equal decisions, remaining counts and waits (tests compare them).
 * Every value stays an exact integer in Lua's doubles while burst x period_ms < 2^53 (a daily
 * budget of 10^8 tokens: 8.6e15). A full bucket has no key; a key expires when its bucket would be
 * full again, so idle tenants cost no memory. Changing a limit starts a fresh bucket (new key).
 *
 * Held units per replica: hash `<prefix>held:<replica>`, field = bucket key, value = units the
 * replica took from the bucket and has not yet spent or given back (its lease credit plus its
 * running reservations). `reserve` adds what it grants (atomically with the bucket), `settle` sets
 * the replica's new absolute value (0 deletes the field): idempotent, so a lost settle is repaired
 * by the next. The hash expires `held_ttl` after the replica's last call: a dead replica's
 * holdings vanish, and the sum over replicas is what "reservations in Redis" means (0 when idle).
 *
 * Operations (ARGV[1]); ARGV[2] = now in ms, 0 = the server's clock (TIME; one clock for every
 * replica); ARGV[3] = held_ttl_ms (beat: the replica id); then 5 numbers per bucket:
 *   reserve  limit period_ms burst need extra   all-or-nothing over the buckets: when every
 *            bucket has room for `need`, each is charged need + min(extra, what else fits) (the
 *            lease slice) and the grant is added to `held`; otherwise nothing changes.
 *            Reply: {granted 1|0, worst bucket (1-based, 0 = none), retry_ms, then per bucket
 *            granted, remaining, reset_ms}: retry_ms = the longest refill time until `need`
 *            fits; remaining/reset_ms = units left / ms until full, after the call.
 *   settle   limit period_ms burst adjust held   adjust > 0 charges (may go into debt), < 0
 *            refunds (never above full); held >= 0 sets the replica's held value (-1 = keep).
 *            Reply: {1, 0, 0, then per bucket 0, remaining, reset_ms}.
 *   beat     KEYS[1] = replicas zset, ARGV[3] = replica id, ARGV[4] = window_ms: registers the
 *            replica, drops the silent ones. Reply: {1, replicas seen in the window, now_ms}.
 */
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/admission/gcra.h"

namespace sluice {

// The Lua source and its SHA-1 (hex), for EVALSHA / SCRIPT LOAD.
std::string_view shared_bucket_script();
const std::string& shared_bucket_script_sha1();

struct SharedBucketRef {
  std::string key;
  GcraSpec spec;  // burst already resolved (> 0)
};

struct ScriptBucketArg {
  int64_t a = 0;  // reserve: need; settle: adjust
  int64_t b = 0;  // reserve: extra; settle: held (-1 = keep)
};

// Full argv for EVALSHA (command name first). now_ms = 0: the server's clock.
std::vector<std::string> reserve_argv(const std::string& held_key, const std::vector<const SharedBucketRef*>& buckets,
                                      const std::vector<ScriptBucketArg>& args, int64_t held_ttl_ms, int64_t now_ms = 0);
std::vector<std::string> settle_argv(const std::string& held_key, const std::vector<const SharedBucketRef*>& buckets,
                                     const std::vector<ScriptBucketArg>& args, int64_t held_ttl_ms, int64_t now_ms = 0);
std::vector<std::string> beat_argv(const std::string& replicas_key, std::string_view replica_id, int64_t window_ms,
                                   int64_t now_ms = 0);

struct ScriptBucketReply {
  int64_t granted = 0;
  int64_t remaining = 0;
  int64_t reset_ms = 0;
};
struct ScriptReply {
  bool granted = false;
  int worst = 0;  // 1-based bucket that refused, 0 = none
  int64_t retry_ms = 0;
  std::vector<ScriptBucketReply> buckets;
};
// nullopt when the reply does not have the expected shape or values (counted as garbage).
std::optional<ScriptReply> parse_script_reply(const std::vector<int64_t>& values, size_t buckets);

}  // namespace sluice
