// The typed, validated scenario (SCENARIO.md): what `rlsim run` simulates. Produced only by
// load_scenario(), which resolves catalog references and rejects bad input with file:line:column.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "models/hardware/device.h"
#include "models/llm/arch.h"
#include "models/precision/recipe.h"
#include "sim/scenario/distribution.h"

namespace rlsim::sim {

/// Where bad input was found, for callers that restate an error in their own terms (`rlsim plan`
/// names a swept key at the study file's line). A field the reader does not know stays empty / 0.
struct InputLocation {
  std::string file;            // the input file; empty when the input is not a file
  int line = 0;                // 1-based; 0 when unknown (an error in an override has none)
  int column = 0;              // 1-based; 0 when unknown
  std::string key;             // dotted path of the key at fault ("rollout.tensor_parallel"); empty: the whole input
  std::string override_text;   // "key=value" of the override the error is in; empty when it is in the file
  std::string override_label;  // how that override is named in messages ("--set", "sweep")

  /// The prefix of a message at this location: "file:line:column: " (file and line known),
  /// "file: " (file only), then "LABEL KEY=VALUE: " for an override; empty when nothing is known.
  std::string prefix() const;
};

/// Bad input: the message is where().prefix() followed by detail(), saying what was expected. The
/// CLI prints it and exits with status 2.
class ScenarioError : public std::runtime_error {
 public:
  /// An error whose message carries its own location (or has none): where() is empty.
  explicit ScenarioError(const std::string& message) : std::runtime_error(message), detail_(message) {}
  /// An error at `where`: the message is where.prefix() + detail.
  ScenarioError(InputLocation where, std::string detail)
      : std::runtime_error(where.prefix() + detail), where_(std::move(where)), detail_(std::move(detail)) {}

  const InputLocation& where() const noexcept { return where_; }
  /// The message without the location prefix.
  const std::string& detail() const noexcept { return detail_; }

