// `rlsim train`: the GRPO loop on the host (analysis/grpo.h) from a train file (YAML).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "analysis/grpo.h"

namespace rlsim::cli {

/// One train file as read: the loop's options, its model and tokenizer paths (resolved against
/// the file's folder) and its output directory.
struct TrainFile {
  std::string name;
  std::string model, tokenizer;
  analysis::GrpoOptions grpo;
  std::string out;
};

/// Reads the train file at `path` (keys: train_file_keys()). Throws sim::ScenarioError (exit 2)
/// at file:line:column for bad input, naming the command a file of another kind is for.
TrainFile read_train_file(const std::string& path);

/// Options of `rlsim train`; set ones override the train files' keys.
struct TrainCliOptions {
  std::vector<std::string> files;    // train files (at least one)
  std::vector<std::uint64_t> seeds;  // runs per file, one per seed; empty: the file's seed
  std::optional<int> steps;
  std::optional<std::string> out;
  bool no_plots = false;
  bool quiet = false;
};

/// Runs the loop of every file for every seed, prints a line per step (unless quiet) and writes
/// into the output directory (--out, else the first file's out:): per run <file stem>/seed<N>/
/// steps.csv and run.json; over all runs study.csv (every run's steps) and summary.csv (per file:
/// first and last reward, mismatch and phase times, mean and min..max over seeds); and (gnuplot
/// permitting) reward.png, mismatch.png and phase_time.png, mean curves with min..max bands.
/// Throws sim::ScenarioError (exit 2) for a bad train file (file:line:column and what was
/// expected), models::ModelFileError for bad model files.
int cmd_train(const TrainCliOptions& o, std::ostream& out, std::ostream& err);

/// The train file's keys (for --help and error messages).
const std::vector<std::string>& train_file_keys();

}  // namespace rlsim::cli
