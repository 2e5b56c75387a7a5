// The closed vocabularies of a simulated run: the phases of an RL step, the roles devices play and
// the tags of memory allocations. Each is an enum with one name table, so a misspelt label is a
// compile error and the names written to summary.json, steps.csv, phases.csv and memory.csv
// (SCENARIO.md, "Outputs") are stated once.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rlsim::sim {

/// Phases of an RL step, in the order of SCENARIO.md's phases_s and steps.csv; `kStepOverhead`
/// (the calibrated fixed time per step outside the other phases: reward, advantages, data
/// movement) is rlsim's addition, last. `kReward` (a reward model's forward), `kValues` (the PPO
/// critic's forward) and `kCriticUpdate` (its training) run, and are written, only in scenarios
/// with a reward model or a critic (pipeline.h's phases_of), named as verl times them
/// (timing_s/reward, /values, /update_critic).
enum class Phase : std::uint8_t {
  kRollout,
  kReward,
  kOldLogprob,
  kReference,
  kValues,
  kCriticUpdate,
  kActorUpdate,
  kWeightSync,
  kOffload,
  kStepOverhead
};
inline constexpr std::size_t kPhaseCount = 10;
inline constexpr std::array<Phase, kPhaseCount> kPhases{
    Phase::kRollout,      Phase::kReward,      Phase::kOldLogprob, Phase::kReference, Phase::kValues,
    Phase::kCriticUpdate, Phase::kActorUpdate, Phase::kWeightSync, Phase::kOffload,   Phase::kStepOverhead};
inline constexpr std::array<std::string_view, kPhaseCount> kPhaseNames{"rollout", "reward",        "old_logprob",  "reference",
                                                                       "values",  "critic_update", "actor_update", "weight_sync",
                                                                       "offload", "step_overhead"};
static_assert(static_cast<std::size_t>(Phase::kStepOverhead) + 1 == kPhaseCount);

/// The output name of a phase ("rollout", "old_logprob", ...).
constexpr std::string_view phase_name(Phase p) { return kPhaseNames[static_cast<std::size_t>(p)]; }

/// Wall seconds of each phase (one step's, or a mean), indexed by Phase; a phase that did not run is 0.
struct PhaseSeconds {
  std::array<double, kPhaseCount> s{};
  double& operator[](Phase p) { return s[static_cast<std::size_t>(p)]; }
  double operator[](Phase p) const { return s[static_cast<std::size_t>(p)]; }
  double total() const {
    double t = 0;
    for (double v : s) t += v;
    return t;
  }
};

/// Which devices a phase occupies: the rollout engines, the trainer, or both for a weight sync.
enum class Role : std::uint8_t { kRollout, kTraining, kSync };
inline constexpr std::array<std::string_view, 3> kRoleNames{"rollout", "training", "sync"};

/// The output name of a role ("rollout", "training", "sync").
constexpr std::string_view role_name(Role r) { return kRoleNames[static_cast<std::size_t>(r)]; }

/// Which training-side devices a training phase runs on: the actor's, or a PPO critic's, a reward
/// model's or the KL reference's own group (algorithm.*.placement separate), whose phases overlap
/// the actor's.
enum class TrainerGroup : std::uint8_t { kActor, kCritic, kRewardModel, kReference };
inline constexpr std::array<std::string_view, 4> kTrainerGroupNames{"training", "critic", "reward_model", "reference"};

/// The output name of a training phase's devices: "training" (the actor's, as its role is named),
/// "critic", "reward_model" or "reference" (phases.csv's role column, the timeline's rows).
constexpr std::string_view trainer_group_name(TrainerGroup g) { return kTrainerGroupNames[static_cast<std::size_t>(g)]; }

/// What a device-memory allocation holds (the tags of memory.csv and of an out-of-memory breakdown).
enum class MemoryTag : std::uint8_t {
  kRolloutWeights,    // the rollout engine's weights, in the rollout recipe's formats
  kKvCache,           // the engine's KV-cache pool
  kRolloutBuffers,    // CUDA graphs, activations, sampler workspace of the engine
  kTrainParams,       // the actor's parameters (sharded as the backend shards them)
  kReferenceParams,   // the KL reference model's parameters
  kOptimizer,         // optimizer states
  kGrads,             // gradients
  kActivations,       // training activations kept for the backward pass
  kLogits,            // training logits (vocabulary-wide, per micro-batch)
  kFsdpGatherBuffer,  // FSDP all-gathered layer parameters
  kSyncGatherBuffer,  // the trainer's buffer of gathered weights during a weight sync
  kCriticParams,      // the PPO critic's parameters
  kCriticOptimizer,   // the critic's optimizer states
  kRewardParams,      // a reward model's parameters
};
inline constexpr std::array<std::string_view, 14> kMemoryTagNames{
    "rollout_weights",    "kv_cache",      "rollout_buffers",  "train_params", "reference_params",
    "optimizer",          "grads",         "activations",      "logits",       "fsdp_gather_buffer",
    "sync_gather_buffer", "critic_params", "critic_optimizer", "reward_params"};
static_assert(static_cast<std::size_t>(MemoryTag::kRewardParams) + 1 == kMemoryTagNames.size());

/// The output name of a memory tag ("rollout_weights", "kv_cache", ...).
constexpr std::string_view memory_tag_name(MemoryTag t) { return kMemoryTagNames[static_cast<std::size_t>(t)]; }

}  // namespace rlsim::sim
