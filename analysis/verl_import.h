// `rlsim import verl`: a verl launch (the shell script that runs verl.trainer.main_ppo, or its
// Hydra overrides) read into an rlsim scenario, with verl's own defaults for every key it does
// not set and a comment naming the verl key behind every value.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "analysis/launch_script.h"

namespace rlsim::analysis {

/// One Hydra override of the launch: `key=value` (a leading + or ++ dropped), and the 1-based line
/// of the script it came from (0 for overrides given on the command line).
struct VerlOverride {
  std::string key, value;
  int line = 0;
};

/// What a launch sets: the Hydra config it starts from and its overrides, in order (Hydra applies
/// them in order, so for a key given twice the last wins).
struct VerlLaunch {
  std::string config_name = "ppo_trainer";  // --config-name; ppo_megatron_trainer selects Megatron defaults
  /// The module run: verl.trainer.main_ppo (colocated, synchronous), recipe.one_step_off_policy.*
  /// (disaggregated, one step off) or recipe.fully_async_policy.* (disaggregated, asynchronous).
  std::string entry = "verl.trainer.main_ppo";
  std::vector<VerlOverride> overrides;
  /// Words of the command that are expansions the script does not resolve (`${ARGS[@]}` of a
  /// sourced file, `$EXTRA`): listed in the import's warnings, never dropped silently.
  std::vector<ShellWord> unread;
  /// The last override of `key`, or null when the launch does not set it.
  const VerlOverride* last(const std::string& key) const;
  /// The value of `key`: its last override, else "" (not set).
  std::string get(const std::string& key) const;
};

/// Reads a launch script (the shell as read_shell_script reads it) and the words of its command
/// that runs `verl.trainer.main_ppo` (or a recipe's main module: `*main_ppo*`, `recipe.*main*`);
/// `$@` is skipped; `--config-name NAME` (or `--config-name=NAME`) selects the config; a
/// redirection or pipe ends the command. Throws sim::ScenarioError naming `file`:line for a
/// shell error, a word of the command that is not KEY=VALUE, a second verl command, or a script
/// without one.
VerlLaunch parse_verl_script(const std::string& text, const std::string& file);

/// Overrides given as words (`rlsim import verl -- KEY=VALUE ...`); errors as parse_verl_script.
VerlLaunch parse_verl_overrides(const std::vector<std::string>& words);

/// Length figures of a verl console log: the means over its step lines of response_length/mean,
/// /max, /clip_ratio and prompt_length/mean, /max (tokens; a value may be written np.float64(x)).
struct VerlLogLengths {
  int steps = 0;  // step lines read
  double response_mean = 0, response_max = 0, response_clip_ratio = 0;
  double prompt_mean = 0, prompt_max = 0;
};

/// Reads the `step:N - key:value - ...` lines of a verl console log. Throws sim::ScenarioError
/// naming `file`:line for a step line without response_length/mean or a malformed value, and
/// `file` when there is no step line.
VerlLogLengths parse_verl_log(const std::string& text, const std::string& file);

/// The phase times of a verl console log as rlsim figures, in seconds: the means over its step
/// lines (the first left out, as warm-up, when there are several) of timing_s/gen (phase.rollout),
/// timing_s/old_log_prob (phase.old_logprob), timing_s/ref (phase.reference),
/// timing_s/update_actor (phase.actor_update) and timing_s/step (step_time), each when present.
/// Throws sim::ScenarioError naming `file` when no step line has timing_s/step.
std::vector<std::pair<std::string, double>> verl_log_phase_times(const std::string& text, const std::string& file);

/// A response-length distribution that reproduces a log's figures: lognormal(median, sigma)
/// clipped at `max_tokens` (max_response_length), with P(X >= max) = clip_ratio and E[min(X, max)]
/// = mean (closed form: E[min(X, M)] = e^(mu + sigma^2/2) Phi((ln M - mu - sigma^2) / sigma) +
/// M (1 - Phi((ln M - mu) / sigma))), sigma found by bisection in [0.05, 3]. A clip ratio of 0
/// takes sigma 0.8 and the median giving the mean. Returns {median, sigma}.
std::pair<double, double> fit_clipped_lognormal(double mean, double clip_ratio, double max_tokens);

/// Maps a launch onto a scenario for `device` (a catalog device name). The model is the catalog
/// entry matching the last component of actor_rollout_ref.model.path (case-insensitive; a catalog
/// name followed by '-' and a suffix matches too: Qwen3-8B-Base -> qwen3-8b), else `model_config`
/// (a Hugging Face config.json, written as hf_config). Keys rlsim does not map are listed in
/// `warnings` or `ignored`, never dropped silently. Defaults: verl's
/// verl/trainer/config/_generated_ppo_trainer.yaml and _generated_ppo_megatron_trainer.yaml
/// (volcengine/verl, 2025-11). Throws sim::ScenarioError (naming the override's line) for a value
/// of the wrong type, a model that matches no catalog entry without `model_config`.
/// `lengths` (a console log's figures), when given, sets the prompt and response distributions.
ImportedScenario import_verl(const VerlLaunch& launch, const std::string& device, const std::string& model_config,
                             const std::string& source, const VerlLogLengths* lengths = nullptr);

}  // namespace rlsim::analysis
