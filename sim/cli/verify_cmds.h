// `rlsim verify` (the unified-precision condition of Jet-RL, models/graph) and
// `rlsim bench verify`.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace rlsim::cli {

/// Options of `rlsim verify`.
struct VerifyOptions {
  std::string scenario;          // scenario file; empty when --train / --infer are given
  std::vector<std::string> set;  // --set overrides of the scenario
  std::string train_graphml;     // --train A.graphml
  std::string infer_graphml;     // --infer B.graphml
  std::string json;              // --json FILE
  std::string dot_dir;           // --dot DIR: training.dot, inference.dot
  std::string graphml_dir;       // --graphml DIR: training.graphml, inference.graphml
  bool full = false;             // --full: DOT without collapsing repeated layers / experts
  bool quiet = false;            // print only the verdict line
  double vf2_budget_s = 10.0;    // --vf2-budget
};

/// Builds (from the scenario's model and recipes) or reads (GraphML) the training and inference
/// graphs, verifies them (models::verify), prints the verdict line "consistent: ..." or
/// "inconsistent: N mismatching edges ..." and the mismatch table grouped by operator kind, slot
/// and precisions with counts, and writes the requested JSON / DOT / GraphML files (each written
/// to a temporary name and renamed). Returns 0 when consistent, 1 when not. Throws
/// sim::ScenarioError for a bad scenario and models::GraphError for a bad graph (exit 2), and
/// std::runtime_error when an output cannot be written.
int cmd_verify(const VerifyOptions& o, std::ostream& out);

/// `rlsim bench verify`: builds and verifies deepseek-v3 and kimi-k2 (61 layers, routed experts as
/// vertices) under a consistent (fp8-block / fp8-block) and an inconsistent (bf16 / fp8-block)
/// pair on one core; prints vertices, edges, build and verify seconds (best of `repeat`).
int bench_verify(int repeat, std::ostream& out);

}  // namespace rlsim::cli
