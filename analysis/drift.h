// The drift experiment (`rlsim drift`): training-inference mismatch against rollout length on a
// real model. The real runtime plays both sides on the same master weights:
//  - the rollout policy: the decode path (prompt prefilled into the KV cache, then one token at a
//    time through the packed GEMV kernels) in the rollout recipe, sampling the response;
//  - the trainer: the prefill path (all positions at once, teacher-forced on the sampled tokens)
//    in the training recipe, as an RL trainer computes old log-probabilities.
// Both keep the full-vocabulary distribution at every position. Metrics follow the
// training-inference mismatch literature: Yao et al., "Your Efficient RL Framework Secretly
// Brings You Off-Policy RL Training" (2025: token probability differences, truncated importance
// sampling with cap C); Jet-RL (2025: mismatch growing with rollout length under BF16-train /
// FP8-rollout); He et al., "Defeating Nondeterminism in LLM Inference" (2025: batch invariance).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "models/runtime/model.h"
#include "models/runtime/transformer.h"

namespace rlsim::analysis {

/// One side of a pair: "RECIPE" or "RECIPE+kv=FORMAT" (fp32 or a built-in recipe; FORMAT as
/// parse_format reads it, e.g. fp8-e4m3/tensor or fp8-e4m3 for a per-tensor static scale of 1).
struct DriftPolicy {
  std::string label;                   // as written, e.g. "fp8-block+kv=fp8-e4m3"
  models::RuntimePrecision precision;  // the recipe with the KV-cache override applied
};

/// Parses one side. Throws std::invalid_argument naming the text and listing what is valid.
DriftPolicy parse_drift_policy(std::string_view text);

/// A trainer / rollout pair, written "TRAIN:ROLLOUT".
struct DriftPair {
  DriftPolicy train, rollout;
};

/// Parses "TRAIN:ROLLOUT". Throws std::invalid_argument for a missing ':' or a bad side.
DriftPair parse_drift_pair(std::string_view text);

/// What to run. Lengths are response lengths in tokens, ascending and positive; each prompt's
/// token ids start with BOS where the model has one.
struct DriftOptions {
  std::vector<DriftPair> pairs;
  std::vector<int> lengths{16, 32, 64, 128};  // rollout lengths measured, tokens. Default: 16, 32, 64, 128
  std::vector<std::vector<int>> prompts;      // token ids of each prompt
  int samples = 4;                            // continuations per prompt. Default: 4
  double temperature = 1.0;                   // > 0: sampling and both log-probabilities use logits / T. Default: 1
  std::uint64_t seed = 1;                     // Default: 1
  bool batch_invariant = false;               // both sides use models::KernelMode::kBatchInvariant. Default: false
  double tis_cap = 2.0;                       // C of token-level truncated importance sampling. Default: 2
  int bootstrap = 1000;                       // resamples of sequences for the 95 % intervals. Default: 1000
};

/// Prompts of a drift experiment when neither the command line nor the drift file names a count.
inline constexpr int kDefaultDriftPrompts = 8;

/// One sampled token scored by both sides (Δ = logp_train - logp_rollout).
struct DriftToken {
  int prompt = 0, sample = 0, position = 0, token = 0;
  double logp_rollout = 0, logp_train = 0;
  double kl = 0;                   // KL(π_rollout ‖ π_train) over the vocabulary at this position, nats
  double prob_diff = 0;            // |π_train(y) - π_rollout(y)| of the sampled token
  double max_vocab_prob_diff = 0;  // max over the vocabulary of |π_train(v) - π_rollout(v)|
  double delta() const { return logp_train - logp_rollout; }
};

/// A metric at one length with its percentile-bootstrap 95 % interval.
struct DriftMetric {
  std::string name;
  double value = 0, ci_low = 0, ci_high = 0;
};

/// The metric names, in output order:
///  mean_abs_delta     mean over tokens at positions < L of |Δ|
///  p99_abs_delta      99th percentile of those |Δ| (linear interpolation between order statistics)
///  kl                 mean over those tokens of KL(π_rollout ‖ π_train), nats
///  max_prob_diff      max over those tokens of |π_train(y_t) - π_rollout(y_t)|
///  seq_log_ratio_abs  mean over sequences of |Σ_{t<L} Δ_t| (the sequence log importance ratio)
///  seq_log_ratio_std  standard deviation over sequences of Σ_{t<L} Δ_t (its spread)
///  tis_clip_fraction  fraction of those tokens with exp(Δ) > C (token-level TIS would clip them)
const std::vector<std::string>& drift_metric_names();

/// The metrics of sequences truncated to their first `length` tokens. `sequences` holds each
/// sequence's tokens in position order (every one at least `length` long). Intervals come from
/// `bootstrap` resamples of whole sequences with replacement (Efron's percentile method; tokens
/// within a sequence are not independent), drawn from sim::Rng(seed); bootstrap 0 gives the
/// point value as both bounds. Throws std::invalid_argument for no sequences or a short one.
std::vector<DriftMetric> drift_metrics(const std::vector<std::vector<DriftToken>>& sequences, int length, double tis_cap,
                                       int bootstrap, std::uint64_t seed);

/// The result of one pair.
struct DriftPairResult {
  std::string train, rollout;                      // labels
  std::vector<std::vector<DriftToken>> sequences;  // prompt-major, then sample
  std::vector<std::pair<int, std::vector<DriftMetric>>> by_length;
  // Throughput of each side on this machine: tokens / (seconds summed over the threads that ran
  // sequences / their number). Wall-clock figures, not part of the CSVs.
  double rollout_tokens_per_s = 0;  // sampled tokens (prompt prefill + decode)
  double train_tokens_per_s = 0;    // scored positions (one prefill per sequence)
};

/// Runs every pair: for each prompt and sample, the rollout side samples options.lengths.back()
/// tokens (not stopped at EOS, so every position is measured) with sim::Rng seeded from
/// (seed, prompt, sample) — the same draws for every pair — and the trainer scores them.
/// Sequences run in parallel (OpenMP, a rollout engine per thread) when the model is small
/// enough to copy; results do not depend on the thread count. `progress` (may be null) gets a
/// line per pair. Throws std::invalid_argument when a prompt plus
/// the longest length exceeds the model's max_seq, for a non-positive temperature, or bad lengths.
std::vector<DriftPairResult> run_drift(const models::ModelWeights& weights, const DriftOptions& options, std::ostream* progress);

/// Writes drift.csv (train,rollout,length,metric,value,ci_low,ci_high), per_token.csv (one row
/// per scored token) and, when gnuplot is installed and `plots`, drift_vs_length.png,
/// drift_vs_position.png and delta_histogram.png into `dir` via write_directory(). Returns the
/// plots it could not draw, with why.
std::vector<std::string> write_drift_outputs(const std::filesystem::path& dir, const std::vector<DriftPairResult>& results,
                                             bool plots);

/// The summary table: per pair and length, mean |Δ| and KL with intervals, p99 |Δ|, max prob
/// diff, |seq log ratio| and TIS clip fraction; then each pair's rollout and trainer tokens/s.
void print_drift_summary(std::ostream& out, const std::vector<DriftPairResult>& results, bool batch_invariant);

/// Built-in prompts (short story openings in the style of TinyStories, the corpus of the
/// stories* models; plain English for any tokenizer).
const std::vector<std::string>& default_drift_prompts();

}  // namespace rlsim::analysis
