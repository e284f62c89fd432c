#include "core/config_validate.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

namespace sluice {

namespace {

// One step of a YAML path: a mapping key or a list index.
struct Step {
  std::string key;
  std::optional<size_t> index;
};
using Path = std::vector<Step>;

// "pools[1].endpoints[0].address" -> steps; nullopt for a message that does not start with a path.
std::optional<Path> parse_path(const std::string& s) {
  static const std::regex kPath(R"(^[A-Za-z0-9_\-]+(\[[0-9]+\]|\.[A-Za-z0-9_\-]+)*$)");
  if (!std::regex_match(s, kPath)) return std::nullopt;
  Path out;
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '.') ++i;
    if (s[i] == '[') {
      const size_t close = s.find(']', i);
      out.push_back({{}, std::stoul(s.substr(i + 1, close - i - 1))});
      i = close + 1;
    } else {
      const size_t end = s.find_first_of(".[", i);
      out.push_back({s.substr(i, end == std::string::npos ? std::string::npos : end - i), std::nullopt});
      i = end == std::string::npos ? s.size() : end;
    }
  }
  return out;
}

std::string to_string(const Path& p, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && i < p.size(); ++i) {
    if (p[i].index) out += "[" + std::to_string(*p[i].index) + "]";
    else out += (out.empty() ? "" : ".") + p[i].key;
  }
  return out;
}

// The node at `p` (first `n` steps) without creating anything; an undefined node when absent.
// (yaml-cpp's Node::operator= assigns into the tree: walking rebinds with reset().)
YAML::Node at(const YAML::Node& root, const Path& p, size_t n) {
  YAML::Node cur;
  cur.reset(root);
  for (size_t i = 0; i < n; ++i) {
    const YAML::Node& c = cur;
    YAML::Node next;
    if (p[i].index) {
      if (!c.IsSequence() || *p[i].index >= c.size()) return YAML::Node(YAML::NodeType::Undefined);
      next.reset(c[*p[i].index]);
    } else {
      if (!c.IsMap() || !c[p[i].key].IsDefined()) return YAML::Node(YAML::NodeType::Undefined);
      next.reset(c[p[i].key]);
    }
    cur.reset(next);
  }
  return cur;
}

class Validator {
 public:
  explicit Validator(YAML::Node root) : root_(std::move(root)) {}

  ConfigValidation run() {
    ConfigValidation out;
    for (size_t round = 0; round < 4 * kMaxValidationErrors; ++round) {
      std::string message;
      try {
        out.config = parse_config(YAML::Dump(root_));
        if (out.errors.empty()) return out;
        out.config.reset();
        return out;
      } catch (const ConfigError& e) {
        message = e.what();
      }
      const size_t colon = message.find(": ");
      const auto path = colon == std::string::npos ? std::nullopt : parse_path(message.substr(0, colon));
      if (!path) {  // no path (a YAML syntax error, an empty file): nothing to remove, so the list ends
        out.errors.push_back(message);
        return out;
      }
      const Path original = to_original(*path);
      const std::string where = to_string(original, original.size());
      if (!is_consequence(where, message)) {
        out.errors.push_back(where + message.substr(colon));
        if (out.errors.size() >= kMaxValidationErrors) {
          out.errors.push_back(fmt_more());
          return out;
        }
      }
      // Remove the node the error is about; when it is already gone (a required key, a list left
      // empty), its parent.
      size_t n = path->size();
      while (n > 0 && !at(root_, *path, n).IsDefined()) --n;
      if (n == 0) return out;
      reported_.push_back(where);
      remove(*path, n);
    }
    return out;
  }

 private:
  static std::string fmt_more() { return "(stopped after " + std::to_string(kMaxValidationErrors) + " errors)"; }

  // Current indices -> the file's own, given the list items removed so far.
  Path to_original(const Path& p) const {
    Path out;
    for (const auto& step : p) {
      Step s = step;
      if (s.index) {
        auto it = removed_items_.find(to_string(out, out.size()));
        if (it != removed_items_.end())
          for (size_t r : it->second)  // ascending
            if (r <= *s.index) ++*s.index;
      }
      out.push_back(s);
    }
    return out;
  }

  bool is_consequence(const std::string& where, const std::string& message) const {
    for (const auto& r : reported_)
      if (r == where || r.starts_with(where + ".") || r.starts_with(where + "[")) return true;
    for (const auto& name : removed_names_)
      if (message.find("'" + name + "'") != std::string::npos) return true;
    return false;
  }

  void remember_name(const YAML::Node& n) {
    if (n.IsMap() && n["name"] && n["name"].IsScalar()) removed_names_.insert(n["name"].Scalar());
  }

  void remove(const Path& p, size_t n) {
    YAML::Node parent = at(root_, p, n - 1);
    const Step& last = p[n - 1];
    if (last.index) {
      const YAML::Node& cp = parent;
      remember_name(cp[*last.index]);
      YAML::Node rebuilt(YAML::NodeType::Sequence);
      for (size_t i = 0; i < cp.size(); ++i)
        if (i != *last.index) rebuilt.push_back(cp[i]);
      const Path orig = to_original(Path(p.begin(), p.begin() + n));
      auto& list = removed_items_[to_string(orig, n - 1)];
      list.push_back(*orig[n - 1].index);
      std::sort(list.begin(), list.end());
      if (n == 1) return;  // the root is a mapping
      YAML::Node grand = at(root_, p, n - 2);
      const Step& holder = p[n - 2];
      if (holder.index) grand[*holder.index] = rebuilt;
      else grand[holder.key] = rebuilt;
    } else {
      if (last.key == "name") {
        const YAML::Node& cp = parent;
        if (cp[last.key].IsScalar()) removed_names_.insert(cp[last.key].Scalar());
      }
      parent.remove(last.key);
    }
  }

  YAML::Node root_;
  std::vector<std::string> reported_;                        // paths already reported or removed
  std::map<std::string, std::vector<size_t>> removed_items_;  // list path (file's numbering) -> removed indices
  std::set<std::string> removed_names_;                     // `name` of removed pools, models, tenants
};

}  // namespace

ConfigValidation validate_config_text(const std::string& yaml_text) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception&) {
    // parse_config words the syntax error (line, column) the same way serve does.
  }
  if (!root.IsMap()) {
    ConfigValidation out;
    try {
      out.config = parse_config(yaml_text);
    } catch (const ConfigError& e) {
      out.errors.push_back(e.what());
    }
    return out;
  }
  try {
    return Validator(root).run();
  } catch (const YAML::Exception& e) {  // a tree shape the walk did not expect: the first error at least
    ConfigValidation out;
    try {
      out.config = parse_config(yaml_text);
    } catch (const ConfigError& ce) {
      out.errors.push_back(ce.what());
    }
    return out;
  }
}

ConfigValidation validate_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ConfigValidation{{path + ": cannot open file"}, nullptr};
  std::stringstream ss;
  ss << in.rdbuf();
  return validate_config_text(ss.str());
}

}  // namespace sluice
