// The cost model's free parameters (achieved fractions of peak rates, engine overheads, a fixed
// per-step overhead) in one place: `rlsim calibrate` fits them over the validation records
// (scenarios/validation/, and ready scenarios carrying a `validation:` block) and writes them as
// a calibration file; the built-in one (models/calibration/default.yaml) is that fit, and every
// scenario takes its efficiency and overhead defaults from it. `rlsim run`, `plan` and
// `validate` take `--calibration FILE` to use another. A value set in the scenario itself
// (rollout.efficiency, rollout.overheads, training.efficiency, training.step_overhead) wins.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/scenario/scenario.h"

namespace rlsim::sim {

/// Achieved fraction of link bandwidth in collectives (NCCL bus bandwidth / link rate). Not
/// fitted: no record separates it from the compute and memory fractions (assumption, 0.70).
inline constexpr double kDefaultCommEfficiency = 0.70;

/// Achieved fractions of one device's peak rates (0-1). The defaults are `rlsim calibrate`'s
/// priors: HBM streaming reaches ~0.8 of peak (a device copy 0.87-0.89, ANCHORS.md), large BF16
/// GEMMs ~0.7 of the dense peak (cuBLAS on Hopper, public benchmarks). The other structs'
/// defaults below are likewise the fit's priors.
struct DeviceCalibration {
  double memory = 0.80;   // of the HBM bandwidth, by weight/KV streaming (decode, optimizer step)
  double compute = 0.70;  // of the dense tensor-core rate, by large well-shaped GEMMs
};

/// GEMM efficiency of a training backend on top of the device's compute fraction (0-1]: the share
/// of a step's FLOPs that run at the device's GEMM rate (non-GEMM kernels, small shapes, launch
/// gaps all lower it). `moe` applies to routed-expert GEMMs (grouped GEMMs over tokens per expert).
struct BackendCalibration {
  double dense = 0.65;
  double moe = 0.35;
  double forward = 0.8;  // forward-only passes (log-prob, reference) relative to the update's rate
};

/// Per-iteration costs of a rollout engine that are not GEMMs or weight reads (seconds), and the
/// GEMM efficiency of its decode and prefill iterations.
struct EngineCalibration {
  /// Share of the device's GEMM rate (DeviceCalibration::compute) the engine's iterations reach:
  /// decode GEMMs have M = running sequences, far from the large square shapes of training (0-1].
  double compute = 0.8;
  /// Share of the weight-streaming bandwidth its paged-attention decode kernels reach reading the
  /// KV cache: blocks of 16 tokens (vLLM) scattered over the pool, a KV head group per program
  /// (0-1]. Prior 0.8 (assumption).
  double attention = 0.8;
  double iteration_s = 2e-3;          // scheduler + sampler + CUDA-graph replay per engine step
  double per_layer_s = 20e-6;         // non-GEMM kernels per layer per step under CUDA graphs
  double per_layer_eager_s = 200e-6;  // the same with eager launches (enforce_eager)
  double moe_layer_s = 30e-6;         // extra kernels of an MoE layer (router, top-k, permute, combine)
  double per_sequence_s = 2e-6;       // per running sequence per step: scheduler bookkeeping, sampler
  /// Weight sync into the engine: host-side time per weight matrix (the engine's load_weights
  /// runs a weight loader per named tensor; an MoE model has one per expert projection), and per
  /// matrix quantised on the fly to the rollout format (block amax, scale, cast: several kernel
  /// launches each). Priors 50 us and 200 us (assumptions).
  double sync_per_matrix_s = 50e-6;
  double sync_quantize_per_matrix_s = 200e-6;
};

/// One set of cost-model parameters.
struct Calibration {
  std::string source = "built-in";                   // file it came from, for messages
  std::map<std::string, DeviceCalibration> devices;  // by catalog device name
  DeviceCalibration other_device;                    // devices with no entry (inline, uncalibrated)
  BackendCalibration fsdp, megatron;
  EngineCalibration vllm, sglang;
  /// Tokens per expert at which an MoE grouped GEMM reaches half of its large-M efficiency:
  /// efficiency(m) = m / (m + m_half) (a tile of M rows is computed whatever m fills of it).
  double moe_half_tokens = 16;
  /// Fused-MoE (grouped GEMM) kernels stream routed-expert weights at the dense weight-streaming
  /// bandwidth times w / (w + w_half), w the columns of each expert's intermediate dimension one
  /// rank holds (expert_intermediate x EP / TP: tensor parallelism without expert parallelism
  /// slices every expert): narrow slices leave the kernel's N tiles part-empty and spend more of
  /// each expert's fixed work per byte. This is w_half, in columns. Prior 100: SGLang's
  /// fused_moe_triton on Qwen3-235B TP8 (w = 192) reaches ~0.55 of the H200's HBM peak, ~0.65 of
  /// a dense stream (kernel times 32-125 us per layer, sgl-project/sglang PR 11730).
  double moe_half_width = 100;
  double step_overhead_s = 5;  // per RL step outside the phases: reward, advantages, data movement

  const DeviceCalibration& device(const std::string& name) const;
  const BackendCalibration& backend(TrainingBackend b) const { return b == TrainingBackend::kFsdp ? fsdp : megatron; }
  const EngineCalibration& engine(RolloutEngineKind e) const { return e == RolloutEngineKind::kVllm ? vllm : sglang; }
};

/// The built-in calibration (models/calibration/default.yaml, embedded at build time).
const Calibration& builtin_calibration();

/// Reads a calibration file (the format `rlsim calibrate` writes). Throws ScenarioError with
/// file:line:column for bad input (unknown key, value outside its bounds, time without a unit).
Calibration load_calibration(const std::string& path);

/// Parses calibration YAML `text`; `file` names it in messages.
Calibration parse_calibration(const std::string& text, const std::string& file);

/// The calibration as YAML, in the format load_calibration reads; `header` lines are written as
/// comments first. Values are written with 6 significant digits.
std::string calibration_yaml(const Calibration& c, const std::vector<std::string>& header = {});

/// The calibration values apply_calibration reads for `s` (its device's, engine's and backend's
/// entries, the MoE parameters and the step overhead), in a fixed order: two calibrations with
/// equal inputs give `s` the same cost parameters (`rlsim calibrate` reuses a record's simulation
/// when a parameter it does not read moves).
std::vector<double> calibration_inputs(const Calibration& c, const Scenario& s);

/// Sets the scenario's cost parameters from `c` (for its device, rollout engine and training
/// backend), keeping every value in `s.cost_overrides`. load_scenario applies the calibration it
/// is given; `rlsim calibrate` re-applies candidate calibrations to loaded records.
void apply_calibration(Scenario& s, const Calibration& c);

}  // namespace rlsim::sim
