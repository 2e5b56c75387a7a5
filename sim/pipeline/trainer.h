// Training-side cost model: log-prob recompute, reference forward, actor update (PPO epochs x
// mini-batches), FSDP or Megatron collectives, optimizer step, per-device memory, weight sync.
#pragma once

#include <cstdint>
#include <vector>

#include "models/precision/footprint.h"
#include "sim/scenario/scenario.h"

namespace rlsim::sim {

/// Token counts of one step's batch, as the trainer sees it.
struct TrainBatch {
  double tokens = 0;           // sum of prompt + response tokens
  double sequences = 0;        // sequences in the batch
  double attention_flops = 0;  // sum over sequences of causal_attention_flops(length), full model
  double max_sequence = 0;     // longest sequence (tokens), sizes the activation peak
  /// Padding tokens training.padding adds to the linears' work of a forward-only pass and of the
  /// update (micro-batches of logprob_micro_batch_sequences and of micro_batch_sequences
  /// sequences, taken in step order); 0 without padding.
  double forward_padding = 0, update_padding = 0;
  double padded_row = 0;  // longest micro-batch row with its padding (0: no padding)
  /// Tokens the linears of a pass run on: the sequences' own plus the pass's padding.
  double linear_tokens(bool update) const { return tokens + (update ? update_padding : forward_padding); }
  /// Longest row of a micro-batch, padding included: sizes a fixed micro-batch's activations.
  double longest_row() const { return padded_row > max_sequence ? padded_row : max_sequence; }
  /// Data-parallel load imbalance (>= 1): the slowest DP rank's work times the DP size over the
  /// total work, whole sequences going to ranks (dp_imbalance); 1 when the batch was not split.
  /// verl balances the whole batch before it splits mini-batches, so every pass sees this one.
  double imbalance = 1;
};

/// Imbalance of spreading sequences of `work` (any additive cost, e.g. FLOPs) over `ranks`
/// data-parallel ranks by the longest-processing-time rule (a sequence to the least-loaded rank,
/// longest first; Graham 1969, within 4/3 of optimal; verl balances ranks by token count the same
/// way, seqlen_balancing.py): max rank load x ranks / total work. 1 for an empty batch or one rank.
double dp_imbalance(const std::vector<double>& work, int ranks);

/// Time of the training phases of one step (seconds) and what bounds them.
struct TrainTimes {
  double old_logprob = 0;
  double reference = 0;
  double actor_update = 0;
  double compute_s = 0;  // GEMM + attention time inside the phases above
  double comm_s = 0;     // exposed collective time inside the phases above
};

/// Weight-sync time split (seconds).
struct SyncTimes {
  double gather = 0;    // FSDP all-gather / Megatron gather of the full BF16 weights
  double transfer = 0;  // CUDA IPC hand-over or NCCL broadcast to the rollout engines
  double quantize = 0;  // on-the-fly quantisation of each BF16 bucket to the rollout format
  double repack = 0;    // reload of a quantised engine: restore the checkpoint layout, then transform again
  double load = 0;      // engine load_weights copy
  double total() const { return gather + transfer + quantize + repack + load; }
};

/// Per-device memory of the training role (bytes).
struct TrainMemory {
  double params = 0;         // sharded parameters (master_weights dtype)
  double grads = 0;          // sharded gradients (fp32 reduce dtype under FSDP mixed precision)
  double optimizer = 0;      // sharded optimizer states (+ FP32 master copy when params are BF16)
  double reference = 0;      // sharded reference-model parameters
  double activations = 0;    // peak activations of one micro-batch (backward, with checkpointing)
  double logits = 0;         // FP32 logits + log-softmax of one micro-batch
  double gather_buffer = 0;  // unsharded parameters during compute (FSDP: one layer; sync: all)
};

/// Host-CPU Adam throughput of one node (parameters per second): PyTorch's CPU Adam takes 1.39 s
/// per billion parameters on a two-socket server (Ren et al. 2021, "ZeRO-Offload", sec. 5.1 /
/// Table 3); Megatron's HybridDeviceOptimizer runs torch.optim on the CPU shard.
inline constexpr double kCpuAdamParamsPerSPerNode = 1e9 / 1.39;
/// DeepSpeedCPUAdam's throughput on the same server: 0.22 s per billion parameters (the same
/// table's CPU-Adam column, 1B row; AVX-512 with OpenMP over the cores), 6.3x PyTorch's, within
/// the "5X-7X faster" of DeepSpeed's ZeRO-Offload tutorial (deepspeed.ai/tutorials/zero-offload).
inline constexpr double kDeepSpeedCpuAdamParamsPerSPerNode = 1e9 / 0.22;

/// Training cost model over `train_devices` devices.
///
/// FLOPs (Narayanan et al. 2021, sec. 5.1): forward = 2 N_active T + attention; backward = 2x
/// forward; activation checkpointing recomputes the forward once more. Time = FLOPs /
/// (devices * rate(recipe) * eff_compute), overlapped with FSDP collectives (ZeRO-3: all-gather
/// of BF16 parameters for forward and backward, reduce-scatter of FP32 gradients, per
/// micro-batch), so a pass costs max(compute, comm). Megatron: TP all-reduces of activations
/// (4 per layer per token, exposed), EP dispatch/combine all-to-alls per MoE layer (exposed),
/// pipeline bubble (p-1)/(m+p-1) (Narayanan et al. 2021, eq. 1), DP gradient all-reduce.
/// What the model's last layer computes: the LM head's vocabulary logits (actor, reference), or a
/// scalar value per token (a PPO critic's or a reward model's value head: the LM head's GEMM and
/// its vocabulary-wide logits are gone, a hidden x 1 projection takes their place).
enum class ModelHead { kLanguage, kValue };

class TrainerCostModel {
 public:
  /// The trainer of `s.model` in `s.training`'s layout; `s` must outlive the model.
  explicit TrainerCostModel(const Scenario& s, ModelHead head = ModelHead::kLanguage);

