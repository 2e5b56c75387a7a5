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

/// The summary object of summary.json (keys of SCENARIO.md plus rlsim's own extras).
nlohmann::json summary_json(const sim::Scenario& s, const sim::SimResult& r);

/// Prints the per-phase breakdown, step time, rollout share, tokens/s, memory per role against
/// capacity, the bottleneck and warnings.
void print_summary(std::ostream& out, const sim::Scenario& s, const sim::SimResult& r);

/// Writes every output file into `dir`: first into a sibling temporary directory, then renamed
/// over `dir` (an existing `dir` is replaced), so a reader never sees a half-written set.
/// Plots are drawn only when `plots` and gnuplot is installed (a warning is added otherwise).
/// Throws std::runtime_error on I/O failure (the temporary directory is removed).
void write_outputs(const std::string& dir, const sim::Scenario& s, sim::SimResult& r, const sim::RecordingSink& trace);

/// Chrome trace JSON (an object with "traceEvents"; opens in Perfetto / chrome://tracing).
std::string chrome_trace(const sim::Scenario& s, const sim::SimResult& r, const sim::RecordingSink& trace);

/// Verifies the scenario's precision flow (models/graph: the training recipe's forward graph
/// against the rollout recipe's inference graph with the scenario's KV-cache format) and stores
/// the verdict and mismatch counts per operator kind and slot in r.precision_flow.
void check_precision_flow(const sim::Scenario& s, sim::SimResult& r);

/// The rollout recipe as the engine runs it: the scenario's recipe with rollout.kv_cache applied.
models::Recipe rollout_recipe(const sim::Scenario& s);

/// Derived per-run warnings (KV-limited batch, preemptions, truncated responses, ...).
void add_warnings(const sim::Scenario& s, sim::SimResult& r);

}  // namespace rlsim::analysis
