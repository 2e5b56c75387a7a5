// Seeded test data shared by the runtime tests (kernels, reload).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace rlsim::models::test_data {

/// n values N(0, sd^2) from std::mt19937(seed).
inline std::vector<float> normal(std::size_t n, unsigned seed, float sd) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(g);
  return v;
}

/// FNV-1a (64-bit) over the bits of the floats of v: golden hashes of kernel outputs.
inline std::uint64_t float_bits_hash(const std::vector<float>& v) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (float f : v) {
    const auto b = std::bit_cast<std::uint32_t>(f);
    for (int k = 0; k < 4; ++k) h = (h ^ ((b >> (8 * k)) & 0xFFu)) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace rlsim::models::test_data
