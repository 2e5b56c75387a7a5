// `rlsim import verl`: a verl launch into an rlsim scenario (analysis/verl_import.h).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace rlsim::cli {

/// Options of `rlsim import verl`.
struct ImportVerlOptions {
  /// A launch script (when the first word is an existing file), then Hydra overrides KEY=VALUE
  /// applied after the script's (they win, as a later override does in Hydra).
  std::vector<std::string> args;
  std::string device = "h100-sxm";  // catalog device of the cluster
  std::string model_config;         // config.json when the model path matches no catalog model
  std::string log;                  // a verl console log: sets the length distributions
  std::string out;                  // the scenario file to write; empty: stdout
};

/// Writes the scenario (checked by loading it) and prints warnings and the keys without effect to
/// `err`. Throws sim::ScenarioError (exit 2) for bad input: unreadable script, malformed line,
/// unknown device, a value of the wrong type; std::runtime_error when the output cannot be written.
int cmd_import_verl(const ImportVerlOptions& o, std::ostream& out, std::ostream& err);

}  // namespace rlsim::cli
