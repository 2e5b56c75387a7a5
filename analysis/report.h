// Outputs of `rlsim run` (SCENARIO.md, "Outputs"): summary.json, steps.csv, phases.csv,
// memory.csv, requests.csv, trace.json (Chrome trace), timeline.png, memory.png, and the
// human-readable summary on stdout. Public header of analysis/.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "sim/engine/trace.h"
#include "sim/pipeline/pipeline.h"
#include "sim/scenario/scenario.h"

namespace rlsim::analysis {

/// Unified-precision verdict of a scenario's recipes (check_precision_flow): an analysis of the
/// scenario, kept beside the simulation's result rather than in it.
struct PrecisionFlowVerdict {
  std::string verdict = "not-checked";  // consistent | inconsistent | not-checked
  std::size_t mismatches = 0;
  std::vector<std::pair<std::string, std::size_t>> groups;  // "kind tensor" -> mismatching edges
};

/// The figures of one run, computed once from the scenario and the simulation: summary.json, the
/// stdout summary and a `rlsim plan` row are all written from it. Times in seconds, memory in
/// bytes per device; means are over the simulated steps.
struct RunSummary {
  std::string scenario;
  int steps = 0;
  bool fits = true;
  double step_time_mean_s = 0, step_time_max_s = 0;
  std::vector<sim::Phase> phases;  // the run's phases (sim::phases_of), in output order
  sim::PhaseSeconds phase_mean_s, phase_max_s;
  double rollout_share = 0;           // mean rollout phase / mean step
  double generated_tokens_per_s = 0;  // tokens of the consumed batches / summed step time
  double peak_rollout_bytes = 0, peak_training_bytes = 0, device_memory_bytes = 0;
  double peak_critic_bytes = 0, peak_reward_model_bytes = 0, peak_reference_bytes = 0;  // separate groups only; else 0
  PrecisionFlowVerdict verify;
  std::vector<std::string> warnings;
  std::optional<sim::OomReport> oom;
  std::int64_t preemptions = 0;
  std::string bottleneck;  // the longest phase, its share of the step and why
  // The rollout engines.
  int engines = 0;
  int rollout_tensor_parallel = 0;
  int rollout_data_parallel = 1;    // attention DP ranks per engine (written when > 1)
  int rollout_expert_parallel = 1;  // written with data_parallel
  std::string rollout_precision, kv_cache, compute_type;
  double rollout_weight_bytes_per_device = 0, kv_capacity_tokens_per_engine = 0;
  int max_running_sequences = 0;
  bool kv_limited = false;
  sim::SyncTimes weight_sync;
  double rollout_idle_ratio = 0, trainer_idle_ratio = 0;
  // Off-policyness of the consumed samples.
  double staleness_mean = 0;
  int staleness_max = 0;
  double stale_fraction = 0;
  std::int64_t partial_rollout_interruptions = 0;
  std::int64_t tokens_generated = 0, tokens_recomputed = 0, left_in_flight_sequences = 0;
  std::uint64_t events = 0;
  std::string schedule, placement;
};

/// Summarises a run; `flow` becomes its verify entry, r.warnings its warnings.
RunSummary summarize(const sim::Scenario& s, const sim::SimResult& r, PrecisionFlowVerdict flow = {});

/// The summary object of summary.json (keys of SCENARIO.md plus rlsim's own extras).
nlohmann::json summary_json(const RunSummary& sum);

/// Prints the per-phase breakdown, step time, rollout share, tokens/s, memory per role against
/// capacity, the bottleneck, the precision-flow verdict and warnings.
void print_summary(std::ostream& out, const sim::Scenario& s, const RunSummary& sum);

/// Simulates `s` and writes every output file into `dir` (SCENARIO.md, "Outputs"): requests.csv
/// and trace.json are streamed as the simulation runs, so memory stays bounded by the requests
/// in flight; the aggregates (steps, phases, memory, summary, plots) follow at its end. All goes
/// into a sibling temporary directory renamed over `dir` (write_directory), so a reader sees the
/// previous output or the whole new one. Plots are drawn only when `s.output.plots` and gnuplot
/// is installed (a warning is added otherwise). Returns the summary written to summary.json.
/// Throws OutputError on an I/O failure, sim::Interrupted on a stop request, ScenarioError for
/// a scenario the simulator cannot represent; the temporary directory is removed in each case.
RunSummary run_to_directory(const std::string& dir, const sim::Scenario& s, const PrecisionFlowVerdict& flow,
                            const sim::ProgressFn& progress = {});

/// Verifies the scenario's precision flow (models/graph: the training recipe's forward graph
/// against the rollout recipe's inference graph with its KV-cache format): the verdict and the
/// mismatch counts per operator kind and slot.
PrecisionFlowVerdict check_precision_flow(const sim::Scenario& s);

/// The rollout recipe as the engine runs it: the scenario's recipe with rollout.kv_cache applied.
models::Recipe rollout_recipe(const sim::Scenario& s);

/// Derived per-run warnings (KV-limited batch, preemptions, truncated responses, ...).
void add_warnings(const sim::Scenario& s, sim::SimResult& r);

}  // namespace rlsim::analysis
