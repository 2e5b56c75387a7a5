#include "sim/scenario/distribution.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace rlsim::sim {

std::int64_t LengthDist::sample(Rng& rng) const {
  switch (kind) {
    case Kind::kFixed: return value;
    case Kind::kUniform: return rng.uniform_int(min, max);
    case Kind::kLognormal: {
      const double x = std::exp(std::log(median) + sigma * rng.normal());
      auto n = static_cast<std::int64_t>(std::llround(x));
      n = std::max<std::int64_t>(n, 1);
      if (max > 0) n = std::min(n, max);
      return n;
    }
    case Kind::kCsv:
      return samples[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(samples.size()) - 1))];
  }
  return 1;
}

double LengthDist::mean() const {
  switch (kind) {
    case Kind::kFixed: return static_cast<double>(value);
    case Kind::kUniform: return 0.5 * static_cast<double>(min + max);
    case Kind::kLognormal: {
      const double m = median * std::exp(0.5 * sigma * sigma);
      return max > 0 ? std::min(m, static_cast<double>(max)) : m;
    }
    case Kind::kCsv:
      return static_cast<double>(std::accumulate(samples.begin(), samples.end(), std::int64_t{0})) /
             static_cast<double>(samples.size());
  }
  return 0;
}

std::int64_t LengthDist::upper_bound() const {
  switch (kind) {
    case Kind::kFixed: return value;
    case Kind::kUniform: return max;
    case Kind::kLognormal: return max > 0 ? max : static_cast<std::int64_t>(median * std::exp(6 * sigma));
    case Kind::kCsv: return *std::max_element(samples.begin(), samples.end());
  }
  return 0;
}

std::string LengthDist::describe() const {
  switch (kind) {
    case Kind::kFixed: return fmt::format("fixed {}", value);
    case Kind::kUniform: return fmt::format("uniform [{}, {}]", min, max);
    case Kind::kLognormal: return fmt::format("lognormal median {:g} sigma {:g} max {}", median, sigma, max);
    case Kind::kCsv: return fmt::format("csv {}:{} ({} rows)", file, column, samples.size());
  }
  return {};
}

}  // namespace rlsim::sim
