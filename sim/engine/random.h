// Seeded random numbers, portable bit-for-bit: std::mt19937_64 is specified exactly by the C++
// standard, but std::normal_distribution and friends are not (libstdc++ and libc++ differ), so
// the transforms here are our own. Every draw comes from an Rng passed in, never a global.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>

namespace rlsim::sim {

/// SplitMix64 finaliser (Steele, Lea, Flood 2014): derives independent seeds for sub-streams.
inline std::uint64_t mix_seed(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// A seeded generator with portable uniform and normal draws.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(mix_seed(seed)) {}

  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [lo, hi] (inclusive); requires lo <= hi.
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    return lo + static_cast<std::int64_t>(gen_() % span);  // modulo bias < 2^-40 for spans < 2^24
  }

  /// Standard normal by the Box-Muller transform (one value per call, no cached pair).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2);
  }

 private:
  std::mt19937_64 gen_;
};

}  // namespace rlsim::sim
