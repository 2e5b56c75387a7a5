// `rlsim run --print-config`: the fully resolved scenario as YAML, every default explicit.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "sim/scenario/scenario.h"
#include "sim/scenario/units.h"

namespace rlsim::sim {
namespace {

// A quantity in the unit --print-config writes for its dimension.
std::string q(double v, Dimension d) {
  switch (d) {
    case Dimension::kBytes:
      return quantity_in(v, d, "GB");
    case Dimension::kBandwidth:
      return quantity_in(v, d, "GB/s");
    case Dimension::kTime:
      return quantity_in(v, d, "us");
    case Dimension::kFlops:
      return quantity_in(v, d, "TFLOPS");
  }
  return {};
}

// A number as its shortest text that reads back to the same double (0.6, not 0.59999999999999998).
std::string num(double v) { return fmt::format("{}", v); }

void link(YAML::Emitter& e, const char* key, const models::Link& l) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "bandwidth" << YAML::Value
    << q(l.bandwidth_bytes_per_s, Dimension::kBandwidth) << YAML::Key << "latency" << YAML::Value
    << q(l.latency_s, Dimension::kTime) << YAML::EndMap;
}

void linear(YAML::Emitter& e, const char* key, const models::LinearPrecision& l) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "weight" << YAML::Value << l.weight.str()
    << YAML::Key << "activation" << YAML::Value << l.activation.str() << YAML::Key << "accumulate" << YAML::Value
    << std::string(models::traits(l.accumulate).name) << YAML::EndMap;
}

void recipe(YAML::Emitter& e, const char* key, const models::Recipe& r) {
  e << YAML::Key << key << YAML::Value << YAML::BeginMap;
  // A built-in's name becomes `base:` so its provenance (source) survives a reload.
  for (const auto& b : models::builtin_recipes()) {
    if (b.name == r.name) e << YAML::Key << "base" << YAML::Value << r.name;
  }
  e << YAML::Key << "name" << YAML::Value << r.name;
  linear(e, "linear", r.linear);
  linear(e, "lm_head", r.lm_head);
  linear(e, "router", r.router);
  e << YAML::Key << "kv_cache" << YAML::Value << r.kv_cache.str();
  e << YAML::Key << "embedding" << YAML::Value << r.embedding.str();
  e << YAML::Key << "attention" << YAML::Value << std::string(models::traits(r.attention).name);
  e << YAML::Key << "softmax" << YAML::Value << std::string(models::traits(r.softmax).name);
  e << YAML::Key << "master_weights" << YAML::Value << std::string(models::traits(r.master_weights).name);
  e << YAML::Key << "gradient" << YAML::Value << r.gradient.str() << YAML::Key << "sync" << YAML::Value << r.sync.str()
    << YAML::Key << "reference" << YAML::Value << r.reference.str();
  e << YAML::Key << "mode" << YAML::Value << (r.mode == models::QuantMode::kReal ? "real" : "fake");
  e << YAML::EndMap;
}

void dist(YAML::Emitter& e, const char* key, const LengthDist& d) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  switch (d.kind) {
    case LengthDist::Kind::kFixed:
      e << YAML::Key << "dist" << YAML::Value << "fixed" << YAML::Key << "value" << YAML::Value << d.value;
      break;
    case LengthDist::Kind::kUniform:
      e << YAML::Key << "dist" << YAML::Value << "uniform" << YAML::Key << "min" << YAML::Value << d.min << YAML::Key << "max"
        << YAML::Value << d.max;
      break;
    case LengthDist::Kind::kLognormal:
      e << YAML::Key << "dist" << YAML::Value << "lognormal" << YAML::Key << "median" << YAML::Value << num(d.median) << YAML::Key
        << "sigma" << YAML::Value << num(d.sigma);
      if (d.max > 0) e << YAML::Key << "max" << YAML::Value << d.max;  // absent: not truncated (0 does not load)
      break;
    case LengthDist::Kind::kCsv:
      e << YAML::Key << "dist" << YAML::Value << "csv" << YAML::Key << "file" << YAML::Value << d.file << YAML::Key << "column"
        << YAML::Value << d.column;
      break;
  }
  e << YAML::EndMap;
}

