// Simulated time: integer nanoseconds, so that event ordering never depends on floating-point
// rounding and two runs of the same scenario order events identically.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace rlsim::sim {

/// A point in simulated time, in nanoseconds since the start of the simulation.
using TimeNs = std::int64_t;

inline constexpr TimeNs kNsPerSecond = 1'000'000'000;
inline constexpr TimeNs kTimeNever = std::numeric_limits<TimeNs>::max();

/// Converts a duration in seconds to nanoseconds, rounding to the nearest nanosecond.
/// Throws std::domain_error for a negative, NaN or unrepresentable (> ~292 years) duration.
inline TimeNs to_ns(double seconds) {
  if (!(seconds >= 0.0) || seconds > 9.2e9) {
    throw std::domain_error("duration out of range for integer nanoseconds");
  }
  return static_cast<TimeNs>(std::llround(seconds * 1e9));
}

/// Converts nanoseconds to seconds (exact up to 2^53 ns, about 104 days).
inline constexpr double to_seconds(TimeNs ns) { return static_cast<double>(ns) * 1e-9; }

}  // namespace rlsim::sim
