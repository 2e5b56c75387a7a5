// Validation records (`rlsim validate`, `rlsim calibrate`): a scenario that mirrors a published
// RL run, plus a `validation:` block with the figures that run published (step time, a phase, a
// peak memory, or a ratio between two records), where they come from, the tolerance they must be
// met within, and every assumption the scenario makes where the source is silent:
//
//   validation:
//     source: "NVIDIA-NeMo/RL docs/about/performance-summary.md, v0.4 GRPO table, LLAMA3.1_8B on-policy"
//     assumptions: ["prompt ~130 tokens: tokens/s/GPU x GPUs x step / sequences - mean generation"]
//     figures:
//       - {figure: step_time, published: 97.7 s, tolerance: 0.15}
//       - {figure: phase.rollout, published: 321 s, tolerance: 0.30}
//       - {figure: peak_memory.training, published: 66 GB, tolerance: 0.15}
//       - {figure: step_time, ratio_to: other-record, published: 0.37, tolerance: 0.20}
//
// A record is any scenario file carrying that block: the ready scenarios in scenarios/ and the
// records in scenarios/validation/. The record's name is its file stem.
#pragma once

#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "sim/pipeline/pipeline.h"
#include "sim/scenario/calibration.h"
#include "sim/scenario/scenario.h"

namespace rlsim::analysis {

/// One published figure of a record.
struct PublishedFigure {
  /// step_time | phase.<rollout|old_logprob|reference|actor_update|weight_sync|offload> |
  /// rollout_share | peak_memory.<rollout|training>
  std::string figure;
  std::string ratio_to;  // another record's name: the figure is this record's / that one's
  double published = 0;  // seconds, bytes, or a plain ratio / share
  double tolerance = 0;  // the band: |predicted / published - 1| <= tolerance
  int line = 0;          // 1-based line in the record file
  /// Whether the figure is a time (step or phase), the figures the acceptance statistics use.
  bool is_time() const { return figure == "step_time" || figure.starts_with("phase."); }
  /// "step_time", or "step_time / OTHER" for a ratio.
  std::string label() const { return ratio_to.empty() ? figure : figure + " / " + ratio_to; }
};

/// A loaded validation record.
struct ValidationRecord {
  std::string name;  // file stem
  std::string file;
  std::string source;
  std::vector<std::string> assumptions;
  std::vector<PublishedFigure> figures;
  sim::Scenario scenario;  // loaded with the calibration it was given
};

/// Whether the scenario file at `path` carries a `validation:` block (syntax errors: false; the
/// loader reports them when the file is loaded).
bool has_validation_block(const std::filesystem::path& path);

/// The records of the repository: every `*.yaml` with a `validation:` block in `scenarios_dir`
/// and in `scenarios_dir/validation`, sorted by name.
std::vector<std::string> repository_records(const std::filesystem::path& scenarios_dir);

/// The repository's scenarios/ folder: ./scenarios when the working directory holds it, else the
/// source tree rlsim was built from.
std::filesystem::path default_scenarios_dir();

/// Loads a record. Throws sim::ScenarioError (file:line:column) for a bad scenario, a missing or
/// malformed `validation:` block, an unknown figure, a time or memory figure without its unit,
/// a tolerance outside (0, 1].
ValidationRecord load_record(const std::string& path, const sim::Calibration& calibration);

/// Every figure the cost model predicts for a simulated record (keys as PublishedFigure::figure):
/// times are steady-state means, over the steps after the first when there are two or more (the
/// first carries an off-policy schedule's pipeline fill; published figures average long runs).
std::map<std::string, double> simulated_figures(const sim::SimResult& r);

/// Simulates a scenario (no trace) and returns simulated_figures of the result; a configuration
/// that does not fit memory yields an empty map.
std::map<std::string, double> simulate_figures(const sim::Scenario& s);

/// Figures of records already simulated, by record index and the calibration_inputs they were
/// simulated with (the simulation is deterministic, so equal inputs give equal figures).
class RecordCache {
 public:
  explicit RecordCache(std::size_t records) : slots_(records) {}
  const std::map<std::string, double>* find(std::size_t record, const std::vector<double>& inputs) const;
  void put(std::size_t record, const std::vector<double>& inputs, std::map<std::string, double> figures);

 private:
  std::vector<std::map<std::vector<double>, std::map<std::string, double>>> slots_;
};

/// simulate_figures of every record whose `use` flag is set (all when `use` is empty), its
/// scenario re-calibrated with `calibration` when given, on `jobs` threads; results by record index.
/// With a `cache` (and a calibration), a record whose calibration_inputs were simulated before is
/// not simulated again. One thread handles a record at a time, so the cache needs no lock.
std::vector<std::map<std::string, double>> simulate_records(const std::vector<ValidationRecord>& records,
                                                            const sim::Calibration* calibration, int jobs,
                                                            const std::vector<bool>& use = {}, RecordCache* cache = nullptr);

/// One figure compared.
struct FigureOutcome {
  std::string record, figure, source;
  double predicted = 0, published = 0, tolerance = 0;
  double error = 0;  // predicted / published - 1
  bool in_band = false;
  bool is_time = false;
};

/// Compares every figure of `records` with the simulated figures (`sim[i]` for records[i]).
/// A ratio to a record not in `records` throws sim::ScenarioError naming the figure's line; a
/// record that does not fit memory counts every figure as out of band (predicted 0).
std::vector<FigureOutcome> compare(const std::vector<ValidationRecord>& records,
                                   const std::vector<std::map<std::string, double>>& sim);

/// Summary statistics of |error| over the time figures (step and phases) and the step figures.
struct ValidationStats {
  std::size_t figures = 0, out_of_band = 0;
  double step_median = 0, step_worst = 0;  // |error| of step_time figures (not ratios)
  double time_median = 0;                  // |error| of every time figure
};
ValidationStats validation_stats(const std::vector<FigureOutcome>& outcomes);

/// Writes validation.csv (record,figure,predicted,published,error,band,in_band,source) and
/// parity.png (predicted vs published time figures, log-log, the y = x line and the +-15 % and
/// +-30 % bands) into `dir`, all at once. `plots` false: the CSV only.
void write_validation(const std::filesystem::path& dir, const std::vector<FigureOutcome>& outcomes, bool plots,
                      std::vector<std::string>* warnings);

/// Prints the comparison table and the statistics line.
void print_validation(std::ostream& out, const std::vector<FigureOutcome>& outcomes, const ValidationStats& st);

}  // namespace rlsim::analysis
