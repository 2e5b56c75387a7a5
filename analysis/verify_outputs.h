// The files of `rlsim verify`: the verdict as JSON, both graphs as Graphviz DOT and as GraphML.
#pragma once

#include <string>

#include "models/graph/graph.h"
#include "models/graph/verify.h"

namespace rlsim::analysis {

/// Where `rlsim verify` writes (an empty path: that output is not wanted).
struct VerifyOutputPaths {
  std::string json;         // the verdict and every mismatch
  std::string dot_dir;      // training.dot and inference.dot (mismatching edges in red)
  std::string graphml_dir;  // training.graphml and inference.graphml
  bool full_dot = false;    // every operator in the DOT files (DotOptions::full), not collapsed layers
  std::string title;        // the DOT graphs' title, after "training graph: " / "inference graph: "
};

/// Writes the wanted files all at once (write_files: the previous set stays when any fails).
/// Returns whether anything was written. Throws OutputError naming the file and the system's
/// reason.
bool write_verify_outputs(const VerifyOutputPaths& paths, const models::VerifyResult& r, const models::PrecisionGraph& train,
                          const models::PrecisionGraph& infer);

}  // namespace rlsim::analysis
