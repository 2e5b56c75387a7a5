// `rlsim plan` (capacity-planning studies, analysis/plan) and `rlsim bench plan`.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

namespace rlsim::cli {

/// Options of `rlsim plan`.
struct PlanOptions {
  std::string study;                 // study file (SCENARIO.md, "Study files")
  std::string out;                   // output folder; default: the study's output.dir, else out/<study stem>
  int jobs = 0;                      // worker threads per process; 0: all cores (under MPI: cores / ranks on the node)
  std::vector<std::string> set;      // "dotted.key=value" applied to every point (e.g. steps=1)
  std::vector<std::string> heatmap;  // one or two sweep keys for the heatmap axes
  std::size_t top = 20;              // ranked rows printed (0: all)
  bool no_plots = false;
  bool quiet = false;       // print only the recommended line
  std::string calibration;  // calibration file (rlsim calibrate's output); empty: built-in
};

/// `rlsim plan`: loads the study, simulates its points on `jobs` threads (and, when launched by
/// mpirun in an MPI build, split across the ranks, gathered on rank 0, which alone writes and
/// prints), ranks them and writes results.csv, plan.json and the plots. Prints the ranked table and
/// `recommended: KEY=VALUE ...` to `out`, progress to `err`. Returns 0 (also when no point meets
/// the constraints: `recommended: none`); throws sim::ScenarioError (exit 2) for a bad study, a bad
/// base scenario or an unknown key.
int cmd_plan(const PlanOptions& o, std::ostream& out, std::ostream& err);

/// `rlsim bench plan`: a built-in 1,000-point study of Qwen3-8B (5 devices x 1-8 nodes of 8 x 5
/// rollout precisions x 5 rollout tensor-parallel sizes, up to 64 devices), timed `repeat` times
/// on `jobs` threads (0: all cores); prints points/s per run and the best wall time against the
/// target (under 60 s on 2 cores).
int bench_plan(int jobs, int repeat, std::ostream& out);

}  // namespace rlsim::cli
