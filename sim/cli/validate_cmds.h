// `rlsim validate` and `rlsim calibrate`: the cost model against published RL runs
// (analysis/validation.h, analysis/calibrate.h).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace rlsim::cli {

struct ValidateOptions {
  std::vector<std::string> records;  // record files; empty: every record of the repository
  std::string out = "out/validate";
  std::string calibration;  // calibration file; empty: built-in
  int jobs = 0;             // records simulated in parallel; 0: all cores
  bool no_plots = false;
  bool quiet = false;
};

/// Simulates the records, prints the comparison and statistics, writes validation.csv and
/// parity.png. Returns 0 when every figure is within its band, 1 otherwise; throws
/// sim::ScenarioError (exit 2) for a bad record or calibration file.
int cmd_validate(const ValidateOptions& o, std::ostream& out, std::ostream& err);

struct CalibrateOptions {
  std::vector<std::string> records;  // empty: every record of the repository
  std::string out = "out/calibrate";
  std::string start;  // calibration to start from; empty: built-in
  int jobs = 0;
  bool no_loo = false;
  bool quiet = false;
  /// A verl console log: fit what this one run identifies (the phases of `records`' single
  /// scenario, from timing_s/gen, old_log_prob, ref, update_actor, step) starting from the
  /// built-in calibration, and print measured vs predicted per phase before and after.
  std::string verl_log;
};

/// Fits the parameters, prints them (value, bounds, prior, the records that constrain each), the
/// per-record errors of the fit and of leave-one-out, and writes calibration.yaml (the format
/// `--calibration` reads) and calibration.csv into the output directory. Returns 0.
int cmd_calibrate(const CalibrateOptions& o, std::ostream& out, std::ostream& err);

}  // namespace rlsim::cli
