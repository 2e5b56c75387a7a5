#include "sim/scenario/distribution.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace rlsim::sim {

namespace {
double phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// E[min(X, max)] for X = exp(ln(median) + sigma Z); max <= 0 means no truncation.
double truncated_lognormal_mean(double median, double sigma, std::int64_t max) {
  const double full = median * std::exp(0.5 * sigma * sigma);
  if (max <= 0) return full;
  const double cap = static_cast<double>(max);
  if (sigma <= 0) return std::min(median, cap);
  const double mu = std::log(median), lc = std::log(cap);
  return full * phi((lc - mu - sigma * sigma) / sigma) + cap * (1.0 - phi((lc - mu) / sigma));
}
}  // namespace

double lognormal_median_for_mean(double mean, double sigma, std::int64_t max) {
  if (!(mean > 0) || (max > 0 && mean >= static_cast<double>(max))) {
    throw std::invalid_argument(fmt::format("a mean of {:g} tokens needs 0 < mean < max ({})", mean, max));
  }
  // The truncated mean increases monotonically with the median: bisect ln(median).
  double lo = std::log(mean) - 12.0 * (sigma + 1.0), hi = std::log(mean) + 12.0 * (sigma + 1.0);
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (truncated_lognormal_mean(std::exp(mid), sigma, max) < mean ? lo : hi) = mid;
  }
  return std::exp(0.5 * (lo + hi));
}

std::int64_t LengthDist::sample(Rng& rng) const {
  switch (kind) {
    case Kind::kFixed:
      return value;
    case Kind::kUniform:
      return rng.uniform_int(min, max);
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
    case Kind::kFixed:
      return static_cast<double>(value);
    case Kind::kUniform:
      return 0.5 * static_cast<double>(min + max);
    case Kind::kLognormal:
      return truncated_lognormal_mean(median, sigma, max);
    case Kind::kCsv:
      return static_cast<double>(std::accumulate(samples.begin(), samples.end(), std::int64_t{0})) /
             static_cast<double>(samples.size());
  }
  return 0;
}

std::int64_t LengthDist::upper_bound() const {
  switch (kind) {
    case Kind::kFixed:
      return value;
    case Kind::kUniform:
      return max;
    case Kind::kLognormal:
      return max > 0 ? max : static_cast<std::int64_t>(median * std::exp(6 * sigma));
    case Kind::kCsv:
      return *std::max_element(samples.begin(), samples.end());
  }
  return 0;
}

std::string LengthDist::describe() const {
  switch (kind) {
    case Kind::kFixed:
      return fmt::format("fixed {}", value);
    case Kind::kUniform:
      return fmt::format("uniform [{}, {}]", min, max);
    case Kind::kLognormal:
      return fmt::format("lognormal median {:g} sigma {:g} max {}", median, sigma, max);
    case Kind::kCsv:
      return fmt::format("csv {}:{} ({} rows)", file, column, samples.size());
  }
  return {};
}

}  // namespace rlsim::sim
