// Reading an upstream's Retry-After: `retry-after-ms` (milliseconds, what the OpenAI SDKs honour
// first) wins over `retry-after` (delay-seconds). nullopt when neither is present; Duration::max()
// when present but not a number (an HTTP-date or junk), which callers treat as "too long to wait".
#pragma once
#include <charconv>
#include <optional>
#include <string_view>

#include "core/time.h"

namespace sluice {

inline std::optional<Duration> parse_retry_after(std::string_view retry_after_ms, std::string_view retry_after) {
  auto number = [](std::string_view s, double& out) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    if (s.empty()) return false;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && out >= 0 && out < 1e9;
  };
  double v = 0;
  if (!retry_after_ms.empty())
    return number(retry_after_ms, v) ? std::optional<Duration>(std::chrono::microseconds(static_cast<int64_t>(v * 1000)))
                                     : std::optional<Duration>(Duration::max());
  if (!retry_after.empty())
    return number(retry_after, v) ? std::optional<Duration>(std::chrono::microseconds(static_cast<int64_t>(v * 1e6)))
                                  : std::optional<Duration>(Duration::max());
  return std::nullopt;
}

}  // namespace sluice
