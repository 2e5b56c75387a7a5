// `rlsim drift`: the training-inference mismatch experiment on a real model (analysis/drift.h),
// from command-line options and / or a drift file (YAML).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace rlsim::cli {

/// Options of `rlsim drift`. Every field left unset takes the drift file's value, then the
/// default noted here.
struct DriftCliOptions {
  std::string file;                        // drift YAML file (optional)
  std::optional<std::string> model;        // llama2.c checkpoint or Hugging Face directory (required)
  std::optional<std::string> tokenizer;    // default: found beside the model
  std::optional<std::string> prompt_file;  // one prompt per line; default: built-in story openings
  std::vector<std::string> pairs;          // TRAIN:ROLLOUT (required)
  // Unset: the drift file's value, else the default of analysis::DriftOptions (kDefaultDriftPrompts).
  std::vector<int> lengths;
  std::optional<int> prompts;
  std::optional<int> samples;
  std::optional<double> temperature;
  std::optional<std::uint64_t> seed;
  bool batch_invariant = false;  // or batch_invariant: true in the file
  std::optional<double> tis_cap;
  std::optional<int> bootstrap;
  std::optional<std::string> out;  // default: the file's out, else out/<file stem>, else out/drift
  bool no_plots = false;
  bool quiet = false;
};

/// Runs the experiment, writes the outputs and prints the summary table to `out` (progress to
/// `err`). Throws sim::ScenarioError (exit 2) for a bad drift file (file, line and what was
/// expected) or bad options, models::ModelFileError (exit 2) for bad model files.
int cmd_drift(const DriftCliOptions& o, std::ostream& out, std::ostream& err);

/// Fills every option of `o` the command line left unset from the drift file `o.file`; every key
/// of the file is checked, whether or not the command line overrides it (relative paths in it
/// are resolved against its folder). Throws sim::ScenarioError naming the file, line and what
/// was expected.
void merge_drift_file(DriftCliOptions& o);

/// The drift file's keys (for --help and error messages).
const std::vector<std::string>& drift_file_keys();

}  // namespace rlsim::cli
