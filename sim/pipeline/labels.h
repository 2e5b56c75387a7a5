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
/// movement) is rlsim's addition, last.
enum class Phase : std::uint8_t { kRollout, kOldLogprob, kReference, kActorUpdate, kWeightSync, kOffload, kStepOverhead };
inline constexpr std::size_t kPhaseCount = 7;
inline constexpr std::array<Phase, kPhaseCount> kPhases{Phase::kRollout,     Phase::kOldLogprob, Phase::kReference,
                                                        Phase::kActorUpdate, Phase::kWeightSync, Phase::kOffload,
                                                        Phase::kStepOverhead};
inline constexpr std::array<std::string_view, kPhaseCount> kPhaseNames{
    "rollout", "old_logprob", "reference", "actor_update", "weight_sync", "offload", "step_overhead"};
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
};
inline constexpr std::array<std::string_view, 11> kMemoryTagNames{
    "rollout_weights", "kv_cache",    "rollout_buffers", "train_params",       "reference_params",  "optimizer",
    "grads",           "activations", "logits",          "fsdp_gather_buffer", "sync_gather_buffer"};
static_assert(static_cast<std::size_t>(MemoryTag::kSyncGatherBuffer) + 1 == kMemoryTagNames.size());

/// The output name of a memory tag ("rollout_weights", "kv_cache", ...).
constexpr std::string_view memory_tag_name(MemoryTag t) { return kMemoryTagNames[static_cast<std::size_t>(t)]; }

}  // namespace rlsim::sim