// `with_moe` (the training side): the routed-expert GEMM fraction and the forward-only pass factor as well.
void efficiency(YAML::Emitter& e, const Efficiency& f, bool with_moe) {
  e << YAML::Key << "efficiency" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "memory" << YAML::Value
    << num(f.memory) << YAML::Key << "compute" << YAML::Value << num(f.compute);
  if (with_moe)
    e << YAML::Key << "moe_compute" << YAML::Value << num(f.moe_compute) << YAML::Key << "forward" << YAML::Value
      << num(f.forward);
  e << YAML::Key << "attention_compute" << YAML::Value << num(f.attention_compute);
  e << YAML::Key << "comm" << YAML::Value << num(f.comm) << YAML::EndMap;
}

void model(YAML::Emitter& e, const models::ModelArch& m) {
  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << m.name << YAML::Key << "layers" << YAML::Value << m.layers << YAML::Key << "hidden"
    << YAML::Value << m.hidden << YAML::Key << "intermediate" << YAML::Value << m.intermediate << YAML::Key << "heads"
    << YAML::Value << m.heads << YAML::Key << "kv_heads" << YAML::Value << m.kv_heads << YAML::Key << "head_dim" << YAML::Value
    << m.head_dim << YAML::Key << "vocab" << YAML::Value << m.vocab << YAML::Key << "tied_embeddings" << YAML::Value
    << m.tied_embeddings << YAML::Key << "qkv_bias" << YAML::Value << m.qkv_bias;
  if (m.moe) {
    e << YAML::Key << "moe" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "experts" << YAML::Value
      << m.moe->experts << YAML::Key << "active" << YAML::Value << m.moe->active << YAML::Key << "expert_intermediate"
      << YAML::Value << m.moe->expert_intermediate << YAML::Key << "shared_experts" << YAML::Value << m.moe->shared_experts
      << YAML::Key << "dense_layers" << YAML::Value << m.moe->dense_layers << YAML::EndMap;
  }
  if (m.mla) {
    e << YAML::Key << "mla" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "q_lora_rank" << YAML::Value
      << m.mla->q_lora_rank << YAML::Key << "kv_lora_rank" << YAML::Value << m.mla->kv_lora_rank << YAML::Key
      << "qk_nope_head_dim" << YAML::Value << m.mla->qk_nope_head_dim << YAML::Key << "qk_rope_head_dim" << YAML::Value
      << m.mla->qk_rope_head_dim << YAML::Key << "v_head_dim" << YAML::Value << m.mla->v_head_dim << YAML::EndMap;
  }
  e << YAML::EndMap;
}

// cluster (the device in full, nodes, links), placement and schedule.
void cluster_placement_schedule(YAML::Emitter& e, const Scenario& s) {
  const auto& d = s.cluster.device;
  e << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "device" << YAML::Value << YAML::BeginMap << YAML::Key << "name" << YAML::Value << d.name << YAML::Key
    << "memory" << YAML::Value << q(d.memory_bytes, Dimension::kBytes) << YAML::Key << "memory_bandwidth" << YAML::Value
    << q(d.memory_bandwidth_bytes_per_s, Dimension::kBandwidth);
  e << YAML::Key << "compute" << YAML::Value << YAML::Flow << YAML::BeginMap;
  for (const auto& [c, r] : d.flops_per_s)
    e << YAML::Key << std::string(models::compute_name(c)) << YAML::Value << q(r, Dimension::kFlops);
  e << YAML::EndMap << YAML::EndMap;
  e << YAML::Key << "nodes" << YAML::Value << s.cluster.nodes << YAML::Key << "devices_per_node" << YAML::Value
    << s.cluster.devices_per_node;
  link(e, "intra_node", s.cluster.intra_node);
  link(e, "inter_node", s.cluster.inter_node);
  link(e, "host_link", s.cluster.host_link);
  e << YAML::EndMap;
  e << YAML::Key << "placement" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "mode" << YAML::Value
    << std::string(placement_name(s.placement.mode));
  if (s.placement.mode == PlacementMode::kDisaggregated) {
    e << YAML::Key << "rollout_devices" << YAML::Value << s.placement.rollout_devices << YAML::Key << "train_devices"
      << YAML::Value << s.placement.train_devices;
  }
  e << YAML::EndMap;
  e << YAML::Key << "schedule" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "mode" << YAML::Value
    << std::string(schedule_name(s.schedule.mode)) << YAML::Key << "staleness" << YAML::Value << num(s.schedule.staleness)
    << YAML::Key << "partial_rollout" << YAML::Value << s.schedule.partial_rollout << YAML::EndMap;
}