 private:
  InputLocation where_;
  std::string detail_;
};

/// A ScenarioError for a key the format does not know (a typo, never a value out of range):
/// `rlsim plan` treats it as an error of the study, not as one invalid point.
class ScenarioKeyError : public ScenarioError {
 public:
  using ScenarioError::ScenarioError;
};

/// Efficiency factors: achieved fraction of a peak rate. Defaults are documented where set.
struct Efficiency {
  double memory = 0;       // of HBM bandwidth
  double compute = 0;      // of the dense tensor-core rate (MFU of the GEMMs)
  double comm = 0;         // of link bandwidth in collectives (NCCL bus bandwidth / link rate)
  double moe_compute = 0;  // training: of the tensor-core rate in routed-expert (grouped) GEMMs
  /// Training: forward-only passes (old log-prob, reference) relative to the update's GEMM rate:
  /// their micro-batches (log_prob_micro_batch_size) are smaller and their parameter gathers have
  /// no backward pass to hide behind (0-1].
  double forward = 1;
  /// Attention's FLOPs (QK^T, PV over the context) run at this fraction of the GEMMs' rate (device
  /// rate x `compute`) (0-1].
  /// Default: 1 (GPU engines' decode attention is memory-bound, priced by its KV reads, and flash
  /// attention in training runs near the GEMM rate); a CPU runtime's attention over small heads
  /// reaches far less (`rlsim bench host` measures it for the rollout engine and the trainer).
  double attention_compute = 1;
};

/// Cost parameters the scenario file sets itself (rollout.efficiency, rollout.overheads,
/// training.efficiency, training.step_overhead); a calibration (sim/scenario/calibration.h)
/// supplies every other one.
struct CostOverrides {
  std::optional<double> rollout_memory, rollout_compute, rollout_comm;
  std::optional<double> iteration_s, per_layer_s, moe_layer_s, per_sequence_s;
  std::optional<double> train_memory, train_compute, train_moe_compute, train_comm, train_forward;
  std::optional<double> step_overhead_s;
  std::optional<double> sync_per_matrix_s;  // weight_sync.per_matrix
};

struct ClusterConfig {
  models::Device device;     // cluster.device (required): a catalog name or an inline device
  int nodes = 1;             // cluster.nodes (required)
  int devices_per_node = 1;  // cluster.devices_per_node (required)
  models::Link intra_node;   // resolved: cluster override, else the device's default
  models::Link inter_node;
  models::Link host_link;
  int devices() const { return nodes * devices_per_node; }
};

enum class PlacementMode { kColocated, kDisaggregated };
struct PlacementConfig {
  PlacementMode mode = PlacementMode::kColocated;  // Default: colocated
  int rollout_devices = 0;                         // required when disaggregated; resolved: all devices when colocated
  int train_devices = 0;                           // required when disaggregated; resolved: all devices when colocated
};

enum class ScheduleMode { kSync, kOneStepOff, kAsync };
inline constexpr double kMaxStaleness = 16;
struct ScheduleConfig {
  ScheduleMode mode = ScheduleMode::kSync;  // Default: sync
  /// Async: between two weight updates at most (1 + staleness) x prompts_per_step prompt groups
  /// may start (verl fully_async staleness_threshold; above 1, whole batches ahead as AReaL's
  /// max_head_offpolicyness). At most kMaxStaleness. Default: 0.5.
  double staleness = 0.5;
  /// Async: sequences in flight at a weight update pause and resume under the new weights
  /// (verl fully_async partial_rollout), instead of finishing under the old ones. Default: false.
  bool partial_rollout = false;
};

struct WorkloadConfig {
  int prompts_per_step = 0;    // required
  int samples_per_prompt = 0;  // required (GRPO group size, verl rollout.n)
  LengthDist prompt_tokens;    // required
  LengthDist response_tokens;  // required
  int sequences_per_step() const { return prompts_per_step * samples_per_prompt; }
};

enum class RolloutEngineKind { kVllm, kSglang };
struct RolloutConfig {
  RolloutEngineKind engine = RolloutEngineKind::kVllm;  // Default: vllm
  int tensor_parallel = 1;                              // Default: 1
  /// Attention data-parallel ranks per engine (SGLang --enable-dp-attention --dp N, vLLM
  /// --data-parallel-size N with --enable-expert-parallel): each rank runs attention and the dense
  /// layers on its own sequences with its own KV cache, and the routed experts are spread over the
  /// whole engine of tensor_parallel x data_parallel devices. Default: 1 (one TP group per engine).
  int data_parallel = 1;
  int expert_parallel = 1;  // Default: 1; divides tensor_parallel x data_parallel
  /// Devices of one engine: tensor_parallel x data_parallel.
  int engine_devices() const { return tensor_parallel * data_parallel; }
  /// Sequences one engine runs at most: max_num_seqs on each vLLM DP rank (vLLM's data-parallel
  /// deployment runs an engine core, with its own scheduler, per rank), max_num_seqs in all for
  /// SGLang (its scheduler gives each DP-attention rank max_running_requests / dp_size: launch
  /// scripts pass dp x the per-rank count, e.g. sglang issue #6017's nodes x 2048 for 256 a rank).
  int engine_max_seqs() const { return engine == RolloutEngineKind::kVllm ? max_num_seqs * data_parallel : max_num_seqs; }
  /// Default: bf16. Its kv_cache is the engine's KV format (rollout.kv_cache sets it).
  models::Recipe precision;
  /// vLLM's max_num_seqs, per attention DP rank (each DP rank of a vLLM engine is an engine core
  /// with its own scheduler); SGLang's --max-running-requests, for the whole engine (SGLang
  /// divides it over the DP-attention ranks). engine_max_seqs() is the engine-wide limit.
  int max_num_seqs = 256;  // Default: 256
  /// Sequences handed to an engine per generate() call, the next call made only when every
  /// sequence of the last one has finished (OpenRLHF before 0.5: micro_rollout_batch_size prompts
  /// per call; DeepSpeed-Chat and TRL likewise): each call waits for its longest response.
  /// Default: 0 (the engine's whole share of a step at once, continuously batched).
  int generate_batch = 0;
  double memory_utilization = 0.85;  // Default: 0.85 (vLLM gpu_memory_utilization, fraction of device memory)
  /// Colocated placement: what the engine does with its memory while the trainer runs (vLLM
  /// sleep mode): 1 = weights offloaded to host memory and copied back at wake-up, KV cache
  /// discarded; 2 = weights and KV cache discarded (the weight sync refills them). Default: 1 for
  /// vLLM (its default level), 2 for SGLang (release_memory_occupation drops weights).
  int sleep_level = 1;
  bool enforce_eager = false;  // no CUDA graphs: its own per-layer launch overhead. Default: false
  /// CUDA graphs, activations, sampler workspace per device. Default: 5 GB (SGLang RL memory blog:
  /// 1-3 GB CUDA graphs + 3-7 GB buffers per GPU).
  double activation_buffer_bytes = 5e9;
  double iteration_overhead_s = 0;  // scheduler + sampling per engine step
  double layer_overhead_s = 0;      // non-GEMM kernels per layer per step (norms, rope, launch)
  double moe_layer_overhead_s = 0;  // extra kernels per MoE layer per step (router, top-k, permute)
  double sequence_overhead_s = 0;   // per running sequence per step (scheduler bookkeeping, sampler)
  /// Fraction of the weight-streaming bandwidth paged-attention decode reaches reading the KV
  /// cache (scattered blocks of a few KB, one head group per program) (0-1]; from the calibration.
  double attention_memory_efficiency = 1;
  /// Tokens per expert at which a grouped expert GEMM reaches half of its large-M efficiency.
  double moe_half_tokens = 0;
  /// Per-rank expert width at which the fused-MoE kernels stream routed-expert weights at half the
  /// dense weight-streaming bandwidth (Calibration::moe_half_width), columns.
  double moe_half_width = 0;
  Efficiency efficiency;
};

enum class TrainingBackend { kFsdp, kMegatron };
enum class CpuAdamKernel { kTorch, kDeepSpeed };
/// How a fixed-size training micro-batch is laid out (training.padding): packed without padding
/// (verl use_remove_padding, OpenRLHF --packing_samples, PR #449 of 2024-09); padded per
/// micro-batch as OpenRLHF laid it out before that (a forward-only pass: prompts left-padded to
/// the longest prompt, responses right-padded to the longest response; the update: whole
/// sequences left-padded to the longest); or every sequence padded to the longest prompt plus the longest
/// response the workload allows (verl without use_remove_padding: data.max_prompt_length +
/// rollout.response_length). The linears run on the padded tokens; flash attention skips the
/// padding (FlashAttention-2's variable-length kernel behind Hugging Face's attention mask).
enum class TrainPadding { kNone, kMicroBatch, kMaxLength };
struct OptimizerConfig {
  std::string name = "adam";                       // adam | adamw | sgd. Default: adam
  models::Element state = models::Element::kFp32;  // fp32 | bf16. Default: fp32
  /// States live in host memory between actor updates and come back for the step, which runs on
  /// the device (verl fsdp_config.optimizer_offload, actor.megatron.optimizer_offload). Default: false.
  bool offload = false;
  /// States stay in host memory and Adam runs on the host CPU; gradients go down and parameters
  /// come back every optimizer step (Megatron-Core optimizer_cpu_offload, offload fraction 1).
  /// Default: false.
  bool cpu_adam = false;
  /// The host Adam of cpu_adam: kTorch (torch.optim on the CPU shard, Megatron-Core's
  /// HybridDeviceOptimizer) or kDeepSpeed (DeepSpeedCPUAdam, the SIMD kernel of ZeRO-Offload that
  /// OpenRLHF's --adam_offload uses). Default: torch.
  CpuAdamKernel cpu_adam_kernel = CpuAdamKernel::kTorch;
};
/// How a trained model is laid out over its devices: the backend and Megatron's parallel sizes.
/// The actor's is the training section's; a critic or reward model may have its own.
struct ParallelLayout {
  TrainingBackend backend = TrainingBackend::kFsdp;  // Default: fsdp
  int tensor_parallel = 1;                           // Default: 1
  int pipeline_parallel = 1;                         // Default: 1
  int expert_parallel = 1;                           // Default: 1
  /// Megatron context parallel (--context-parallel-size): each sequence split over CP ranks with
  /// ring attention passing K/V between them; world = TP x CP x PP x DP. Default: 1.
  int context_parallel = 1;
  /// Megatron --expert-tensor-parallel-size: each routed expert split over ETP ranks; EP x ETP
  /// divides TP x CP x DP. Default: 1 (rlsim's earlier assumption with EP).
  int expert_tensor_parallel = 1;
  /// Megatron --num-layers-per-virtual-pipeline-stage as stages per rank (interleaved 1F1B): the
  /// bubble shrinks to (PP - 1) / (V m + PP - 1). Default: 1.
  int virtual_pipeline = 1;
  /// Megatron --sequence-parallel: norms, dropout and residuals split over TP (Korthikanti et al.
  /// 2022). Default: true (the activation model rlsim has always used).
  bool sequence_parallel = true;
  /// Ranks sharing one copy of the parameters' shard: TP x CP x PP (data parallel = devices / it).
  int model_parallel() const { return tensor_parallel * context_parallel * pipeline_parallel; }
};

struct TrainingConfig : ParallelLayout {
  models::Recipe precision;  // Default: bf16
  int ppo_epochs = 1;        // Default: 1
  int mini_batches = 1;      // optimizer steps per PPO epoch. Default: 1
  /// verl use_dynamic_bsz: micro-batches packed up to a token budget per device (true), or a
  /// fixed number of sequences per micro-batch (false, ppo_micro_batch_size_per_gpu). Default: true.
  bool dynamic_batching = true;
  std::int64_t micro_batch_tokens = 16384;          // ppo_max_token_len_per_gpu (dynamic batching). Default: 16384
  std::int64_t logprob_micro_batch_tokens = 16384;  // log_prob_max_token_len_per_gpu. Default: micro_batch_tokens
  int micro_batch_sequences = 8;                    // ppo_micro_batch_size_per_gpu (fixed batching). Default: 8
  int logprob_micro_batch_sequences = 8;            // log_prob_micro_batch_size_per_gpu. Default: micro_batch_sequences
  TrainPadding padding = TrainPadding::kNone;       // training.padding (fixed batching only). Default: none
  bool recompute_old_logprob = true;                // old log-probs recomputed by the trainer. Default: true
  bool reference_model = true;                      // a KL reference forward (verl use_kl_loss). Default: true
  bool activation_checkpointing = true;             // verl enable_gradient_checkpointing. Default: true
  /// Parameters (actor and reference) live in host memory outside the training phases and the
  /// weight sync (verl fsdp_config.param_offload / megatron.param_offload). Default: false.
  bool param_offload = false;
  OptimizerConfig optimizer;
  Efficiency efficiency;
  /// Fixed time per RL step outside the phases (reward, advantages, data movement), seconds.
  double step_overhead_s = 0;
};

enum class WeightSyncMethod { kAuto, kCudaIpc, kNcclBroadcast };
struct WeightSyncConfig {
  /// Default: auto (CUDA IPC when colocated, NCCL broadcast when disaggregated).
  WeightSyncMethod method = WeightSyncMethod::kAuto;
  double bucket_bytes = 512.0 * 1024 * 1024;  // Default: 512 MiB
  /// Host-side cost per weight matrix in the sync path (name mapping, gather launch, bucket
  /// packing) and per matrix quantised on the fly; from the calibration (seconds).
  double per_matrix_s = 0;
  double quantize_per_matrix_s = 0;
};

struct OutputConfig {
  std::string dir;    // Default: out/<file stem>
  bool plots = true;  // Default: true
  bool trace = true;  // Default: true (Chrome trace JSON)
  /// Engine iterations written to trace.json; later ones are left out (with a warning), phases and
  /// memory counters never are. About 250 bytes each: the default keeps the file near 250 MB,
  /// which Perfetto and chrome://tracing still open. Default: 1,000,000.
  std::int64_t trace_max_iterations = 1'000'000;
};

/// The RL algorithm (verl algorithm.adv_estimator, OpenRLHF --advantage_estimator). GRPO,
/// REINFORCE++ and RLOO differ only in how advantages are computed from the rewards (a negligible
/// cost, inside step_overhead); PPO adds a critic trained beside the actor (GAE advantages from its
/// values), and any of them may score responses with a separate reward model.
enum class Algorithm { kGrpo, kPpo, kReinforcePlusPlus, kRloo };

/// Where a critic or reward model runs (OpenRLHF's Ray placement): on the actor's training
/// devices, one pass after another with the actor's (verl; OpenRLHF --colocate_all_models); on the
/// critic's devices (a reward model only: OpenRLHF --colocate_critic_reward); or on a group of its
/// own (OpenRLHF --critic_num_gpus_per_node / --reward_num_gpus_per_node), where its passes run
/// concurrently with the actor's: its forward beside the actor's old-log-prob and reference
/// passes, the critic's update beside the actor's (OpenRLHF ppo_actor.py ppo_train).
enum class AuxPlacement { kActor, kCritic, kSeparate };

/// A model the trainer runs besides the actor: the PPO critic, or a reward model. It uses the
/// training section's backend and parallel layout (TP, CP, PP, EP) on the devices `placement`
/// gives it, data parallel over the rest.
struct AuxModelConfig {
  models::ModelArch model;   // Default: the actor's model
  models::Recipe precision;  // Default: training.precision
  /// Its backend and parallel sizes (verl critic.strategy, critic.megatron.*_parallel_size).
  /// Default: the training section's.
  ParallelLayout layout;
  AuxPlacement placement = AuxPlacement::kActor;  // Default: actor
  /// Devices of its own group (placement separate, which needs placement.mode disaggregated);
  /// 0 otherwise.
  int devices = 0;
};

struct AlgorithmConfig {
  Algorithm name = Algorithm::kGrpo;  // Default: grpo
  /// PPO's critic (value model: the model with a scalar value head instead of the LM head).
  /// Present exactly when name is ppo.
  std::optional<AuxModelConfig> critic;
  /// A reward model's forward pass over every sequence (verl reward_model.enable, OpenRLHF
  /// --reward_pretrain). Default: none (rule-based or verifier rewards, inside step_overhead).
  std::optional<AuxModelConfig> reward_model;
  /// Where the KL reference's forward pass runs (training.reference_model): absent or placement
  /// actor, on the actor's devices after its old-log-prob pass; placement separate, on a group of
  /// its own beside the actor's passes (OpenRLHF --ref_num_gpus_per_node without
  /// --colocate_actor_ref). Its model and precision are always the actor's (the initial policy);
  /// its layout is the training section's unless it sets its own. Default: none.
  std::optional<AuxModelConfig> reference;
  /// Whether the reference runs on devices of its own.
  bool reference_separate() const { return reference && reference->placement == AuxPlacement::kSeparate; }
};

struct Scenario {
  std::string name;
  std::string file;        // path of the scenario file as given
  std::uint64_t seed = 0;  // Default: 0
  int steps = 3;           // RL steps simulated. Default: 3
  models::ModelArch model;
  ClusterConfig cluster;
  PlacementConfig placement;
  ScheduleConfig schedule;
  WorkloadConfig workload;
  RolloutConfig rollout;
  TrainingConfig training;
  AlgorithmConfig algorithm;
  WeightSyncConfig weight_sync;
  OutputConfig output;
  CostOverrides cost_overrides;  // what the file set; apply_calibration keeps these
};

/// Loads and validates a scenario file. `overrides` are "dotted.key=value" strings (--set),
/// applied in order before validation; the value is parsed as YAML. An error in or about an
/// overridden key names the override as "<override_label> key=value: ..." ("--set" for
/// `rlsim run`, "sweep" for a point of `rlsim plan`). Throws ScenarioError on any bad input:
/// unreadable file, YAML syntax, missing required key, value without unit, unknown catalog
/// name, inconsistent parallelism; ScenarioKeyError for an unknown key.
///
/// Efficiency and overhead defaults come from `calibration` (the built-in calibration when null;
/// sim/scenario/calibration.h). A top-level `validation:` block (a validation record's published
/// figures, read by `rlsim validate`) is allowed and ignored here.
struct Calibration;
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides = {},
                       const std::string& override_label = "--set", const Calibration* calibration = nullptr);

