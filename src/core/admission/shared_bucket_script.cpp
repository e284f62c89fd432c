#include "core/admission/shared_bucket_script.h"

#include <openssl/evp.h>

#include <fmt/format.h>

namespace sluice {

namespace {

// Integers are formatted with %d before they reach a Redis command: Lua 5.1's tostring keeps 14
// significant digits, too few for the scaled state.
constexpr std::string_view kScript = R"lua(
local op = ARGV[1]
local now = tonumber(ARGV[2])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function int(x) return string.format('%d', x) end
if op == 'beat' then
  local window = tonumber(ARGV[4])
  redis.call('ZADD', KEYS[1], int(now), ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', int(now - window))
  redis.call('PEXPIRE', KEYS[1], int(window * 2))
  return {1, redis.call('ZCARD', KEYS[1]), now}
end
local held_key = KEYS[1]
local held_ttl = tonumber(ARGV[3])
local n = #KEYS - 1
local function ceil_div(a, b)
  if a <= 0 then return 0 end
  return math.floor((a + b - 1) / b)
end
local st = {}
for i = 1, n do
  local b = 4 + (i - 1) * 5
  local limit, period, burst = tonumber(ARGV[b]), tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local v = redis.call('HMGET', KEYS[i + 1], 't', 'd')
  local dd = 0
  local t0, d0 = tonumber(v[1]), tonumber(v[2])
  if t0 and d0 then
    dd = d0 - (now - t0) * limit
    if dd < 0 then dd = 0 end
  end
  st[i] = {limit = limit, period = period, burst = burst, tau = burst * period, dd = dd,
           a = tonumber(ARGV[b + 3]), b = tonumber(ARGV[b + 4])}
end
local function remaining(s)
  local room = s.tau - s.dd
  if room <= 0 then return 0 end
  local u = math.floor(room / s.period)
  if u > s.burst then u = s.burst end
  return u
end
local function store(i, s)
  if s.dd <= 0 then
    redis.call('DEL', KEYS[i + 1])
  else
    redis.call('HSET', KEYS[i + 1], 't', int(now), 'd', int(s.dd))
    redis.call('PEXPIRE', KEYS[i + 1], int(ceil_div(s.dd, s.limit) + 1000))
  end
end
local out
if op == 'reserve' then
  local worst, wait = 0, -1
  for i = 1, n do
    local s = st[i]
    if s.a > 0 then
      local over = s.dd + s.a * s.period - s.tau
      if over > 0 then
        local w = ceil_div(over, s.limit)
        if w > wait then wait = w; worst = i end
      end
    end
  end
  if worst == 0 then out = {1, 0, 0} else out = {0, worst, wait} end
  for i = 1, n do
    local s = st[i]
    local g = 0
    if worst == 0 then
      g = s.a
      if s.b > 0 then
        local room = math.floor((s.tau - s.dd) / s.period) - g
        local extra = s.b
        if extra > room then extra = room end
        if extra > 0 then g = g + extra end
      end
      if g > 0 then
        s.dd = s.dd + g * s.period
        store(i, s)
        redis.call('HINCRBY', held_key, KEYS[i + 1], int(g))
      end
    end
    out[#out + 1] = g
    out[#out + 1] = remaining(s)
    out[#out + 1] = ceil_div(s.dd, s.limit)
  end
  if worst == 0 then redis.call('PEXPIRE', held_key, int(held_ttl)) end
  return out
elseif op == 'settle' then
  out = {1, 0, 0}
  for i = 1, n do
    local s = st[i]
    if s.a ~= 0 then
      s.dd = s.dd + s.a * s.period
      if s.dd < 0 then s.dd = 0 end
      store(i, s)
    end
    if s.b == 0 then
      redis.call('HDEL', held_key, KEYS[i + 1])
    elseif s.b > 0 then
      redis.call('HSET', held_key, KEYS[i + 1], int(s.b))
    end
    out[#out + 1] = 0
    out[#out + 1] = remaining(s)
    out[#out + 1] = ceil_div(s.dd, s.limit)
  end
  if redis.call('EXISTS', held_key) == 1 then redis.call('PEXPIRE', held_key, int(held_ttl)) end
  return out
end
return redis.error_reply('sluice: unknown operation')
)lua";

std::string sha1_hex(std::string_view s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(s.data(), s.size(), md, &len, EVP_sha1(), nullptr);
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

std::vector<std::string> bucket_argv(std::string_view op, const std::string& held_key,
                                     const std::vector<const SharedBucketRef*>& buckets,
                                     const std::vector<ScriptBucketArg>& args, int64_t held_ttl_ms, int64_t now_ms) {
  std::vector<std::string> v;
  v.reserve(4 + buckets.size() * 6 + 3);
  v.emplace_back("EVALSHA");
  v.push_back(shared_bucket_script_sha1());
  v.push_back(std::to_string(buckets.size() + 1));
  v.push_back(held_key);
  for (const auto* b : buckets) v.push_back(b->key);
  v.emplace_back(op);
  v.push_back(std::to_string(now_ms));
  v.push_back(std::to_string(held_ttl_ms));
  for (size_t i = 0; i < buckets.size(); ++i) {
    const GcraSpec& s = buckets[i]->spec;
    v.push_back(std::to_string(s.limit));
    v.push_back(std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(s.period).count()));
    v.push_back(std::to_string(s.burst > 0 ? s.burst : s.limit));
    v.push_back(std::to_string(args[i].a));
    v.push_back(std::to_string(args[i].b));
  }
  return v;
}

}  // namespace

std::string_view shared_bucket_script() { return kScript; }

const std::string& shared_bucket_script_sha1() {
  static const std::string sha = sha1_hex(kScript);
  return sha;
}

std::vector<std::string> reserve_argv(const std::string& held_key, const std::vector<const SharedBucketRef*>& buckets,
                                      const std::vector<ScriptBucketArg>& args, int64_t held_ttl_ms, int64_t now_ms) {
  return bucket_argv("reserve", held_key, buckets, args, held_ttl_ms, now_ms);
}

std::vector<std::string> settle_argv(const std::string& held_key, const std::vector<const SharedBucketRef*>& buckets,
                                     const std::vector<ScriptBucketArg>& args, int64_t held_ttl_ms, int64_t now_ms) {
  return bucket_argv("settle", held_key, buckets, args, held_ttl_ms, now_ms);
}

std::vector<std::string> beat_argv(const std::string& replicas_key, std::string_view replica_id, int64_t window_ms,
                                   int64_t now_ms) {
  return {"EVALSHA", shared_bucket_script_sha1(), "1", replicas_key, "beat", std::to_string(now_ms),
          std::string(replica_id), std::to_string(window_ms)};
}

std::optional<ScriptReply> parse_script_reply(const std::vector<int64_t>& v, size_t buckets) {
  if (v.size() != 3 + 3 * buckets) return std::nullopt;
  if (v[0] != 0 && v[0] != 1) return std::nullopt;
  ScriptReply r;
  r.granted = v[0] == 1;
  if (v[1] < 0 || static_cast<size_t>(v[1]) > buckets || v[2] < 0) return std::nullopt;
  if (r.granted != (v[1] == 0)) return std::nullopt;
  r.worst = static_cast<int>(v[1]);
  r.retry_ms = v[2];
  r.buckets.resize(buckets);
  for (size_t i = 0; i < buckets; ++i) {
    const int64_t g = v[3 + 3 * i], rem = v[4 + 3 * i], reset = v[5 + 3 * i];
    if (g < 0 || rem < 0 || reset < 0) return std::nullopt;
    r.buckets[i] = {g, rem, reset};
  }
  return r;
}

}  // namespace sluice
