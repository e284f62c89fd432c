#include "core/prom_text.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace sluice {

const std::string* PromSample::label(std::string_view key) const {
  for (const auto& [k, v] : labels)
    if (k == key) return &v;
  return nullptr;
}

namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_blank(char c) { return c == ' ' || c == '\t'; }

// A cursor over one line; every method fails softly.
struct Cursor {
  std::string_view s;
  size_t i = 0;
  bool done() const { return i >= s.size(); }
  void skip_blanks() {
    while (i < s.size() && is_blank(s[i])) ++i;
  }
  std::string_view name(bool label_name = false) {
    size_t b = i;
    if (i < s.size() && (label_name ? (is_name_start(s[i]) && s[i] != ':') : is_name_start(s[i]))) {
      ++i;
      while (i < s.size() && is_name_char(s[i])) ++i;
    }
    return s.substr(b, i - b);
  }
  std::string_view token() {
    size_t b = i;
    while (i < s.size() && !is_blank(s[i])) ++i;
    return s.substr(b, i - b);
  }
};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = char(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::optional<double> parse_value(std::string_view t) {
  if (t.empty()) return std::nullopt;
  bool neg = false;
  std::string_view body = t;
  if (body[0] == '+' || body[0] == '-') {
    neg = body[0] == '-';
    body.remove_prefix(1);
  }
  if (iequals(body, "inf") || iequals(body, "infinity"))
    return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (iequals(body, "nan")) return std::numeric_limits<double>::quiet_NaN();
  if (body.empty() || !((body[0] >= '0' && body[0] <= '9') || body[0] == '.')) return std::nullopt;
  double v = 0;
  auto [p, ec] = std::from_chars(body.data(), body.data() + body.size(), v);
  if (ec != std::errc() || p != body.data() + body.size()) return std::nullopt;
  return neg ? -v : v;
}

// Prometheus text: integer milliseconds. OpenMetrics: float seconds (recognised by a '.').
std::optional<int64_t> parse_timestamp(std::string_view t) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc() && p == t.data() + t.size()) return v;
  if (t.find('.') == std::string_view::npos) return std::nullopt;
  double secs = 0;
  auto [q, ec2] = std::from_chars(t.data(), t.data() + t.size(), secs);
  if (ec2 != std::errc() || q != t.data() + t.size() || !std::isfinite(secs) || std::fabs(secs) > 9e15)
    return std::nullopt;
  return static_cast<int64_t>(secs * 1000.0);
}

