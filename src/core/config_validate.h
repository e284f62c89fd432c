// `sluice validate`: every error of a config at once, from the very parser `serve` uses.
//
// Algorithm: parse_config (core/config.h) stops at its first error, which names a YAML path
// ("pools[1].endpoints[0]: ..."). The validator records that error, removes the node at that path
// from its copy of the tree (so the parser's default or a sibling takes over) and parses again,
// up to kMaxErrors times, until the parse succeeds. Consequences of a removal are not reported
// as errors of their own: an error on the removed node's path or an ancestor of it (a list left
// empty, a required key now missing: the parent goes instead), or one naming an item that was
// removed ("unknown pool 'chat'" after pools[0], named chat, went). Paths are reported in the
// file's own numbering: removed list items are remembered, so later indices are mapped back.
// An error without a path (YAML syntax) ends the list. There is one parser: nothing here
// re-implements a check, so what validate accepts, serve accepts.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"

namespace sluice {

struct ConfigValidation {
  std::vector<std::string> errors;       // each names its YAML path first
  std::shared_ptr<const Config> config;  // set when there are no errors
  bool ok() const { return errors.empty(); }
};

inline constexpr size_t kMaxValidationErrors = 50;

ConfigValidation validate_config_text(const std::string& yaml_text);
// Reads the file; a file that cannot be read is one error.
ConfigValidation validate_config_file(const std::string& path);

}  // namespace sluice
