// Capacity planning (`rlsim plan`): a study file (SCENARIO.md, "Study files") sweeps dotted
// scenario keys over a base scenario; every point of the cartesian product is simulated, checked
// against the study's constraints and ranked by its objective. Outputs: results.csv, plan.json,
// a step-time heatmap, a memory-fit map and the Pareto front of step time vs device-hours.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "analysis/report.h"
#include "sim/pipeline/pipeline.h"
#include "sim/scenario/calibration.h"
#include "sim/scenario/scenario.h"
#include "sim/scenario/study.h"

namespace rlsim::analysis {

using sim::Constraints;
using sim::kMaxStudyPoints;
using sim::load_study;
using sim::Objective;
using sim::Study;
using sim::SweepAxis;

/// Throws sim::ScenarioError when a key of the study, of its `sets` or of its base scenario is not
/// a scenario key. Keys are the same at every point, so it loads point 0 (without simulating it).
/// The message names the study file's line of a swept key ("study.yaml:5:1: sweep KEY=VALUE:
/// unknown key ..."), "--set KEY=VALUE" for one of `sets`, or the base file's position. An invalid
/// value at point 0 is not an error here (the point is recorded as invalid).
void check_study_keys(const Study& study);

/// The simulated outcome of one point, and (after rank_points) its place in the ranking.
struct PointResult {
  std::size_t index = 0;
  bool valid = false;  // false: the point failed validation (error says why) and was skipped
  std::string error;
  int steps = 0;           // steps simulated
  double step_time_s = 0;  // mean over steps
  double step_time_max_s = 0;
  std::vector<double> phase_s;  // mean wall time per phase, in sim::kPhases order
  /// The point's phases (sim::phases_of its scenario; a GRPO scenario's when it did not load):
  /// plan.csv has a column for every phase some point has, points.json lists each point's own.
  std::vector<sim::Phase> phases = sim::phases_of(sim::Scenario{});
  double rollout_share = 0;
  double generated_tokens_per_s = 0;
  double peak_rollout_bytes = 0;   // per device
  double peak_training_bytes = 0;  // per device
  double device_memory_bytes = 0;
  bool fits = false;
  std::string oom_role;  // "rollout" | "training" when it does not fit
  std::string oom_reason;
  int devices = 0;  // devices in the cluster
  double device_hours_per_step = 0;
  std::string verify = "not-checked";  // consistent | inconsistent
  std::size_t verify_mismatches = 0;
  // Filled by rank_points():
  bool meets = false;                   // valid and every constraint holds
  std::vector<std::string> violations;  // names of the constraints that fail ("invalid" for a skipped point)
  int rank = 0;                         // 1 = recommended; 0 when it does not meet the constraints
  bool pareto = false;                  // on the step time vs device-hours front of the points that fit
};

/// Precision-flow verdicts shared by the points of a study: the verdict depends only on the model
/// and the two recipes, and a large model's graphs take about a second to verify. Thread-safe.
class VerifyCache {
 public:
  /// The verdict of `s`'s recipes (analysis::check_precision_flow), computed once per distinct
  /// (model, training recipe, rollout recipe, KV cache).
  PrecisionFlowVerdict verdict(const sim::Scenario& s);

 private:
  struct Entry {
    std::once_flag once;
    PrecisionFlowVerdict flow;
  };
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
};

/// Loads point `index` of the study (base + overrides), simulates it without a trace and fills a
/// PointResult. A validation failure (sim::ScenarioError) is recorded as an invalid point, its
/// message naming the override ("sweep KEY=VALUE: ..." or "--set KEY=VALUE: ..."); an unknown key
/// is rethrown as sim::ScenarioKeyError with the message of check_study_keys. Deterministic: the
/// result depends only on the study and `index`.
PointResult evaluate_point(const Study& study, std::size_t index, VerifyCache& cache);

/// Evaluates `indices` on `jobs` threads (>= 1). `progress(done)` is called from the calling
/// thread about once a second. The result is in the order of `indices`, whatever the job count.
/// Throws the first (lowest-index) sim::ScenarioKeyError any point raised.
std::vector<PointResult> evaluate_points(const Study& study, const std::vector<std::size_t>& indices, int jobs,
                                         const std::function<void(std::size_t done)>& progress = {});

/// Checks every point against the constraints, ranks those that meet them by the objective (ties:
/// the other metric, then the point index), and marks the Pareto front (minimal step time and
/// device-hours per step) of the valid points that fit. `results` must hold every point in
/// index order.
void rank_points(const Study& study, std::vector<PointResult>& results);

/// The recommended point (rank 1), if any point meets the constraints.
const PointResult* recommended(const std::vector<PointResult>& results);

/// "KEY=VALUE KEY=VALUE ..." of a point's swept keys.
std::string point_settings(const Study& study, std::size_t index);

/// results.csv: one row per point, in index order. Columns: point, every swept dotted key,
/// status (ok | invalid), step_time_s, step_time_max_s, <phase>_s for each phase, rollout_share,
/// generated_tokens_per_s, peak_memory_rollout_bytes, peak_memory_training_bytes,
/// device_memory_bytes, fits (true | false), oom_role, devices, device_hours_per_step, verify,
/// verify_mismatches, meets_constraints (true | false), violations (';'-separated constraint names),
/// rank (1 = recommended; empty when the point does not meet the constraints), pareto (true |
/// false), oom_reason, error (why an invalid point was skipped). Times of a point that could not
/// start (its rollout does not fit) are empty.
std::string results_csv(const Study& study, const std::vector<PointResult>& results);

/// plan.json: the study (file, base, sweep, objective, constraints), counts, the recommended point
/// with its settings and metrics (null when none), and the Pareto front's point indices.
nlohmann::json plan_json(const Study& study, const std::vector<PointResult>& results);

/// The ranked table (the `top` best points meeting the constraints, 0 = all; then the rest and the
/// invalid points, counted, with the first few reasons), then `recommended: KEY=VALUE ...` or
/// `recommended: none (...)`.
void print_ranking(std::ostream& out, const Study& study, const std::vector<PointResult>& results, std::size_t top);

/// Writes results.csv, plan.json and (when study.plots and gnuplot is installed) step_time_heatmap.png,
/// fit_map.png and pareto.png into `dir`, all at once (write_directory). Plots that cannot be drawn
/// are reported in `warnings`. Throws std::runtime_error on I/O failure.
void write_plan_outputs(const std::string& dir, const Study& study, const std::vector<PointResult>& results,
                        std::vector<std::string>* warnings);

/// PointResult to and from JSON (exact: doubles round-trip), for gathering points across MPI ranks.
nlohmann::json point_to_json(const PointResult& p);
PointResult point_from_json(const nlohmann::json& j);

}  // namespace rlsim::analysis
