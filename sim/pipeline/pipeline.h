// The RL pipeline simulation: `rlsim run`'s core. Public header of sim/pipeline.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/trace.h"
#include "sim/pipeline/memory_ledger.h"
#include "sim/pipeline/rollout.h"
#include "sim/pipeline/trainer.h"
#include "sim/scenario/scenario.h"

namespace rlsim::sim {

/// Phase names, in the order of SCENARIO.md's phases_s and steps.csv.
inline const std::vector<std::string> kPhases{"rollout", "old_logprob", "reference", "actor_update", "weight_sync", "offload"};

/// One phase occurrence.
struct PhaseSpan {
  int step = 0;
  std::string phase;  // one of kPhases
  std::string role;   // "rollout" | "training" | "sync"
  TimeNs start = 0;
  TimeNs end = 0;
  double seconds() const { return to_seconds(end - start); }
};

/// One RL step.
struct StepRecord {
  int step = 0;
  TimeNs start = 0;
  TimeNs end = 0;
  std::map<std::string, double> phase_s;  // wall time of each phase in this step
  std::int64_t generated_tokens = 0;
  std::int64_t preemptions = 0;
  double step_s() const { return to_seconds(end - start); }
};

/// Out-of-memory result: which role, in which phase, and what was live.
struct OomReport {
  std::string role;     // "rollout" | "training"
  std::string device_group;
  std::string reason;
  double capacity_bytes = 0;
  double required_bytes = 0;
  std::map<std::string, double> breakdown;
};

struct SimResult {
  std::vector<StepRecord> steps;
  std::vector<PhaseSpan> phases;
  std::vector<Request> requests;        // all steps, in (step, index) order
  std::vector<MemoryLedger> ledgers;    // one per device group
  std::optional<OomReport> oom;
  std::vector<std::string> warnings;
  RolloutCostModel rollout_cost;
  TrainMemory train_memory;
  double kv_capacity_tokens = 0;        // per engine
  int engines = 0;
  int max_running = 0;                  // largest concurrent batch of any engine
  bool kv_limited = false;
  double decode_memory_bound_s = 0, decode_compute_bound_s = 0;
  SyncTimes sync;
  std::uint64_t events = 0;
  double peak_rollout_bytes = 0;        // per device, during rollout
  double peak_training_bytes = 0;       // per device, during training and weight sync
  bool fits() const { return !oom.has_value(); }
};

/// Called after each simulated step with (steps done, steps total).
using ProgressFn = std::function<void(int, int)>;

/// Simulates `s.steps` RL steps. Spans and counters go to `sink`. Throws ScenarioError for a
/// combination the simulator cannot represent (reported as bad input); never throws for a
/// configuration that does not fit memory (that is SimResult::oom).
SimResult simulate(const Scenario& s, TraceSink& sink, const ProgressFn& progress = {});

}  // namespace rlsim::sim
