// `rlsim calibrate`: fits the cost model's free parameters (sim/scenario/calibration.h) to the
// validation records by least squares on log error, with Eigen's Levenberg-Marquardt
// (unsupported/Eigen/NonLinearOptimization, Debian's libeigen3-dev), and checks the fit by
// leave-one-out: each record predicted by a refit without it (linearised: one Gauss-Newton step
// from the full fit with the record's residuals removed, from one Jacobian of all residuals).
//
// Residuals: ln(predicted / published) / 0.15 for every time figure of every record (step,
// phases, ratios of times), plus a weak prior ln(value / prior) / 0.7 per parameter, so that a
// parameter no record constrains stays at its documented prior instead of drifting. Every
// parameter is bounded (a logistic map of an unbounded variable onto [lower, upper]).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "analysis/validation.h"
#include "sim/scenario/calibration.h"

namespace rlsim::analysis {

/// One free parameter of the fit.
struct CalibrationParameter {
  std::string name;  // "devices.h20.compute", "training.megatron.moe", "rollout.vllm.iteration", ...
  double lower = 0, upper = 0;
  double prior = 0;  // documented starting value (public microbenchmarks or the old default)
  std::string unit;  // "" (fraction or count) or "s"
  std::function<double&(sim::Calibration&)> ref;
};

/// The parameters the records can constrain: the devices, training backends and rollout engines
/// they use, the MoE parameters when a record has an MoE model, and the per-step overhead.
std::vector<CalibrationParameter> calibration_parameters(const std::vector<ValidationRecord>& records);

/// Result of a fit.
struct CalibrationFit {
  sim::Calibration calibration;
  std::vector<double> values;                            // per parameter
  std::vector<std::vector<std::string>> constrained_by;  // per parameter: records whose figures move with it
  std::vector<FigureOutcome> outcomes;                   // every figure at the fitted values
  std::vector<FigureOutcome> loo;                        // time figures, each from a (linearised) refit without its record
  double cost = 0;                                       // final sum of squared residuals
  int iterations = 0;
  int evaluations = 0;
};

/// Options of a fit.
struct CalibrateOptions {
  int jobs = 1;  // threads simulating records in parallel
  bool leave_one_out = true;
  std::function<void(const std::string&)> progress;  // one line per stage (may be empty)
};

/// Fits `params` over `records`, starting from `start`. Deterministic for a given input (the
/// records are simulated in a fixed order whatever `jobs`).
CalibrationFit calibrate(const std::vector<ValidationRecord>& records, const std::vector<CalibrationParameter>& params,
                         const sim::Calibration& start, const CalibrateOptions& options);

}  // namespace rlsim::analysis
