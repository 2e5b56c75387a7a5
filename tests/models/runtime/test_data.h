// Seeded test data shared by the runtime tests (kernels, reload).
#pragma once

#include <cstddef>
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

}  // namespace rlsim::models::test_data
