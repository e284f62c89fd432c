#include "core/openai/response_locator.h"

namespace sluice {

void ResponseLocator::expire_locked(Time now) {
  while (!order_.empty()) {
    auto it = entries_.find(order_.front());
    if (it != entries_.end() && now - it->second.learned < config_.ttl) break;
    if (it != entries_.end()) entries_.erase(it);
    order_.pop_front();
  }
}

void ResponseLocator::remember(std::string_view id, Place place, Time now) {
  if (config_.capacity == 0) return;
  std::lock_guard lock(mu_);
  expire_locked(now);
  std::string key(id);
  if (auto it = entries_.find(key); it != entries_.end()) {
    order_.erase(it->second.order);
    entries_.erase(it);
  }
  while (entries_.size() >= config_.capacity && !order_.empty()) {
    entries_.erase(order_.front());
    order_.pop_front();
    ++evicted_;
  }
  order_.push_back(key);
  entries_.emplace(std::move(key), Entry{std::move(place), now, std::prev(order_.end())});
}

std::optional<ResponseLocator::Place> ResponseLocator::find(std::string_view id, Time now) {
  std::lock_guard lock(mu_);
  expire_locked(now);
  auto it = entries_.find(std::string(id));
  if (it == entries_.end()) return std::nullopt;
  return it->second.place;
}

size_t ResponseLocator::size() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

size_t ResponseLocator::evicted() const {
  std::lock_guard lock(mu_);
  return evicted_;
}

}  // namespace sluice