  TrainTimes phase_times(const TrainBatch& batch) const;
  TrainMemory memory(const TrainBatch& batch) const;
  /// Weight sync of one step. Colocated (or method cuda-ipc): FSDP/Megatron all-gather of the BF16
  /// weights, then CUDA IPC handles per bucket. Disaggregated (or nccl-broadcast): the gather, then a
  /// pipelined NCCL broadcast of BF16 buckets from a training rank to every rollout engine over the
  /// inter-node links (verl one_step_off / fully_async ParameterSynchronizer). On the rollout side,
  /// per bucket: quantisation to the rollout format (read BF16, write the format) and, for a
  /// quantised engine, the reload sequence of vLLM / SGLang RL weight updates: restore the
  /// checkpoint layout of the quantised tensors (undo process_weights_after_loading: FP8 scale
  /// transposes, Marlin INT4 tile permutation, MX scale swizzles, Ascend's (in, out) weight
  /// transpose), load, and transform again; each is a read + write of the quantised bytes at HBM
  /// bandwidth x rollout memory efficiency. `rollout_weight_bytes_total` is the full model in the
  /// rollout recipe's formats (bytes). `rollout_bytes_per_device` > 0: the engine is resharded
  /// for wide expert parallelism (rollout.data_parallel), and each device receives, quantises and
  /// loads that many bytes (its TP share of the dense weights and its experts) instead of 1/TP.
  SyncTimes weight_sync(double rollout_weight_bytes_total, int rollout_devices, int rollout_tp,
                        double rollout_bytes_per_device = 0.0) const;
  /// Megatron context parallel (training.context_parallel): seconds of ring-attention K/V traffic
  /// not hidden behind attention compute in one pass of `flop_factor` forward equivalents over
  /// `mb` micro-batches of `mb_tokens_rank` tokens per CP rank: per layer, flop_factor x (CP - 1)
  /// hops of the rank's K/V chunk (bytes / TP) on the TP x CP group's link, minus that layer's
  /// attention time (Liu et al. 2023, "Ring Attention"; Megatron-Core's CP overlaps the two). 0 for CP 1.
  double ring_attention_exposed_s(const TrainBatch& batch, double flop_factor, double mb_tokens_rank, double mb) const;
  /// Optimizer offload (verl optimizer_offload, FSDP or Megatron): time to move one device's
  /// optimizer states over the host link, one direction (in for the update, out after it).
  double optimizer_offload_s() const;
  /// CPU Adam (optimizer.cpu_adam; Megatron-Core optimizer_cpu_offload, offload fraction 1): the states never leave
  /// host memory; per optimizer step FP32 gradients go to the host and BF16 parameters come back
  /// over the host link, overlapped with the Adam step on the host CPU
  /// (overlap_cpu_optimizer_d2h_h2d), whose rate is kCpuAdamParamsPerSPerNode shared by the node's
  /// devices. Seconds per RL step (all mini-batches and epochs).
  double cpu_optimizer_s() const;
  /// Whether optimizer states stay in host memory and Adam runs on the CPU (optimizer.cpu_adam).
  bool cpu_optimizer() const;
  /// Whether gradients leave the device as they are reduced: CPU Adam with DeepSpeed's kernel,
  /// which runs under ZeRO-Offload (Ren et al. 2021, sec. 4.1). The device then holds one
  /// layer's gradients (TrainMemory::grads) instead of its whole shard's.
  bool zero_offload() const;
  /// ZeRO-Offload's gradient accumulation over `micro_batches` micro-batches of an update, in
  /// seconds of host-link time per device: the gradient-accumulation buffer of the device's
  /// partition lives in pinned host memory (DeepSpeed ZeRO-3 with offload_optimizer,
  /// stage3.py grad_partitions_flat_buffer, in data_types.grad_accum_dtype: FP32 in OpenRLHF's
  /// DeepSpeed config), and each micro-batch's reduced partition goes to the host and comes back
  /// to the device for the next micro-batch's addition ("copy first to src device, do the
  /// addition there, then move back to dst", stage3.py partition_grads): two copies of
  /// params / devices x gradient width per micro-batch. The boundary copy into the FP32 master's
  /// gradient is cpu_optimizer_s's. Queued behind the reduce-scatters on their stream, so a pass
  /// ends no earlier than its first forward + reduce-scatters + these copies.
  double host_gradient_accumulation_s(double micro_batches) const;

