#include "core/epp/epp_protocol.h"

#include <algorithm>
#include <charconv>

namespace sluice::epp {

std::string_view dropped_reason(RejectReason r) {
  switch (r) {
    case RejectReason::shed:
    case RejectReason::over_slo:
    case RejectReason::queue_full: return kDroppedSaturated;
    case RejectReason::queue_timeout: return kDroppedTtlExpired;
    case RejectReason::rate_limit: return kDroppedRateLimited;
    case RejectReason::too_large: return kDroppedTooLarge;
    case RejectReason::unauthorized: return "rejected-unauthorized";
  }
  return kDroppedSaturated;
}

std::optional<int> objective_priority(std::string_view v, const ExtProcConfig& cfg) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  if (v.empty()) return std::nullopt;
  if (auto it = cfg.objectives.find(v); it != cfg.objectives.end()) return it->second;
  int p = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), p);
  if (ec == std::errc() && end == v.data() + v.size() && p >= -1000000 && p <= 1000000) return p;
  return std::nullopt;
}

std::vector<std::string> split_endpoints(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    size_t start = 0;
    while (start <= v.size()) {
      size_t comma = v.find(',', start);
      if (comma == std::string::npos) comma = v.size();
      std::string_view item(v.data() + start, comma - start);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (!item.empty()) out.emplace_back(item);
      start = comma + 1;
    }
  }
  return out;
}

std::vector<size_t> restrict_to_subset(const std::vector<std::string_view>& ranked, const std::vector<std::string>* subset) {
  std::vector<size_t> out;
  out.reserve(ranked.size());
  for (size_t i = 0; i < ranked.size(); ++i)
    if (!subset || std::find(subset->begin(), subset->end(), ranked[i]) != subset->end()) out.push_back(i);
  return out;
}

std::string destination_list(const std::vector<std::string_view>& ranked, const std::vector<size_t>& allowed, size_t n) {
  std::string out;
  for (size_t k = 0; k < allowed.size() && k < n; ++k) {
    if (k) out += ',';
    out += ranked[allowed[k]];
  }
  return out;
}

std::optional<PathKind> path_kind(std::string_view path) {
  if (auto q = path.find('?'); q != std::string_view::npos) path = path.substr(0, q);
  if (path.starts_with("/v1/")) path.remove_prefix(3);
  if (path == "/chat/completions") return PathKind::chat;
  if (path == "/completions") return PathKind::completion;
  if (path == "/embeddings") return PathKind::embedding;
  return std::nullopt;
}

}  // namespace sluice::epp
