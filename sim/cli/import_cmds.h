// `rlsim import verl|slime`: another framework's launch into an rlsim scenario
// (analysis/verl_import.h, analysis/slime_import.h).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace rlsim::cli {

/// Options of `rlsim import verl` and `rlsim import slime`.
struct ImportOptions {
  /// A launch script (when the first word is not an override), then overrides applied after the
  /// script's (they win): Hydra KEY=VALUE for verl, --flag value for slime.
  std::vector<std::string> args;
  std::string device = "h100-sxm";  // catalog device of the cluster
  std::string model_config;         // config.json when the model path matches no catalog model
  std::string log;                  // verl only: a console log that sets the length distributions
  std::string out;                  // the scenario file to write; empty: stdout
};

/// `rlsim import verl`: writes the scenario (checked by loading it) and prints warnings and the
/// keys without effect to `err`. Throws sim::ScenarioError (exit 2) for bad input: unreadable
/// script, malformed line, unknown device, a value of the wrong type; std::runtime_error when the
/// output cannot be written.
int cmd_import_verl(const ImportOptions& o, std::ostream& out, std::ostream& err);

/// `rlsim import slime`: as cmd_import_verl, for a slime launch (train.py / train_async.py flags).
int cmd_import_slime(const ImportOptions& o, std::ostream& out, std::ostream& err);

}  // namespace rlsim::cli