  int devices() const { return devices_; }
  /// FLOPs of one forward-only pass over the batch: 2 x matmul parameters x its linear tokens
  /// (padding included) + causal attention.
  double forward_flops(const TrainBatch& batch) const;
  /// Micro-batches each device runs in the update (`update`, all mini-batches) or in one
  /// forward-only pass: per mini-batch, the device's share of tokens over the token budget
  /// (dynamic batching) or of sequences over the sequences per micro-batch, at least one.
  double micro_batches_per_device(const TrainBatch& batch, bool update) const;
  /// Tokens of the largest micro-batch a device holds in the update or a forward-only pass.
  double micro_batch_tokens(const TrainBatch& batch, bool update) const;
  /// Seconds of GEMM and attention compute of `flop_factor` forward-equivalent passes over
  /// `batch` on each device: dense FLOPs at the dense rate, routed-expert FLOPs at the MoE rate.
  double compute_s(const TrainBatch& batch, double flop_factor) const;

 private:
  double pass_s(const TrainBatch& batch, double flop_factor, double comm_passes_ag, double comm_passes_rs, double* compute,
                double* comm) const;
  const Scenario& s_;
  int devices_;
  double params_ = 0;
  double matmul_params_ = 0;
  double rate_ = 0;                   // FLOP/s of dense GEMMs and attention per device
  double attention_cost_factor_ = 1;  // 1 / efficiency.attention_compute (exactly 1 by default)
  double moe_rate_ = 0;               // FLOP/s of routed-expert GEMMs per device
  double active_expert_params_ = 0;   // routed-expert matmul parameters one token passes through
  models::Link dp_link_;
  models::Link tp_link_;
  models::Link ep_link_;
  models::Link cp_link_;        // ring attention: CP ranks sit next to the TP ranks (Megatron's tp-cp-ep-dp-pp order)
  double expert_params_ = 0;    // routed-expert parameters (all MoE layers)
  models::ParamWidths widths_;  // bytes per parameter of the training recipe's tensor classes
  double hidden_bytes_ = 0;     // bytes of one token's hidden state (TP all-reduce, EP all-to-all)
  double logit_bytes_ = 0;      // bytes of one logit (the recipe's softmax element)
  double head_outputs_ = 0;     // outputs per token of the last layer: the vocabulary, or 1 (value head)
};

}  // namespace rlsim::sim