// workload: prompts, samples and the length distributions.
void workload(YAML::Emitter& e, const Scenario& s) {
  e << YAML::Key << "workload" << YAML::Value << YAML::BeginMap << YAML::Key << "prompts_per_step" << YAML::Value
    << s.workload.prompts_per_step << YAML::Key << "samples_per_prompt" << YAML::Value << s.workload.samples_per_prompt;
  dist(e, "prompt_tokens", s.workload.prompt_tokens);
  dist(e, "response_tokens", s.workload.response_tokens);
  e << YAML::EndMap;
}

// rollout: the engine, its layout, precision, limits and overheads.
void rollout(YAML::Emitter& e, const Scenario& s) {
  const auto& r = s.rollout;
  e << YAML::Key << "rollout" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "engine" << YAML::Value << name_in(engine_names(), r.engine);
  e << YAML::Key << "tensor_parallel" << YAML::Value << r.tensor_parallel << YAML::Key << "data_parallel" << YAML::Value
    << r.data_parallel << YAML::Key << "expert_parallel" << YAML::Value << r.expert_parallel;
  recipe(e, "precision", r.precision);
  e << YAML::Key << "max_num_seqs" << YAML::Value << r.max_num_seqs << YAML::Key << "generate_batch" << YAML::Value
    << r.generate_batch << YAML::Key << "memory_utilization" << YAML::Value << num(r.memory_utilization);
  e << YAML::Key << "sleep_level" << YAML::Value << r.sleep_level << YAML::Key << "enforce_eager" << YAML::Value
    << r.enforce_eager;
  e << YAML::Key << "activation_buffers" << YAML::Value << q(r.activation_buffer_bytes, Dimension::kBytes);
  e << YAML::Key << "overheads" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "iteration" << YAML::Value
    << q(r.iteration_overhead_s, Dimension::kTime) << YAML::Key << "per_layer" << YAML::Value
    << q(r.layer_overhead_s, Dimension::kTime) << YAML::Key << "moe_layer" << YAML::Value
    << q(r.moe_layer_overhead_s, Dimension::kTime) << YAML::Key << "per_sequence" << YAML::Value
    << q(r.sequence_overhead_s, Dimension::kTime) << YAML::EndMap;
  efficiency(e, r.efficiency, false);
  e << YAML::EndMap;
}

// training: backend, precision, layout, batching, optimizer and efficiency.
void training(YAML::Emitter& e, const Scenario& s) {
  const auto& t = s.training;
  e << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "backend" << YAML::Value << name_in(backend_names(), t.backend);
  recipe(e, "precision", t.precision);
  e << YAML::Key << "tensor_parallel" << YAML::Value << t.tensor_parallel << YAML::Key << "pipeline_parallel" << YAML::Value
    << t.pipeline_parallel << YAML::Key << "expert_parallel" << YAML::Value << t.expert_parallel << YAML::Key
    << "context_parallel" << YAML::Value << t.context_parallel << YAML::Key << "expert_tensor_parallel" << YAML::Value
    << t.expert_tensor_parallel << YAML::Key << "virtual_pipeline" << YAML::Value << t.virtual_pipeline << YAML::Key
    << "sequence_parallel" << YAML::Value << t.sequence_parallel << YAML::Key << "ppo_epochs" << YAML::Value << t.ppo_epochs
    << YAML::Key << "mini_batches" << YAML::Value << t.mini_batches << YAML::Key << "dynamic_batching" << YAML::Value
    << t.dynamic_batching << YAML::Key << "micro_batch_tokens" << YAML::Value << t.micro_batch_tokens << YAML::Key
    << "logprob_micro_batch_tokens" << YAML::Value << t.logprob_micro_batch_tokens << YAML::Key << "micro_batch_sequences"
    << YAML::Value << t.micro_batch_sequences << YAML::Key << "logprob_micro_batch_sequences" << YAML::Value
    << t.logprob_micro_batch_sequences << YAML::Key << "padding" << YAML::Value << name_in(padding_names(), t.padding)
    << YAML::Key << "recompute_old_logprob" << YAML::Value << t.recompute_old_logprob << YAML::Key << "reference_model"
    << YAML::Value << t.reference_model << YAML::Key << "activation_checkpointing" << YAML::Value << t.activation_checkpointing
    << YAML::Key << "param_offload" << YAML::Value << t.param_offload;
  e << YAML::Key << "optimizer" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value
    << t.optimizer.name << YAML::Key << "state" << YAML::Value << std::string(models::traits(t.optimizer.state).name) << YAML::Key
    << "offload" << YAML::Value << t.optimizer.offload << YAML::Key << "cpu_adam" << YAML::Value << t.optimizer.cpu_adam;
  if (t.optimizer.cpu_adam) {
    e << YAML::Key << "cpu_adam_kernel" << YAML::Value << name_in(cpu_adam_kernel_names(), t.optimizer.cpu_adam_kernel);
  }
  e << YAML::EndMap;
  efficiency(e, t.efficiency, true);
  e << YAML::Key << "step_overhead" << YAML::Value << q(t.step_overhead_s, Dimension::kTime);
  e << YAML::EndMap;
}