/// The fully resolved scenario as YAML (every default made explicit, units canonical).
std::string resolved_yaml(const Scenario& s);

/// What the precision-flow check reads, as resolved YAML: the model, the training and rollout
/// recipes and the rollout's KV-cache format, written as resolved_yaml writes them. Equal text
/// means an equal verdict (`rlsim plan` caches verdicts by it).
std::string resolved_precision_flow_yaml(const Scenario& s);

/// Catalog look-ups, for `rlsim catalog` and tests. Throw ScenarioError for unknown names.
models::Device catalog_device(const std::string& name);
models::ModelArch catalog_model(const std::string& name);
std::vector<std::string> catalog_device_names();
std::vector<std::string> catalog_model_names();

/// Reads a Hugging Face config.json into an architecture (Llama, Qwen2/3, Qwen3-MoE,
/// DeepSeek-V3 / Kimi-K2 keys). Throws ScenarioError naming the file and the missing key.
models::ModelArch model_from_hf_config(const std::string& path);

/// The scenario file's name of each value of an enumeration, in the order its errors list them:
/// the one table the loader reads (Map::choice) and --print-config, the outputs and the importers
/// write.
template <typename E>
using NameTable = std::vector<std::pair<std::string, E>>;
const NameTable<ScheduleMode>& schedule_names();          // sync, one-step-off, async
const NameTable<PlacementMode>& placement_names();        // colocated, disaggregated
const NameTable<RolloutEngineKind>& engine_names();       // vllm, sglang
const NameTable<TrainingBackend>& backend_names();        // fsdp, megatron
const NameTable<TrainPadding>& padding_names();           // none, micro_batch, max_length
const NameTable<CpuAdamKernel>& cpu_adam_kernel_names();  // torch, deepspeed
const NameTable<Algorithm>& algorithm_names();            // grpo, ppo, reinforce++, rloo
const NameTable<AuxPlacement>& aux_placement_names();     // actor, critic, separate
const NameTable<WeightSyncMethod>& weight_sync_names();   // auto, cuda-ipc, nccl-broadcast

/// The name of `v` in table `t`. std::logic_error when the table has none (a value outside the
/// enumeration: a bug).
template <typename E>
const std::string& name_in(const NameTable<E>& t, E v) {
  for (const auto& [name, value] : t) {
    if (value == v) return name;
  }
  throw std::logic_error("name_in: a value with no name in its table");
}

inline std::string_view schedule_name(ScheduleMode m) { return name_in(schedule_names(), m); }
inline std::string_view placement_name(PlacementMode m) { return name_in(placement_names(), m); }
inline std::string_view aux_placement_name(AuxPlacement p) { return name_in(aux_placement_names(), p); }

}  // namespace rlsim::sim
