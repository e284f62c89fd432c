// Time in the pure core is always passed in by the driver: the live gateway and the engine
// simulator pass a steady clock reading, the fleet simulator passes virtual time. Nothing under
// src/core reads a clock of its own.
#pragma once
#include <chrono>
#include <cstdint>

namespace sluice {

// Nanoseconds since the driver's epoch (steady clock start, or virtual time zero).
using Time = std::chrono::nanoseconds;
using Duration = std::chrono::nanoseconds;

constexpr double to_seconds(Duration d) { return std::chrono::duration<double>(d).count(); }
constexpr double to_millis(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }
constexpr Duration from_seconds(double s) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(s));
}
constexpr Duration from_millis(double ms) {
  return std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(ms));
}

}  // namespace sluice