// algorithm: its name, and the critic, reward model and reference with their own layouts.
void algorithm(YAML::Emitter& e, const Scenario& s) {
  const auto& a = s.algorithm;
  e << YAML::Key << "algorithm" << YAML::Value << YAML::BeginMap << YAML::Key << "name" << YAML::Value
    << name_in(algorithm_names(), a.name);
  using Aux = std::pair<const char*, const std::optional<AuxModelConfig>*>;
  for (const auto& [key, aux] :
       {Aux{"critic", &a.critic}, Aux{"reward_model", &a.reward_model}, Aux{"reference", &a.reference}}) {
    if (!*aux) continue;
    e << YAML::Key << key << YAML::Value << YAML::BeginMap;
    // The reference's model and precision are the actor's (the loader accepts no others).
    if (&a.reference != aux) {
      model(e, (*aux)->model);
      recipe(e, "precision", (*aux)->precision);
    }
    e << YAML::Key << "placement" << YAML::Value << std::string(aux_placement_name((*aux)->placement));
    if ((*aux)->placement == AuxPlacement::kSeparate) e << YAML::Key << "devices" << YAML::Value << (*aux)->devices;
    const ParallelLayout& l = (*aux)->layout;
    e << YAML::Key << "backend" << YAML::Value << name_in(backend_names(), l.backend) << YAML::Key << "tensor_parallel"
      << YAML::Value << l.tensor_parallel << YAML::Key << "pipeline_parallel" << YAML::Value << l.pipeline_parallel << YAML::Key
      << "expert_parallel" << YAML::Value << l.expert_parallel << YAML::Key << "context_parallel" << YAML::Value
      << l.context_parallel << YAML::Key << "expert_tensor_parallel" << YAML::Value << l.expert_tensor_parallel << YAML::Key
      << "virtual_pipeline" << YAML::Value << l.virtual_pipeline;
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
}

// weight_sync and output.
void sync_and_output(YAML::Emitter& e, const Scenario& s) {
  const std::string& method = name_in(weight_sync_names(), s.weight_sync.method);
  e << YAML::Key << "weight_sync" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "method" << YAML::Value << method
    << YAML::Key << "bucket" << YAML::Value << quantity_in(s.weight_sync.bucket_bytes, Dimension::kBytes, "MiB") << YAML::Key
    << "per_matrix" << YAML::Value << fmt::format("{} s", s.weight_sync.per_matrix_s) << YAML::EndMap;
  e << YAML::Key << "output" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "dir" << YAML::Value << s.output.dir
    << YAML::Key << "plots" << YAML::Value << s.output.plots << YAML::Key << "trace" << YAML::Value << s.output.trace << YAML::Key
    << "trace_max_iterations" << YAML::Value << s.output.trace_max_iterations << YAML::EndMap;
}

}  // namespace

std::string resolved_yaml(const Scenario& s) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << s.name;
  e << YAML::Key << "seed" << YAML::Value << s.seed;
  e << YAML::Key << "steps" << YAML::Value << s.steps;
  model(e, s.model);
  cluster_placement_schedule(e, s);
  workload(e, s);
  rollout(e, s);
  training(e, s);
  algorithm(e, s);
  sync_and_output(e, s);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

std::string resolved_precision_flow_yaml(const Scenario& s) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  model(e, s.model);
  e << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  recipe(e, "precision", s.training.precision);
  e << YAML::EndMap;
  e << YAML::Key << "rollout" << YAML::Value << YAML::BeginMap;
  recipe(e, "precision", s.rollout.precision);
  e << YAML::EndMap << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace rlsim::sim
