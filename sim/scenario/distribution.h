// Token-length distributions of a workload (prompt and response lengths), SCENARIO.md:
// {dist: fixed, value: N} | {dist: uniform, min: A, max: B}
// | {dist: lognormal, median: M, sigma: S, max: X} | {dist: lognormal, mean: A, sigma: S, max: X}
// | {dist: csv, file: F, column: C}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/engine/random.h"

namespace rlsim::sim {

struct LengthDist {
  enum class Kind { kFixed, kUniform, kLognormal, kCsv };
  Kind kind = Kind::kFixed;
  std::int64_t value = 0;             // fixed
  std::int64_t min = 1;               // uniform (inclusive)
  std::int64_t max = 0;               // uniform upper bound; lognormal truncation (0 = none)
  double median = 0;                  // lognormal: exp(mu)
  double sigma = 0;                   // lognormal: std-dev of the log
  std::string file, column;           // csv (file resolved relative to the scenario)
  std::vector<std::int64_t> samples;  // csv: the column's values, in file order

  /// Draws one length in tokens (>= 1). Lognormal draws exp(ln(median) + sigma Z), rounded, and
  /// truncated to `max` as a generation limit truncates a response (max_response_length);
  /// csv draws a row uniformly (bootstrap of a measured length trace).
  std::int64_t sample(Rng& rng) const;

  /// Mean of the distribution; a lognormal truncated at `max` has the mean of min(X, max):
  /// e^(mu + s^2/2) Phi((ln max - mu - s^2) / s) + max (1 - Phi((ln max - mu) / s)).
  double mean() const;

  /// Largest value the distribution can produce.
  std::int64_t upper_bound() const;

  std::string describe() const;
};

/// The median of a lognormal with log-spread `sigma` truncated at `max` (0: none) whose mean is
/// `mean` tokens: the scenario form {dist: lognormal, mean: A, sigma: S, max: X}, for published
/// runs that give only a mean response length. Solved by bisection on ln(median); throws
/// std::invalid_argument when no median gives that mean (mean >= max, or mean <= 0).
double lognormal_median_for_mean(double mean, double sigma, std::int64_t max);

}  // namespace rlsim::sim
