// GPU-resident LoRA adapters of one engine.
//
// At most `capacity` (max_loras) adapters are resident; only resident adapters can be in a batch,
// so a batch never mixes more than max_loras adapters. Making an adapter resident costs a load
// (the engine adds the configured load latency to the step that loads it). When no slot is free,
// the least recently used adapter that no running request uses is evicted; when every resident
// adapter is in use, the request must wait.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::engine {

class LoraSlots {
 public:
  explicit LoraSlots(int capacity) : capacity_(capacity > 0 ? capacity : 0) {}

  bool resident(std::string_view name) const { return find(name) >= 0; }

  // True when `name` is resident or a slot can be made for it. `in_use(name)` tells whether a
  // running request uses an adapter (such adapters are never evicted).
  bool can_admit(std::string_view name, const std::function<bool(std::string_view)>& in_use) const {
    if (resident(name)) return true;
    if (static_cast<int>(slots_.size()) < capacity_) return true;
    for (const auto& s : slots_)
      if (!in_use(s.name)) return true;
    return false;
  }

  // Makes `name` resident (evicting the LRU idle adapter if needed) and marks it used at `tick`.
  // Returns true when this needed a load. Call only after can_admit() returned true.
  bool admit(std::string_view name, uint64_t tick, const std::function<bool(std::string_view)>& in_use) {
    const int i = find(name);
    if (i >= 0) {
      slots_[static_cast<size_t>(i)].last_use = tick;
      return false;
    }
    if (static_cast<int>(slots_.size()) >= capacity_) {
      int victim = -1;
      for (int j = 0; j < static_cast<int>(slots_.size()); ++j) {
        const auto& s = slots_[static_cast<size_t>(j)];
        if (in_use(s.name)) continue;
        if (victim < 0 || s.last_use < slots_[static_cast<size_t>(victim)].last_use) victim = j;
      }
      if (victim < 0) return false;
      slots_.erase(slots_.begin() + victim);
      ++evictions_;
    }
    slots_.push_back({std::string(name), tick});
    ++loads_;
    return true;
  }

  // Drops a resident adapter (unload). Returns false if it was not resident.
  bool evict(std::string_view name) {
    const int i = find(name);
    if (i < 0) return false;
    slots_.erase(slots_.begin() + i);
    return true;
  }

  std::vector<std::string> resident_names() const {
    std::vector<std::string> out;
    for (const auto& s : slots_) out.push_back(s.name);
    return out;
  }
  int capacity() const { return capacity_; }
  int64_t loads() const { return loads_; }
  int64_t evictions() const { return evictions_; }

 private:
  struct Slot {
    std::string name;
    uint64_t last_use = 0;
  };
  int find(std::string_view name) const {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].name == name) return static_cast<int>(i);
    return -1;
  }
  int capacity_;
  std::vector<Slot> slots_;
  int64_t loads_ = 0;
  int64_t evictions_ = 0;
};

}  // namespace sluice::engine
