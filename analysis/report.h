// Outputs of `rlsim run` (SCENARIO.md, "Outputs"): summary.json, steps.csv, phases.csv,
// memory.csv, requests.csv, trace.json (Chrome trace), timeline.png, memory.png, and the
// human-readable summary on stdout. Public header of analysis/.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>

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

/// The summary object of summary.json (keys of SCENARIO.md plus rlsim's own extras); `flow` is
/// its "verify" entry.
nlohmann::json summary_json(const sim::Scenario& s, const sim::SimResult& r, const PrecisionFlowVerdict& flow = {});

/// Prints the per-phase breakdown, step time, rollout share, tokens/s, memory per role against
/// capacity, the bottleneck, the precision-flow verdict and warnings.
void print_summary(std::ostream& out, const sim::Scenario& s, const sim::SimResult& r, const PrecisionFlowVerdict& flow);

/// Writes every output file into `dir`: first into a sibling temporary directory, then renamed
/// over `dir` (an existing `dir` is replaced), so a reader never sees a half-written set.
/// Plots are drawn only when `plots` and gnuplot is installed (a warning is added otherwise).
/// Throws std::runtime_error on I/O failure (the temporary directory is removed).
void write_outputs(const std::string& dir, const sim::Scenario& s, sim::SimResult& r, const PrecisionFlowVerdict& flow,
                   const sim::RecordingSink& trace);

/// Chrome trace JSON (an object with "traceEvents"; opens in Perfetto / chrome://tracing).
std::string chrome_trace(const sim::Scenario& s, const sim::SimResult& r, const sim::RecordingSink& trace);

/// Verifies the scenario's precision flow (models/graph: the training recipe's forward graph
/// against the rollout recipe's inference graph with its KV-cache format): the verdict and the
/// mismatch counts per operator kind and slot.
PrecisionFlowVerdict check_precision_flow(const sim::Scenario& s);

/// The rollout recipe as the engine runs it: the scenario's recipe with rollout.kv_cache applied.
models::Recipe rollout_recipe(const sim::Scenario& s);

/// Derived per-run warnings (KV-limited batch, preemptions, truncated responses, ...).
void add_warnings(const sim::Scenario& s, sim::SimResult& r);

}  // namespace rlsim::analysis
