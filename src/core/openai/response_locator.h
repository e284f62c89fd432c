/*
 * ResponseLocator: where a stored Responses API response lives. vLLM keeps a stored response (the
 * conversation state a follow-up names with `previous_response_id`) in the memory of the engine
 * that produced it, so a follow-up must go back to that engine. The gateway learns the place from
 * its own traffic: when a response with store != false comes back, remember(id, {pool, address},
 * now); a follow-up calls find(id, now).
 *
 * Algorithm: a hash map from response id to its place plus an insertion-ordered list. An entry
 * lives `ttl` from when it was learned (a follow-up creates a new response id, learned in turn, so
 * a live conversation keeps moving forward); at most `capacity` entries are kept, the oldest
 * dropped first. Expired entries are dropped lazily, from the old end, on each call. Both bounds
 * together keep memory fixed whatever clients do: ~150 bytes per entry.
 * Defaults: capacity 100,000, ttl 1 hour.
 *
 * Thread-safe: one mutex, taken once per Responses API request (never per token). Time is passed in.
 */
#pragma once
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/time.h"

namespace sluice {

struct ResponseLocatorConfig {
  size_t capacity = 100000;
  Duration ttl = std::chrono::hours(1);
};

class ResponseLocator {
 public:
  struct Place {
    std::string pool;
    std::string address;   // the endpoint's host:port (stable across config reloads)
  };

  explicit ResponseLocator(ResponseLocatorConfig config = {}) : config_(config) {}

  // Learns (or relearns) where response `id` is stored.
  void remember(std::string_view id, Place place, Time now);
  // Where `id` is stored, or nullopt when unknown or expired.
  std::optional<Place> find(std::string_view id, Time now);
  size_t size() const;
  size_t evicted() const;  // entries dropped for capacity (not for age)

 private:
  struct Entry {
    Place place;
    Time learned{0};
    std::list<std::string>::iterator order;
  };
  void expire_locked(Time now);

  const ResponseLocatorConfig config_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> order_;  // ids, oldest first
  size_t evicted_ = 0;
};

}  // namespace sluice
