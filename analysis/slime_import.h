// `rlsim import slime`: a slime launch (the shell script that runs slime's train.py or
// train_async.py with argparse flags, usually gathered in bash arrays) read into an rlsim
// scenario, with slime's, Megatron's and SGLang's defaults for every flag it does not give and a
// comment naming the flag behind every value.
#pragma once

#include <string>
#include <vector>

#include "analysis/launch_script.h"

namespace rlsim::analysis {

/// One flag of a slime launch: `--flag` with the words after it up to the next flag (none for
/// a switch such as --colocate; several for nargs='+' flags), or `--flag=value`, and the 1-based
/// script line of the flag (0 for flags given on rlsim's command line).
struct SlimeArg {
  std::string flag;
  std::vector<std::string> values;
  int line = 0;
};

/// What a slime launch gives: the entry point and its flags in order (argparse keeps the last
/// of a repeated flag, so for a flag given twice the last wins).
struct SlimeLaunch {
  /// train.py (synchronous: rollout, then training) or train_async.py (the next rollout overlaps
  /// this step's training: one step off).
  std::string entry = "train.py";
  std::vector<SlimeArg> args;
  /// Words of the command that are expansions the script does not resolve (`${MODEL_ARGS[@]}`
  /// of a sourced file): listed in the import's warnings.
  std::vector<ShellWord> unread;
  /// The last `flag`, or null when the launch does not give it.
  const SlimeArg* last(const std::string& flag) const;
};

/// Reads a launch script (the shell as read_shell_script reads it: arrays expanded) and the
/// flags of its command that runs slime's train.py or train_async.py (`python3 train.py ...`,
/// also after `ray job submit ... --`). `$@` is skipped; a redirection or pipe ends the command.
/// Throws sim::ScenarioError naming `file`:line for a shell error, a word before the first flag,
/// a second slime command, or a script without one.
SlimeLaunch parse_slime_script(const std::string& text, const std::string& file);

/// Flags given as words (`rlsim import slime -- --flag value ...`), appended to `launch` (they
/// come after the script's, so they win); errors as parse_slime_script.
void append_slime_args(SlimeLaunch& launch, const std::vector<std::string>& words);

/// Maps a launch onto a scenario for `device` (a catalog device name). The model is the catalog
/// entry matching the last component of --hf-checkpoint (as catalog_model_for_path), else
/// `model_config` (a Hugging Face config.json); a checkpoint named *-FP8 rolls out in the
/// fp8-block recipe (the block-scaled FP8 checkpoints SGLang serves). Defaults: slime's
/// slime/utils/arguments.py (THUDM/slime, 2025-11), Megatron-LM's for parallel sizes (1) and
/// SGLang's mem_fraction_static by engine size (server_args.py: 0.88 at TP 1, 0.87 at 2, 0.85 at
/// 4, 0.81 at 8, 0.79 at 16 or more). Flags rlsim does not model are listed in `warnings` or
/// `ignored`, never dropped silently. Throws sim::ScenarioError (naming the flag's line) for a
/// value of the wrong type, a switch given a value, a missing --rollout-batch-size, a
/// disaggregated launch without --rollout-num-gpus, --global-batch-size not dividing the
/// samples of a rollout, or a model that matches no catalog entry without `model_config`.
ImportedScenario import_slime(const SlimeLaunch& launch, const std::string& device, const std::string& model_config,
                              const std::string& source);

}  // namespace rlsim::analysis
