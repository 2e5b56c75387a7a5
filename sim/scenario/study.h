// Study files (SCENARIO.md, "Study files"): a base scenario and dotted scenario keys swept over lists
// of values, with an objective and constraints, read by `rlsim plan`. Read beside the scenario
// loader, with the same checked YAML reader (sim/scenario/yaml_map.h): every error names
// file:line:column.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/scenario/calibration.h"

namespace rlsim::sim {

/// One entry of a study's `sweep:`. Either one dotted key with a list of values
/// (`rollout.tensor_parallel: [1, 2, 4]`), or a named group of dotted keys swept together, the
/// i-th value of every key forming the group's i-th setting (`rollout_nodes: {placement.rollout_devices:
/// [8, 16], rollout.tensor_parallel: [8, 16]}`); groups are rlsim's extension of the study format,
/// for keys that only make sense together.
struct SweepAxis {
  std::string name;                              // the dotted key, or the group's name
  std::vector<std::string> keys;                 // the dotted keys it sets (one for a plain key)
  std::vector<std::vector<std::string>> values;  // values[i][k]: setting i of keys[k], as flow YAML
  std::vector<std::pair<int, int>> key_marks;    // (line, column) of each of `keys` in the study file, 1-based
  std::size_t size() const { return values.size(); }
  /// Setting i as a short label (plot ticks): the value of its first key.
  std::string label(std::size_t i) const;
};

/// What the ranking minimises.
enum class Objective { kStepTime, kDeviceHoursPerStep };

/// A point meets the constraints when every one that is set holds.
struct Constraints {
  bool fits_memory = true;                          // Default: true. The configuration fits device memory
  std::optional<double> max_step_time_s;            // Default: none. Mean step time (s)
  std::optional<double> max_device_hours_per_step;  // Default: none. Devices x mean step time / 3600
  std::optional<int> max_devices;                   // Default: none. Devices in the cluster
  bool precision_consistent = false;                // Default: false. Verify verdict must be "consistent"
};

/// A loaded, validated study.
struct Study {
  std::string file;                            // the study file as given
  std::string name;                            // `name:`. Default: the file name
  std::string base;                            // the base scenario's path (resolved against the study's folder)
  std::vector<SweepAxis> sweep;                // in file order; the first varies slowest
  Objective objective = Objective::kStepTime;  // Default: step_time
  Constraints constraints;
  std::vector<std::string> heatmap;  // two axis names. Default: the first two axes with more than one setting
  std::string out_dir;               // `output.dir`. Default: out/<study file stem>
  bool plots = true;                 // `output.plots`. Default: true
  std::vector<std::string> sets;     // "key=value" applied to every point before its sweep values
  /// Cost-model parameters of every point (`rlsim plan --calibration`); null: the built-in ones.
  std::shared_ptr<const Calibration> calibration;

  /// Number of points: the product of the axis sizes.
  std::size_t points() const;
  /// Every swept dotted key, in column order (the keys of each axis, in file order).
  std::vector<std::string> columns() const;
  /// The setting index of each axis at `point` (row-major, the last axis varies fastest).
  std::vector<std::size_t> coordinates(std::size_t point) const;
  /// (dotted key, value as flow YAML) of every swept key at `point`, in column order.
  std::vector<std::pair<std::string, std::string>> settings(std::size_t point) const;
  /// The "key=value" overrides of `point`: `sets`, then every swept key.
  std::vector<std::string> overrides(std::size_t point) const;
  /// The index in `sweep` of the axis called `name`; -1 when there is none.
  int axis_index(const std::string& name) const;
};

/// Most points a study may have (a larger product is reported as bad input).
inline constexpr std::size_t kMaxStudyPoints = 1'000'000;

/// Reads a study file. Keys: `base` (required, a scenario file relative to the study's folder),
/// `sweep` (required, non-empty: dotted key -> non-empty list without duplicates, or group name ->
/// mapping of dotted keys -> lists of one common length), `objective` (step_time |
/// device_hours_per_step), `constraints` (fits_memory, max_step_time (a time quantity),
/// max_device_hours_per_step (> 0), max_devices (>= 1), precision_consistent),
/// `plots: {heatmap: [AXIS, AXIS]}`, `output: {dir, plots}`, `name`; defaults as in Study.
/// Throws ScenarioError naming file:line:column and what was expected: unknown key, empty or
/// duplicate values, a key swept twice or inside another swept key, more than kMaxStudyPoints
/// points, unknown heatmap axis.
Study load_study(const std::string& path);

}  // namespace rlsim::sim
