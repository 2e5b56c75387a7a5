#include "sim/pipeline/trainer.h"

#include <algorithm>
#include <cmath>

#include "models/precision/footprint.h"
#include "sim/pipeline/collectives.h"

namespace rlsim::sim {

namespace {
using models::element_bytes;

// Bytes per parameter of the FP32 master copy mixed-precision Adam keeps when its states are
// FP32 but the parameters are stored narrower (Micikevicius et al. 2018, "Mixed Precision
// Training"); 0 when the parameters already are the master copy.
double master_copy_bytes(const TrainingConfig& t) {
  const double fp32 = element_bytes(models::Element::kFp32);
  return t.optimizer.state == models::Element::kFp32 && element_bytes(t.precision.master_weights) < fp32 ? fp32 : 0.0;
}
}  // namespace

double dp_imbalance(const std::vector<double>& work, int ranks) {
  double total = 0;
  for (double w : work) total += w;
  if (ranks <= 1 || total <= 0) return 1.0;
  std::vector<double> sorted = work;
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  // Min-heap of rank loads: each sequence goes to the least-loaded rank.
  std::vector<double> load(static_cast<std::size_t>(ranks), 0.0);
  for (double w : sorted) {
    std::pop_heap(load.begin(), load.end(), std::greater<>());
    load.back() += w;
    std::push_heap(load.begin(), load.end(), std::greater<>());
  }
  const double sum_max = *std::max_element(load.begin(), load.end());
  return std::max(1.0, sum_max * ranks / total);
}

TrainerCostModel::TrainerCostModel(const Scenario& s, ModelHead head) : s_(s), devices_(s.placement.train_devices) {
  widths_ = models::param_widths(s.training.precision);
  hidden_bytes_ = models::element_bytes(s.training.precision.hidden_element());
  logit_bytes_ = models::element_bytes(s.training.precision.softmax);
  params_ = static_cast<double>(s.model.params().total());
  matmul_params_ = static_cast<double>(s.model.active_matmul_params());
  head_outputs_ = static_cast<double>(s.model.vocab);
  if (head == ModelHead::kValue) {
    // The vocab x hidden LM head becomes a hidden x 1 value head (an untied head's parameters go too).
    const double lm_head = static_cast<double>(s.model.vocab) * s.model.hidden;
    matmul_params_ += s.model.hidden - lm_head;
    if (!s.model.tied_embeddings) params_ += s.model.hidden - lm_head;
    head_outputs_ = 1;
  }
  const auto& recipe = s.training.precision;
  const double peak = s.cluster.device.rate(recipe.linear.compute(recipe.mode));
  rate_ = peak * s.training.efficiency.compute;
  attention_cost_factor_ = 1.0 / s.training.efficiency.attention_compute;
  moe_rate_ = peak * s.training.efficiency.moe_compute;
  dp_link_ = group_link(devices_, s.cluster.devices_per_node, s.cluster.intra_node, s.cluster.inter_node);
  tp_link_ = group_link(s.training.tensor_parallel, s.cluster.devices_per_node, s.cluster.intra_node, s.cluster.inter_node);
  ep_link_ = group_link(s.training.expert_parallel, s.cluster.devices_per_node, s.cluster.intra_node, s.cluster.inter_node);
  cp_link_ = group_link(s.training.tensor_parallel * s.training.context_parallel, s.cluster.devices_per_node,
                        s.cluster.intra_node, s.cluster.inter_node);
  for (const auto& l : s.model.linear_shapes()) {
    if (l.kind == models::LinearKind::kRoutedExpert) expert_params_ += static_cast<double>(l.count) * l.out * l.in;
  }
  if (s.model.moe) active_expert_params_ = expert_params_ * s.model.moe->active / s.model.moe->experts;
}

double TrainerCostModel::compute_s(const TrainBatch& b, double flop_factor) const {
  // The slowest data-parallel rank sets the pace (TrainBatch::imbalance); forward-only passes
  // (flop_factor 1) run at the forward-pass efficiency. The linears run on the padded tokens,
  // attention on the sequences' own (TrainPadding).
  const bool update = flop_factor > 1.5;
  const double tokens = b.linear_tokens(update);
  // Routed-expert GEMMs (grouped, over the tokens each expert received) run at their own rate.
  const double dense_flops = 2.0 * (matmul_params_ - active_expert_params_) * tokens + b.attention_flops * attention_cost_factor_;
  const double expert_flops = 2.0 * active_expert_params_ * tokens;
  const double forward = update ? 1.0 : s_.training.efficiency.forward;
  return b.imbalance / forward * flop_factor * (dense_flops / rate_ + (expert_flops > 0 ? expert_flops / moe_rate_ : 0.0)) /
         devices_;
}

double TrainerCostModel::forward_flops(const TrainBatch& b) const {
  return 2.0 * matmul_params_ * b.linear_tokens(false) + b.attention_flops;
}

double TrainerCostModel::micro_batches_per_device(const TrainBatch& b, bool update) const {
  const auto& t = s_.training;
  const int dp = devices_ / t.model_parallel();
  // The actor update runs mini-batch by mini-batch (an optimizer step after each), so each one is
  // cut into micro-batches of its own; forward-only passes cut the whole batch, with their own
  // (log-prob) micro-batch size.
  const int groups = update ? t.mini_batches : 1;
  const double per_group =
      t.dynamic_batching
          ? b.tokens / groups / dp / static_cast<double>(update ? t.micro_batch_tokens : t.logprob_micro_batch_tokens)
          : b.sequences / groups / dp / static_cast<double>(update ? t.micro_batch_sequences : t.logprob_micro_batch_sequences);
  return groups * std::max(1.0, std::ceil(per_group));
}

double TrainerCostModel::micro_batch_tokens(const TrainBatch& b, bool update) const {
  const auto& t = s_.training;
  // Dynamic batching packs sequences up to the budget, but a single sequence longer than that is
  // a micro-batch on its own; fixed batching holds its sequences whole, at worst all of the
  // longest row (its padding included under training.padding).
  if (t.dynamic_batching) {
    return std::max(static_cast<double>(update ? t.micro_batch_tokens : t.logprob_micro_batch_tokens), b.max_sequence);
  }
  return (update ? t.micro_batch_sequences : t.logprob_micro_batch_sequences) * b.longest_row();
}

double TrainerCostModel::pass_s(const TrainBatch& b, double flop_factor, double ag_passes, double rs_passes, double* compute,
                                double* comm) const {
  const auto& t = s_.training;
  double c = compute_s(b, flop_factor);
  // QAT fake quantisation: a quantise-dequantise pass over the weights per forward (memory bound,
  // read + write in the master format), per micro-batch, on each device's share of the gathered weights.
  if (t.precision.mode == models::QuantMode::kFake) {
    const double fq_bytes = 2.0 * widths_.master * params_ / std::max(1, t.tensor_parallel * t.pipeline_parallel);
    c += micro_batches_per_device(b, rs_passes > 0) * (flop_factor > 1.5 ? 2.0 : 1.0) * fq_bytes /
         (s_.cluster.device.memory_bandwidth_bytes_per_s * t.efficiency.memory);
  }
  double x = 0;
  const double eff = t.efficiency.comm;
  const double mb = micro_batches_per_device(b, rs_passes > 0);
  if (t.backend == TrainingBackend::kFsdp) {
    const double reduces = mb * rs_passes * reduce_scatter_s(params_ * widths_.gradient, devices_, dp_link_, eff);
    x = mb * ag_passes * all_gather_s(params_ * widths_.sync, devices_, dp_link_, eff) + reduces;
    double pass = std::max(c, x);
    // ZeRO-Offload: each reduced gradient partition is accumulated in host memory, on the stream
    // of the reduce-scatters, from the backward's start (after the pass's first forward) on.
    if (rs_passes > 0 && zero_offload()) pass = std::max(pass, c / flop_factor + reduces + host_gradient_accumulation_s(mb));
    *compute += c;
    *comm += pass - c;
    return pass;
  }
  // Megatron: TP all-reduces are on the critical path; DP gradient all-reduce once per update.
  const int tp = t.tensor_parallel, pp = t.pipeline_parallel, cp = t.context_parallel;
  const int dp = devices_ / t.model_parallel();
  // A CP rank holds 1/CP of each micro-batch's tokens (padding included).
  const double pass_tokens = b.linear_tokens(rs_passes > 0);
  const double mb_tokens_rank = pass_tokens / dp / mb / cp;
  const double tp_ar = tp > 1 ? (2.0 * flop_factor) * s_.model.layers / pp *
                                    all_reduce_s(mb_tokens_rank * s_.model.hidden * hidden_bytes_, tp, tp_link_, eff) * mb
                              : 0.0;
  const double ring = cp > 1 ? ring_attention_exposed_s(b, flop_factor, mb_tokens_rank, mb) : 0.0;
  // Expert parallelism (Megatron expert-model parallel, sequence parallel with TP): per MoE layer
  // a dispatch and a combine all-to-all of each rank's tokens x top-k x hidden (BF16), once per
  // forward-equivalent pass (flop_factor), over the EP group.
  double ep_a2a = 0;
  const int ep = t.expert_parallel;
  if (ep > 1 && s_.model.moe) {
    const double tokens_rank = pass_tokens / (dp * cp * tp) / mb;
    const double bytes = tokens_rank * s_.model.moe->active * s_.model.hidden * hidden_bytes_;
    // Expert tensor parallel: the dispatched tokens are all-gathered into each expert's ETP group
    // and its partial outputs reduce-scattered (Megatron's MoE token dispatcher with ETP > 1).
    const int etp = t.expert_tensor_parallel;
    const double etp_s = etp > 1 ? 2.0 * all_gather_s(bytes * etp, etp, tp_link_, eff) : 0.0;
    ep_a2a = flop_factor * s_.model.moe_layers() / pp * (2.0 * all_to_all_s(bytes, ep, ep_link_, eff) + etp_s) * mb;
  }
  // The pipeline flushes at every optimizer step: the bubble counts the micro-batches of one
  // mini-batch in the update, of the whole batch in forward-only passes.
  const double mb_flush = std::max(1.0, rs_passes > 0 ? mb / t.mini_batches : mb);
  // Interleaved 1F1B with V stages per rank: (PP - 1) / (V m + PP - 1) (Narayanan et al. 2021, sec. 2.2).
  const double bubble = (pp - 1) / (t.virtual_pipeline * mb_flush + pp - 1);
  // Gradients are reduced over every rank holding the same shard: DP x CP.
  const double dp_ar = rs_passes > 0 ? all_reduce_s(params_ / (tp * pp) * widths_.gradient, dp * cp, dp_link_, eff) : 0.0;
  *compute += c;
  x = tp_ar + ep_a2a + ring + dp_ar;
  *comm += x;
  return (c + tp_ar + ep_a2a + ring) / (1.0 - bubble) + dp_ar;
}

double TrainerCostModel::ring_attention_exposed_s(const TrainBatch& b, double flop_factor, double mb_tokens_rank,
                                                  double mb) const {
  const auto& t = s_.training;
  const auto& m = s_.model;
  const int cp = t.context_parallel, pp = t.pipeline_parallel;
  // K and V of one token in one layer as attention uses them (MLA materialises per-head keys and
  // values in training), split over the TP ranks by head.
  const double kv_elements =
      m.mla ? static_cast<double>(m.heads) * (m.mla->qk_nope_head_dim + m.mla->qk_rope_head_dim + m.mla->v_head_dim)
            : 2.0 * m.kv_heads * m.head_dim;
  const double chunk = mb_tokens_rank * kv_elements * hidden_bytes_ / t.tensor_parallel;
  // Ring attention (Megatron CP, Liu et al. 2023): CP - 1 hops of the local K/V chunk per layer in
  // each forward-equivalent pass (flop_factor: the backward also moves dK/dV), overlapped with
  // that layer's attention; only the excess is exposed.
  const double ring =
      flop_factor * (cp - 1) * (chunk / (cp_link_.bandwidth_bytes_per_s * t.efficiency.comm) + cp_link_.latency_s);
  const double layers_here = static_cast<double>(m.layers) / pp;
  const double attention = flop_factor * b.attention_flops * attention_cost_factor_ / rate_ / devices_ / layers_here / mb;
  return std::max(0.0, ring - attention) * layers_here * mb;
}

TrainTimes TrainerCostModel::phase_times(const TrainBatch& b) const {
  const auto& t = s_.training;
  TrainTimes out;
  // Forward-only passes gather parameters once per micro-batch.
  if (t.recompute_old_logprob) out.old_logprob = pass_s(b, 1.0, 1.0, 0.0, &out.compute_s, &out.comm_s);
  if (t.reference_model) out.reference = pass_s(b, 1.0, 1.0, 0.0, &out.compute_s, &out.comm_s);
  // Forward + backward (2x) + checkpoint recompute (1x); FSDP gathers for forward and backward,
  // (and again for the recompute), and reduce-scatters gradients once.
  const double factor = 3.0 + (t.activation_checkpointing ? 1.0 : 0.0);
  const double ag = t.activation_checkpointing ? 3.0 : 2.0;
  double update = 0;
  for (int e = 0; e < t.ppo_epochs; ++e) update += pass_s(b, factor, ag, 1.0, &out.compute_s, &out.comm_s);
  // Adam step per mini-batch: memory bound over the device's shard: read params, grads, m, v,
  // master; write params, m, v, master.
  const double state = element_bytes(t.optimizer.state);
  const double master = element_bytes(t.precision.master_weights);
  const double bytes_per_param = 2 * master + widths_.gradient + 4 * state + 2 * master_copy_bytes(t);
  const double adam =
      params_ / devices_ * bytes_per_param / (s_.cluster.device.memory_bandwidth_bytes_per_s * t.efficiency.memory);
  if (!cpu_optimizer()) update += adam * t.mini_batches * t.ppo_epochs;  // else on the host (cpu_optimizer_s)
  out.actor_update = update;
  return out;
}

TrainMemory TrainerCostModel::memory(const TrainBatch& b) const {
  const auto& t = s_.training;
  const auto& m = s_.model;
  TrainMemory mem;
  const double shard = params_ / devices_;
  const double master = element_bytes(t.precision.master_weights);
  mem.params = shard * master;
  mem.grads = shard * widths_.gradient;
  // ZeRO-Offload (Ren et al. 2021, "ZeRO-Offload", sec. 4.1; DeepSpeed offload_optimizer, which
  // DeepSpeedCPUAdam runs under): each reduced gradient partition moves to host memory as the
  // backward pass produces it, so a device holds one layer's gradients, not its whole shard.
  if (zero_offload()) mem.grads = std::min(shard, params_ / m.layers) * widths_.gradient;
  const double states = t.optimizer.name == "sgd" ? 1.0 : 2.0;
  const double master_copy = master_copy_bytes(t);
  mem.optimizer = shard * (states * element_bytes(t.optimizer.state) + master_copy);
  mem.reference = t.reference_model ? shard * widths_.reference : 0.0;
  // One micro-batch of the update on a device.
  const int mp = t.tensor_parallel * t.pipeline_parallel;
  // A device holds its CP rank's 1/CP of each micro-batch's tokens.
  const double cp = t.context_parallel;
  const double mb_tokens = micro_batch_tokens(b, true) / cp;
  const double per_layer_inputs = mb_tokens * m.hidden * hidden_bytes_;
  // Working set of one transformer layer in backward (Korthikanti et al. 2022, "Reducing
  // Activation Recomputation", eq. 2 without the s*a attention term, since flash attention keeps
  // no score matrix): 34 s b h bytes at 16 bits, i.e. 17 elements per token and hidden unit: 9 h
  // (attention, norms, FFN input) + 2 x 4h (the GeLU FFN's two intermediate tensors). A gated
  // (SwiGLU) FFN keeps three intermediate tensors: 9 h + 3 ffn elements of hidden_bytes_ each.
  const double ffn = m.moe ? static_cast<double>(m.moe->expert_intermediate) * m.moe->active : m.intermediate;
  // Without sequence parallelism the norms', dropouts' and residuals' share (10 of Korthikanti's
  // 34 bytes per s b h: 5 elements of h) is replicated on every TP rank.
  const bool split_all = t.sequence_parallel || t.tensor_parallel == 1;
  const double layer_working =
      split_all ? mb_tokens * (9.0 * m.hidden + 3.0 * ffn) * hidden_bytes_ / t.tensor_parallel
                : mb_tokens * (5.0 * m.hidden + (4.0 * m.hidden + 3.0 * ffn) / t.tensor_parallel) * hidden_bytes_;
  const double layers_here = static_cast<double>(m.layers) / t.pipeline_parallel;
  mem.activations = t.activation_checkpointing ? per_layer_inputs * layers_here / t.tensor_parallel + layer_working
                                               : layer_working * layers_here;
  // FP32 logits and their gradient in the update, the logits alone in a forward-only pass
  // (verl computes log-probs of the whole micro-batch at once).
  mem.logits = std::max(2.0 * mb_tokens, micro_batch_tokens(b, false) / cp) * head_outputs_ * logit_bytes_ / t.tensor_parallel;
  // FSDP unshards one layer at a time (plus one prefetched); Megatron holds no gather buffer.
  const double layer_params = params_ / m.layers;
  mem.gather_buffer = t.backend == TrainingBackend::kFsdp ? 2.0 * layer_params * widths_.sync : 0.0;
  if (t.backend == TrainingBackend::kMegatron) {
    // Dense parameters split over TP x PP; routed experts over EP x PP when EP > 1 (expert tensor
    // parallel 1, Megatron's default with EP), else over TP x PP. Distributed optimizer: dense
    // states sharded over DP, expert states over the expert-data-parallel group TP x DP / EP.
    const int dp = devices_ / mp;
    const int ep = s_.model.moe ? t.expert_parallel : 1;
    const double dense = params_ - expert_params_;
    const int etp = t.expert_tensor_parallel;
    const double here = ep > 1 || etp > 1 ? dense / mp + expert_params_ / (ep * etp * t.pipeline_parallel) : params_ / mp;
    const double opt_here = ep > 1 || etp > 1 ? dense / mp / dp + expert_params_ / (ep * etp * t.pipeline_parallel) /
                                                                      (t.tensor_parallel * dp / (ep * etp))
                                              : params_ / mp / dp;
    mem.params = here * master;
    mem.grads = (zero_offload() ? std::min(here, params_ / m.layers) : here) * widths_.gradient;
    mem.optimizer = opt_here * (states * element_bytes(t.optimizer.state) + master_copy);
    mem.reference = t.reference_model ? here * widths_.reference : 0.0;
  }
  return mem;
}

SyncTimes TrainerCostModel::weight_sync(double rollout_weight_bytes_total, int rollout_devices, int rollout_tp,
                                        double rollout_bytes_per_device) const {
  const auto& s = s_;
  const double eff = s.training.efficiency.comm;
  const double sync_bytes = params_ * widths_.sync;
  SyncTimes out;
  // Gather the full weights in the sync format from the training shards (bucketed all-gather; the bucket size only
  // adds per-bucket latency).
  const double buckets = std::ceil(sync_bytes / s.weight_sync.bucket_bytes);
  // Every weight matrix (each expert's projections separately) passes through the sync path's
  // host-side loop: name mapping, gather launch, bucket packing.
  double matrices = 0;
  for (const auto& l : s.model.linear_shapes()) matrices += static_cast<double>(l.count);
  out.gather =
      all_gather_s(sync_bytes, devices_, dp_link_, eff) + buckets * dp_link_.latency_s + matrices * s.weight_sync.per_matrix_s;
  const bool colocated = s.placement.mode == PlacementMode::kColocated;
  const bool ipc =
      s.weight_sync.method == WeightSyncMethod::kCudaIpc || (s.weight_sync.method == WeightSyncMethod::kAuto && colocated);
  const double hbm = s.cluster.device.memory_bandwidth_bytes_per_s * s.rollout.efficiency.memory;
  // One rollout device's share: 1/TP, or with wide EP its dense share plus its experts.
  const bool resharded = rollout_bytes_per_device > 0;
  const double per_rank_sync =
      resharded ? sync_bytes * (rollout_bytes_per_device / rollout_weight_bytes_total) : sync_bytes / rollout_tp;
  if (ipc) {
    // CUDA IPC: handles passed per bucket, the engine reads the trainer's buffer in place.
    out.transfer = buckets * 50e-6;  // IPC handle open + sync per bucket (assumption)
  } else {
    // NCCL broadcast of sync-format buckets from a training rank to the rollout group over the
    // inter-node links (disaggregated devices are on other nodes in general).
    out.transfer = broadcast_s(sync_bytes, rollout_devices / rollout_tp + 1, s.cluster.inter_node, eff) +
                   buckets * s.cluster.inter_node.latency_s;
  }
  // On-the-fly quantisation on the rollout device: read the sync format, write the rollout
  // format; weights the engine keeps in the sync format cost nothing here.
  const double rollout_per_rank = resharded ? rollout_bytes_per_device : rollout_weight_bytes_total / rollout_tp;
  // Weights the engine stores in another format than the one the trainer sends are converted
  // on the fly (quantised, or cast).
  const bool quantised = !s.rollout.precision.stores_weights_as(s.training.precision.sync);
  out.quantize = quantised ? (per_rank_sync + rollout_per_rank) / hbm + matrices * s.weight_sync.quantize_per_matrix_s : 0.0;
  out.repack = quantised ? 2.0 * (2.0 * rollout_per_rank) / hbm : 0.0;
  // load_weights: copy into the engine's parameter buffers (read + write).
  out.load = 2.0 * rollout_per_rank / hbm;
  return out;
}

double TrainerCostModel::optimizer_offload_s() const {
  const double bytes = memory(TrainBatch{}).optimizer;  // the states of one device, whatever the backend
  return bytes / s_.cluster.host_link.bandwidth_bytes_per_s + s_.cluster.host_link.latency_s;
}

bool TrainerCostModel::cpu_optimizer() const { return s_.training.optimizer.cpu_adam; }

bool TrainerCostModel::zero_offload() const {
  return cpu_optimizer() && s_.training.optimizer.cpu_adam_kernel == CpuAdamKernel::kDeepSpeed;
}

double TrainerCostModel::host_gradient_accumulation_s(double micro_batches) const {
  const double partition_bytes = params_ / devices_ * widths_.gradient;
  const auto& host = s_.cluster.host_link;
  return micro_batches * 2.0 * (partition_bytes / host.bandwidth_bytes_per_s + host.latency_s);
}

double TrainerCostModel::cpu_optimizer_s() const {
  const auto& t = s_.training;
  const TrainMemory m = memory(TrainBatch{});
  const double shard_params = m.params / element_bytes(t.precision.master_weights);  // parameters this device holds
  // Gradients go down, updated parameters come back.
  const double copies = shard_params * (widths_.gradient + widths_.sync) / s_.cluster.host_link.bandwidth_bytes_per_s;
  const int per_node = std::min(s_.cluster.devices_per_node, devices_);
  const double rate =
      t.optimizer.cpu_adam_kernel == CpuAdamKernel::kDeepSpeed ? kDeepSpeedCpuAdamParamsPerSPerNode : kCpuAdamParamsPerSPerNode;
  const double adam = shard_params * per_node / rate;
  return (std::max(copies, adam) + 2.0 * s_.cluster.host_link.latency_s) * t.mini_batches * t.ppo_epochs;
}

}  // namespace rlsim::sim
