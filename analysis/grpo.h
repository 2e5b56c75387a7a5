// Real RL on the host (`rlsim train`): a GRPO loop whose rollouts run in the runtime in one
// recipe (models::Transformer, KV cache, seeded temperature sampling) and whose trainer
// (models::TrainableModel) updates FP32 master weights with its forward in another; the new
// weights reach the rollout engine every step through the real reload path (restore, load,
// quantise and repack: weight_lifecycle.h). It measures what the training-inference mismatch does
// to learning, and the loop's per-phase times for the `host` device.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/runtime/model.h"
#include "models/runtime/tokenizer.h"
#include "models/runtime/transformer.h"

namespace rlsim::analysis {

/// The verifiable task. kLipogram: the response's words (maximal runs of letters) that contain
/// no letter 'e' (either case), as a fraction of its words; 0 for a response without words. A
/// TinyStories model starts near 0.5 (about half of English running words contain an 'e'); the
/// ceiling is 1.
enum class GrpoTask { kLipogram };

/// log softmax(logits / temperature)[y]: the log-probability the sampler gives token y.
double token_log_prob(std::span<const float> logits, double temperature, int y);

/// Reward of one decoded response for `task`, in [0, 1].
double task_reward(GrpoTask task, const std::string& response);

/// What one run does; a train file (scenarios/train-*.yaml) sets any of it, the rest keeps these defaults.
struct GrpoOptions {
  GrpoTask task = GrpoTask::kLipogram;
  models::RuntimePrecision train_precision;    // the trainer's forward. Default: fp32
  models::RuntimePrecision rollout_precision;  // the rollout engine. Default: fp32
  /// Batch-invariant kernels on both sides (models::KernelMode): the rollout engine decodes with
  /// them and the trainer's log-probabilities (importance weights, mismatch) come from the
  /// runtime's prefill with them in the training recipe, so identical recipes are bitwise on-policy.
  /// The gradient is still the trainer's own forward and backward. Default: false
  bool batch_invariant = false;
  int prompts_per_step = 8;       // Default: 8
  int group_size = 8;             // samples per prompt (GRPO's G). Default: 8
  int response_tokens = 128;      // tokens sampled per response (not stopped at EOS). Default: 128
  int steps = 30;                 // Default: 30
  double learning_rate = 3e-3;    // AdamW. Default: 3e-3
  double temperature = 1.0;       // sampling and both sides' log-probs. Default: 1
  std::optional<double> tis_cap;  // truncated importance sampling cap C; none: off. Default: off
  std::uint64_t seed = 1;         // Default: 1
  /// Data-parallel trainer ranks (one per core; rank r takes sequences r, r + R, ...; gradients
  /// summed in rank order). Default: 2
  int train_ranks = 2;
};

/// One step's figures (steps.csv of `rlsim train`).
struct GrpoStep {
  int step = 0;
  double reward_mean = 0, reward_std = 0;
  /// Mean over sampled tokens of logp_rollout - logp_trainer: the k1 estimator of
  /// KL(rollout || trainer) per token, the mismatch.
  double kl_rollout_trainer = 0;
  double max_abs_logp_diff = 0;  // largest |logp_rollout - logp_trainer| of any token
  /// Per-token importance weights pi_trainer / pi_rollout before truncation: mean, max and the
  /// fraction above the TIS cap (0 when TIS is off).
  double is_weight_mean = 0, is_weight_max = 0, is_clip_fraction = 0;
  double grad_norm = 0;                                          // before clipping
  double entropy = 0;                                            // trainer's per-token entropy, nats
  double response_length = 0;                                    // tokens
  double rollout_s = 0, logprob_s = 0, train_s = 0, sync_s = 0;  // measured wall time
};

/// Runs `o.steps` GRPO steps from `initial`, prompting with `prompts` (token ids, BOS first),
/// cycled: step k uses prompts (k * prompts_per_step + i) mod size. Per step: sample group_size
/// responses per prompt in the rollout recipe (sequences in parallel, each from its own seeded
/// stream, so results do not depend on the thread count); reward them; advantages (r - mean) /
/// (std + 1e-6) within each group; the trainer's log-probs of every response token; the policy
/// gradient of the token-mean loss -A * w * logp (one update per step, so PPO's ratio is 1 and its
/// clip never binds; w = 1, or with TIS min(pi_trainer / pi_rollout, tis_cap)); AdamW (clip 1.0);
/// then the rollout engine reloads the weights. `on_step`
/// gets each step's figures. Throws std::invalid_argument for bad options (a prompt plus the
/// response past max_seq, non-positive sizes), as Transformer / TrainableModel do.
std::vector<GrpoStep> run_grpo(const models::ModelWeights& initial, const models::Tokenizer& tokenizer,
                               const std::vector<std::vector<int>>& prompts, const GrpoOptions& o,
                               const std::function<void(const GrpoStep&)>& on_step = {});

/// steps.csv: one row per step, the columns of GrpoStep in its order.
std::string grpo_steps_csv(const std::vector<GrpoStep>& steps);

}  // namespace rlsim::analysis
