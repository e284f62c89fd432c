// A Prometheus text exposition format (0.0.4, and the OpenMetrics subset engines emit) parser.
//
// Grammar handled, line by line:
//   # HELP <name> <docstring>        (escapes \\ and \n)
//   # TYPE <name> <counter|gauge|histogram|summary|untyped|...>
//   # EOF / any other comment         (ignored)
//   <name>[{<label>="<value>",...}] <value> [<timestamp ms>]
// Label values take the escapes \\, \" and \n; a trailing comma inside the braces is allowed.
// Values are floats including +Inf, -Inf, NaN (any case). Timestamps are optional integers.
//
// Robust to garbage: a malformed line is skipped and counted (with the first error's line number
// and reason kept), never a crash and never an exception. Bounded: lines longer than
// `max_line_bytes` and anything beyond `max_samples` are skipped (and counted as errors).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

struct PromSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
  std::optional<int64_t> timestamp_ms;
  int family = -1;  // index into PromText::families, -1 when no HELP/TYPE names it

  // The value of label `key`, or nullptr.
  const std::string* label(std::string_view key) const;
};

struct PromFamily {
  std::string name;
  std::string type;  // as declared ("counter", "gauge", ...); empty when only HELP was given
  std::string help;
};

struct PromText {
  std::vector<PromSample> samples;
  std::vector<PromFamily> families;
  size_t errors = 0;          // malformed lines skipped
  size_t first_error_line = 0;  // 1-based; 0 when errors == 0
  std::string first_error;
};

struct PromParseLimits {
  size_t max_line_bytes = 64 * 1024;
  size_t max_samples = 200000;
};

PromText parse_prom_text(std::string_view text, const PromParseLimits& limits = {});

}  // namespace sluice