std::string unescape_help(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '\\' || s[i + 1] == 'n')) {
      out += s[i + 1] == 'n' ? '\n' : '\\';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

class Parser {
 public:
  Parser(const PromParseLimits& limits) : limits_(limits) {}

  PromText run(std::string_view text) {
    size_t line_no = 0, pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.size() > limits_.max_line_bytes) {
        error(line_no, "line too long");
        continue;
      }
      if (const char* why = parse_line(line)) error(line_no, why);
    }
    link_families();
    return std::move(out_);
  }

 private:
  void error(size_t line_no, const char* why) {
    if (out_.errors++ == 0) {
      out_.first_error_line = line_no;
      out_.first_error = why;
    }
  }

  int family_index(std::string_view name) {
    auto it = family_by_name_.find(std::string(name));
    if (it != family_by_name_.end()) return it->second;
    out_.families.push_back(PromFamily{std::string(name), {}, {}});
    int idx = static_cast<int>(out_.families.size() - 1);
    family_by_name_.emplace(std::string(name), idx);
    return idx;
  }

  // Returns nullptr on success, or the reason the line was skipped.
  const char* parse_line(std::string_view line) {
    Cursor c{line};
    c.skip_blanks();
    if (c.done()) return nullptr;
    if (line[c.i] == '#') return parse_comment(c);
    if (out_.samples.size() >= limits_.max_samples) return "too many samples";
    PromSample s;
    std::string_view name = c.name();
    if (name.empty()) return "expected a metric name";
    s.name = name;
    c.skip_blanks();
    if (!c.done() && line[c.i] == '{') {
      ++c.i;
      if (const char* why = parse_labels(c, s)) return why;
    }
    c.skip_blanks();
    auto value = parse_value(c.token());
    if (!value) return "bad sample value";
    s.value = *value;
    c.skip_blanks();
    if (!c.done()) {
      auto ts = parse_timestamp(c.token());
      if (!ts) return "bad timestamp";
      s.timestamp_ms = *ts;
      c.skip_blanks();
      if (!c.done()) return "trailing characters";
    }
    out_.samples.push_back(std::move(s));
    return nullptr;
  }

  const char* parse_labels(Cursor& c, PromSample& s) {
    for (;;) {
      c.skip_blanks();
      if (c.done()) return "unterminated label set";
      if (c.s[c.i] == '}') {
        ++c.i;
        return nullptr;
      }
      std::string_view key = c.name(true);
      if (key.empty()) return "expected a label name";
      c.skip_blanks();
      if (c.done() || c.s[c.i] != '=') return "expected '=' after label name";
      ++c.i;
      c.skip_blanks();
      if (c.done() || c.s[c.i] != '"') return "expected '\"' to open a label value";
      ++c.i;
      std::string value;
      bool closed = false;
      while (!c.done()) {
        char ch = c.s[c.i++];
        if (ch == '"') {
          closed = true;
          break;
        }
        if (ch == '\\') {
          if (c.done()) break;
          char e = c.s[c.i++];
          if (e == 'n') value += '\n';
          else if (e == '\\' || e == '"') value += e;
          else return "bad escape in label value";
        } else {
          value += ch;
        }
      }
      if (!closed) return "unterminated label value";
      if (s.labels.size() >= 256) return "too many labels";
      s.labels.emplace_back(std::string(key), std::move(value));
      c.skip_blanks();
      if (c.done()) return "unterminated label set";
      if (c.s[c.i] == ',') ++c.i;
      else if (c.s[c.i] != '}') return "expected ',' or '}' in label set";
    }
  }

  const char* parse_comment(Cursor& c) {
    ++c.i;  // '#'
    c.skip_blanks();
    std::string_view kw = c.token();
    if (kw != "HELP" && kw != "TYPE") return nullptr;  // plain comment, # EOF, # UNIT...
    c.skip_blanks();
    std::string_view name = c.name();
    if (name.empty()) return "expected a metric name after HELP/TYPE";
    if (!c.done() && !is_blank(c.s[c.i])) return "bad metric name after HELP/TYPE";
    c.skip_blanks();
    std::string_view rest = c.s.substr(c.i);
    auto& fam = out_.families[static_cast<size_t>(family_index(name))];
    if (kw == "HELP") {
      fam.help = unescape_help(rest);
    } else {
      while (!rest.empty() && is_blank(rest.back())) rest.remove_suffix(1);
      fam.type = rest;
    }
    return nullptr;
  }

  // A sample belongs to the family of its exact name, or of its name without a histogram /
  // summary / counter suffix.
  void link_families() {
    static constexpr std::string_view kSuffixes[] = {"_total", "_bucket", "_sum", "_count", "_created", "_info"};
    for (auto& s : out_.samples) {
      if (auto it = family_by_name_.find(s.name); it != family_by_name_.end()) {
        s.family = it->second;
        continue;
      }
      std::string_view n = s.name;
      for (auto suf : kSuffixes) {
        if (n.size() > suf.size() && n.substr(n.size() - suf.size()) == suf) {
          if (auto it = family_by_name_.find(std::string(n.substr(0, n.size() - suf.size())));
              it != family_by_name_.end()) {
            s.family = it->second;
            break;
          }
        }
      }
    }
  }

  PromParseLimits limits_;
  PromText out_;
  std::unordered_map<std::string, int> family_by_name_;
};

}  // namespace

PromText parse_prom_text(std::string_view text, const PromParseLimits& limits) {
  return Parser(limits).run(text);
}

}  // namespace sluice
