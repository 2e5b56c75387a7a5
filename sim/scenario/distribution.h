// Token-length distributions of a workload (prompt and response lengths), SCENARIO.md:
// {dist: fixed, value: N} | {dist: uniform, min: A, max: B}
// | {dist: lognormal, median: M, sigma: S, max: X} | {dist: csv, file: F, column: C}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/engine/random.h"

namespace rlsim::sim {

struct LengthDist {
  enum class Kind { kFixed, kUniform, kLognormal, kCsv };
  Kind kind = Kind::kFixed;
  std::int64_t value = 0;       // fixed
  std::int64_t min = 1;         // uniform (inclusive)
  std::int64_t max = 0;         // uniform upper bound; lognormal truncation (0 = none)
  double median = 0;            // lognormal: exp(mu)
  double sigma = 0;             // lognormal: std-dev of the log
  std::string file, column;     // csv (file resolved relative to the scenario)
  std::vector<std::int64_t> samples;  // csv: the column's values, in file order

  /// Draws one length in tokens (>= 1). Lognormal draws exp(ln(median) + sigma Z), rounded, and
  /// truncated to `max` as a generation limit truncates a response (max_response_length);
  /// csv draws a row uniformly (bootstrap of a measured length trace).
  std::int64_t sample(Rng& rng) const;

  /// Mean of the distribution (lognormal: untruncated median * exp(sigma^2 / 2), capped at max).
  double mean() const;

  /// Largest value the distribution can produce.
  std::int64_t upper_bound() const;

  std::string describe() const;
};

}  // namespace rlsim::sim
