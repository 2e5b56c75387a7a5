// The RL pipeline simulation: `rlsim run`'s core. Public header of sim/pipeline.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/trace.h"
#include "sim/pipeline/labels.h"
#include "sim/pipeline/memory_ledger.h"
#include "sim/pipeline/rollout.h"
#include "sim/pipeline/trainer.h"
#include "sim/scenario/scenario.h"

namespace rlsim::sim {

/// One phase occurrence.
struct PhaseSpan {
  int step = 0;
  Phase phase = Phase::kRollout;
  Role role = Role::kRollout;
  TimeNs start = 0;
  TimeNs end = 0;
  TrainerGroup group = TrainerGroup::kActor;  // training phases: whose devices
  double seconds() const { return to_seconds(end - start); }
};

/// What ran a phase, as phases.csv's role column and the timeline's rows name it: its role
/// ("rollout", "training", "sync"), or "critic" / "reward_model" for a training phase on such a
/// model's own devices (which overlaps the actor's).
constexpr std::string_view phase_role(const PhaseSpan& p) {
  return p.role == Role::kTraining && p.group != TrainerGroup::kActor ? trainer_group_name(p.group) : role_name(p.role);
}

/// One RL step.
struct StepRecord {
  int step = 0;
  TimeNs start = 0;
  TimeNs end = 0;
  PhaseSeconds phase_s;  // wall time of each phase in this step
  std::int64_t generated_tokens = 0;
  std::int64_t preemptions = 0;
  std::int64_t interruptions = 0;  // partial rollout: pauses across a weight update, summed over sequences
  // Off-policyness of the consumed batch: staleness of a sequence = policy version consuming it
  // (weight updates so far) - version that started generating it (0 = on-policy).
  double staleness_mean = 0;
  int staleness_max = 0;
  std::int64_t stale_sequences = 0;
  double step_s() const { return to_seconds(end - start); }
};

/// Out-of-memory result: which role, in which phase, and what was live.
struct OomReport {
  Role role = Role::kRollout;  // kRollout or kTraining
  std::string device_group;
  std::string reason;
  double capacity_bytes = 0;
  double required_bytes = 0;
  std::map<std::string, double> breakdown;
};

struct SimResult {
  std::vector<StepRecord> steps;
  std::vector<PhaseSpan> phases;
  std::int64_t requests_consumed = 0;   // requests of the steps trained on (each passed to the RequestFn)
  std::int64_t responses_at_limit = 0;  // of those, responses at the length distribution's upper bound
  std::vector<MemoryLedger> ledgers;    // one per device group
  std::optional<OomReport> oom;
  std::vector<std::string> warnings;
  RolloutCostModel rollout_cost;
  TrainMemory train_memory;
  double kv_capacity_tokens = 0;  // per engine
  int engines = 0;
  int max_running = 0;  // largest concurrent batch of any engine
  bool kv_limited = false;
  double decode_memory_bound_s = 0, decode_compute_bound_s = 0;
  SyncTimes sync;
  std::uint64_t events = 0;
  // Utilisation (verl fully_async_policy reports trainer/idle_ratio and rollouter/idle_ratio).
  double wall_s = 0;                       // end of the last step
  std::vector<double> engine_busy_s;       // per engine: iterations in flight, plus sleep/wake copies
  double trainer_busy_s = 0;               // training phases, offload copies and weight syncs
  double rollout_idle_ratio() const;       // 1 - sum(engine busy) / (engines x wall)
  double trainer_idle_ratio() const;       // 1 - trainer busy / wall
  std::int64_t tokens_generated = 0;       // decoded by all engines (including sequences left in flight)
  std::int64_t tokens_recomputed = 0;      // prefill of contexts after preemption or a partial-rollout pause
  std::int64_t left_in_flight = 0;         // async: sequences dispatched but not consumed at the end
  std::int64_t left_in_flight_tokens = 0;  // tokens those sequences had generated
  double peak_rollout_bytes = 0;           // per device, during rollout
  double peak_training_bytes = 0;          // per device, during training and weight sync
  /// Per device of a critic's, a reward model's and the reference's own groups
  /// (algorithm.*.placement separate); 0 where the run has no such group.
  double peak_critic_bytes = 0, peak_reward_model_bytes = 0, peak_reference_bytes = 0;
  bool fits() const { return !oom.has_value(); }
};

/// Seconds a `bytes` copy takes over `link` (bandwidth and latency), e.g. a host-link offload.
double copy_s(double bytes, const models::Link& link);

/// Called after each simulated step with (steps done, steps total).
using ProgressFn = std::function<void(int, int)>;

/// Receives each consumed request once its step has ended: steps in order, each step's requests
/// by index (prompt-major). The simulation keeps no request past this call, so its memory is
/// bounded by the requests in flight, not by the length of the run.
using RequestFn = std::function<void(const Request&)>;

/// The phases a run of `s` has, in kPhases order: every phase but kReward without a reward
/// model and kValues / kCriticUpdate without a critic (algorithm ppo). Outputs list these, so a
/// GRPO scenario's files carry no columns for phases it cannot run.
std::vector<Phase> phases_of(const Scenario& s);

/// Simulates `s.steps` RL steps. Spans and counters go to `sink`, finished requests to
/// `on_request` (when given). Throws ScenarioError for a combination the simulator cannot
/// represent (reported as bad input), Interrupted when a stop was requested (stop.h); never
/// throws for a configuration that does not fit memory (that is SimResult::oom).
SimResult simulate(const Scenario& s, TraceSink& sink, const ProgressFn& progress = {}, const RequestFn& on_request = {});

}  // namespace rlsim::sim
