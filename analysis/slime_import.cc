#include "analysis/slime_import.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <iterator>
#include <optional>

#include "sim/scenario/scenario.h"

namespace rlsim::analysis {
namespace {

bool is_slime_entry(const ShellWord& w) {
  const std::string& word = w.text;
  const std::string base = word.substr(word.find_last_of('/') == std::string::npos ? 0 : word.find_last_of('/') + 1);
  return base == "train.py" || base == "train_async.py";
}

// Adds the flags among `words` (from `from` on) to `l`.
void add_flags(SlimeLaunch& l, const std::vector<ShellWord>& words, std::size_t from, const std::string& file) {
  for (std::size_t i = from; i < words.size(); ++i) {
    const std::string& w = words[i].text;
    const int line = words[i].line;
    if (w == "$@") continue;
    if (ends_command(w)) break;
    if (w.starts_with("--")) {
      const auto eq = w.find('=');
      l.args.push_back({w.substr(0, eq), {}, line});
      if (eq != std::string::npos) l.args.back().values.push_back(w.substr(eq + 1));
      continue;
    }
    // An array the script does not assign (a sourced file's MODEL_ARGS) holds flags: unread.
    // Another unresolved word (an environment variable, a command's output) is a flag's value.
    const bool unknown_array = w.starts_with("${") && (w.ends_with("[@]}") || w.ends_with("[*]}"));
    if (unknown_array || (l.args.empty() && unresolved_expansion(w))) {
      l.unread.push_back(words[i]);
      continue;
    }
    if (l.args.empty()) fail_at(file, line, fmt::format("'{}' comes before any --flag of the slime command", w));
    l.args.back().values.push_back(w);
  }
}

enum class Kind { kInt, kNumber, kSwitch, kText };

// slime's flags that the import maps, their kind and their default ("" = None).
// slime/utils/arguments.py (THUDM/slime main, 2025-11); Megatron-LM's arguments.py for the
// parallel sizes and --micro-batch-size (slime resets it to 1).
struct SlimeFlag {
  const char* flag;
  Kind kind;
  const char* fallback;
};
constexpr SlimeFlag kSlimeFlags[] = {
    {"--actor-num-nodes", Kind::kInt, "1"},
    {"--actor-num-gpus-per-node", Kind::kInt, "8"},
    {"--rollout-num-gpus", Kind::kInt, ""},
    {"--rollout-num-gpus-per-engine", Kind::kInt, "1"},
    {"--rollout-num-gpus-per-node", Kind::kInt, "8"},
    {"--colocate", Kind::kSwitch, ""},
    {"--critic-num-nodes", Kind::kInt, ""},          // PPO: default --actor-num-nodes
    {"--critic-num-gpus-per-node", Kind::kInt, ""},  // PPO: default --actor-num-gpus-per-node
    {"--hf-checkpoint", Kind::kText, ""},
    {"--rollout-batch-size", Kind::kInt, ""},
    {"--n-samples-per-prompt", Kind::kInt, "1"},
    {"--rollout-max-response-len", Kind::kInt, "1024"},
    {"--rollout-max-prompt-len", Kind::kInt, ""},
    {"--global-batch-size", Kind::kInt, ""},
    {"--num-steps-per-rollout", Kind::kInt, ""},
    {"--micro-batch-size", Kind::kInt, "1"},
    {"--use-dynamic-batch-size", Kind::kSwitch, ""},
    {"--max-tokens-per-gpu", Kind::kInt, ""},
    {"--log-probs-max-tokens-per-gpu", Kind::kInt, ""},
    {"--use-rollout-logprobs", Kind::kSwitch, ""},
    {"--tensor-model-parallel-size", Kind::kInt, "1"},
    {"--pipeline-model-parallel-size", Kind::kInt, "1"},
    {"--expert-model-parallel-size", Kind::kInt, "1"},
    {"--context-parallel-size", Kind::kInt, "1"},
    {"--expert-tensor-parallel-size", Kind::kInt, ""},
    {"--recompute-granularity", Kind::kText, ""},
    {"--use-kl-loss", Kind::kSwitch, ""},
    {"--kl-coef", Kind::kNumber, "0"},
    {"--optimizer-cpu-offload", Kind::kSwitch, ""},
    {"--train-backend", Kind::kText, "megatron"},
    {"--sglang-mem-fraction-static", Kind::kNumber, ""},
    {"--sglang-ep-size", Kind::kInt, ""},
    {"--sglang-dp-size", Kind::kInt, ""},
    {"--sglang-enable-dp-attention", Kind::kSwitch, ""},
    {"--sglang-expert-parallel-size", Kind::kInt, ""},
    {"--sglang-max-running-requests", Kind::kInt, ""},
    {"--sglang-disable-cuda-graph", Kind::kSwitch, ""},
    {"--update-weight-buffer-size", Kind::kInt, "536870912"},  // 512 MiB
    {"--fp8-format", Kind::kText, ""},
    {"--fp8-recipe", Kind::kText, ""},
    {"--offload", Kind::kSwitch, ""},
    {"--advantage-estimator", Kind::kText, "grpo"},
};

// Flags that change performance and that rlsim does not model (yet): a warning when given.
constexpr const char* kNotModelled[] = {
    "--sequence-parallel",
    "--sglang-enable-dp-lm-head",
    "--sglang-cuda-graph-bs",
    "--sglang-cuda-graph-max-bs",
    "--sglang-chunked-prefill-size",
    "--sglang-server-concurrency",
    "--sglang-attention-backend",
    "--sglang-moe-runner-backend",
    "--partial-rollout",
    "--over-sampling-batch-size",
    "--dynamic-sampling-filter-path",
    "--balance-data",
    "--use-slime-router",
    "--moe-enable-deepep",
    "--moe-token-dispatcher-type",
    "--overlap-cpu-optimizer-d2h-h2d",
    "--use-precision-aware-optimizer",
    "--optimizer-offload-fraction",
    "--recompute-method",
    "--recompute-num-layers",
    "--attention-backend",
    "--transformer-impl",
    "--fp8-param-gather",
    "--update-weights-interval",
    "--keep-old-actor",
    "--rollout-max-context-len",
    "--num-layers-per-virtual-pipeline-stage",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--use-rollout-routing-replay",
    "--fully-async",
};

// Flag prefixes without effect on step time in rlsim's model: data, reward, sampling
// temperature, evaluation, checkpoints, logging, optimizer hyper-parameters, loss coefficients,
// and the architecture flags of MODEL_ARGS (the model comes from the catalog or --model-config).
constexpr const char* kNoEffectPrefixes[] = {
    "--prompt-data",
    "--input-key",
    "--label-key",
    "--metadata-key",
    "--tool-key",
    "--apply-chat-template",
    "--rollout-shuffle",
    "--rm-type",
    "--custom-rm-path",
    "--reward-key",
    "--rm-url",
    "--group-rm",
    "--num-rollout",
    "--num-epoch",
    "--rollout-temperature",
    "--rollout-top-p",
    "--rollout-top-k",
    "--rollout-seed",
    "--rollout-stop",
    "--rollout-skip-special-tokens",
    "--eval-",
    "--n-samples-per-eval-prompt",
    "--ref-load",
    "--load",
    "--save",
    "--no-save-optim",
    "--no-load-optim",
    "--no-load-rng",
    "--use-wandb",
    "--wandb-",
    "--disable-wandb-random-suffix",
    "--optimizer",
    "--lr",
    "--min-lr",
    "--weight-decay",
    "--adam-",
    "--clip-grad",
    "--eps-clip",
    "--kl-loss-coef",
    "--kl-loss-type",
    "--entropy-coef",
    "--use-tis",
    "--tis-",
    "--attention-dropout",
    "--hidden-dropout",
    "--accumulate-allreduce-grads-in-fp32",
    "--attention-softmax-in-fp32",
    "--seed",
    "--bf16",
    "--normalize-advantages",
    "--disable-grpo-std-normalization",
    "--disable-rewards-normalization",
    "--gamma",
    "--loss-type",
    "--custom-generate-function-path",
    "--rollout-function-path",
    "--model-name",
    "--debug-",
    "--save-debug-",
    "--load-debug-",
    "--dump-details",
    "--log-passrate",
    "--log-multi-turn",
    "--ckpt-format",
    "--use-dist-ckpt",
    "--start-rollout-id",
    "--distributed-timeout-minutes",
    "--calculate-per-token-loss",
    // MODEL_ARGS (scripts/models/*.sh): the architecture, which the catalog entry gives.
    "--num-layers",
    "--hidden-size",
    "--ffn-hidden-size",
    "--num-attention-heads",
    "--group-query-attention",
    "--num-query-groups",
    "--kv-channels",
    "--vocab-size",
    "--swiglu",
    "--normalization",
    "--norm-epsilon",
    "--rotary-",
    "--use-rotary-position-embeddings",
    "--position-embedding-type",
    "--disable-bias-linear",
    "--add-qkv-bias",
    "--qk-layernorm",
    "--untie-embeddings-and-output-weights",
    "--num-experts",
    "--moe-ffn-hidden-size",
    "--moe-router-",
    "--moe-grouped-gemm",
    "--moe-shared-expert",
    "--moe-layer-freq",
    "--moe-aux-loss-coeff",
    "--seq-length",
    "--max-position-embeddings",
    "--make-vocab-size-divisible-by",
    "--use-mcore-models",
    "--multi-latent-attention",
    "--q-lora-rank",
    "--kv-lora-rank",
    "--qk-head-dim",
    "--qk-pos-emb-head-dim",
    "--v-head-dim",
};

// A flag's value as the launch gives it, or the default, with where it came from.
struct Value {
  std::string text;
  int line = 0;
  bool set = false;  // given by the launch
};

class Reader {
 public:
  Reader(const SlimeLaunch& l, std::string source) : l_(l), source_(std::move(source)) {}

  Value value(const std::string& flag) const {
    const SlimeFlag& f = spec(flag);
    const SlimeArg* a = l_.last(flag);
    if (!a) return {f.fallback, 0, false};
    if (f.kind == Kind::kSwitch) {
      if (!a->values.empty())
        fail_at(source_, a->line, fmt::format("{} is a switch and takes no value (given '{}')", flag, a->values.front()));
      return {"true", a->line, true};
    }
    if (a->values.size() != 1) fail_at(source_, a->line, fmt::format("{} takes one value (given {})", flag, a->values.size()));
    return {a->values.front(), a->line, true};
  }
  bool given(const std::string& flag) const { return !value(flag).text.empty(); }
  bool on(const std::string& flag) const { return value(flag).text == "true"; }
  std::int64_t integer(const std::string& flag) const { return setting_integer(setting(flag), source_); }
  double number(const std::string& flag) const { return setting_number(setting(flag), source_); }
  std::string text(const std::string& flag) const { return setting_text(setting(flag), source_); }
  // "# slime --flag VALUE" with "(slime default)" or "(not given)" for the comment of a line.
  std::string note(const std::string& flag) const {
    const Value v = value(flag);
    if (spec(flag).kind == Kind::kSwitch) return fmt::format("# slime {}{}", flag, v.set ? "" : " (not given)");
    if (v.text.empty()) return fmt::format("# slime {} (not given)", flag);
    return fmt::format("# slime {} {}{}", flag, v.text, v.set ? "" : " (slime default)");
  }
  [[noreturn]] void fail(const std::string& flag, const std::string& what) const { fail_at(source_, value(flag).line, what); }

 private:
  static const SlimeFlag& spec(const std::string& flag) {
    for (const auto& f : kSlimeFlags) {
      if (flag == f.flag) return f;
    }
    throw std::logic_error("slime import: flag " + flag + " is not in the table");
  }
  // The flag's value as a launch setting, for the shared readers and their messages.
  LaunchSetting setting(const std::string& flag) const {
    const Value v = value(flag);
    return {v.text, v.line, fmt::format("{} {}", flag, v.text), fmt::format("rlsim import slime SCRIPT -- {} VALUE", flag)};
  }
  const SlimeLaunch& l_;
  std::string source_;
};

// SGLang's mem_fraction_static when none is given, by the engine's tensor-parallel size
// (sgl-project/sglang python/sglang/srt/server_args.py, __post_init__).
double sglang_default_mem_fraction(std::int64_t tp) {
  if (tp >= 16) return 0.79;
  if (tp >= 8) return 0.81;
  if (tp >= 4) return 0.85;
  if (tp >= 2) return 0.87;
  return 0.88;
}

// The model, cluster, placement and schedule lines.
// PPO's critic GPUs (--advantage-estimator ppo): --critic-num-nodes x --critic-num-gpus-per-node,
// each defaulting to the actor's; 0 for the critic-free estimators.
std::int64_t critic_devices(const Reader& r) {
  const std::string adv = ascii_lower(r.text("--advantage-estimator"));
  if (adv != "ppo" && adv != "gae") return 0;
  const std::int64_t nodes = r.given("--critic-num-nodes") ? r.integer("--critic-num-nodes") : r.integer("--actor-num-nodes");
  const std::int64_t per_node =
      r.given("--critic-num-gpus-per-node") ? r.integer("--critic-num-gpus-per-node") : r.integer("--actor-num-gpus-per-node");
  return nodes * per_node;
}

void write_cluster(const Reader& r, const SlimeLaunch& l, const std::string& device, const std::string& model_config,
                   ScenarioText& y, ImportedScenario& out) {
  const std::string ckpt = r.text("--hf-checkpoint");
  const std::string model = catalog_model_for_path(ckpt);
  if (!model.empty()) {
    y.line("model: " + model, r.note("--hf-checkpoint"));
  } else if (!model_config.empty()) {
    y.line("model: {hf_config: " + model_config + "}", r.note("--hf-checkpoint"));
  } else {
    r.fail("--hf-checkpoint",
           fmt::format("--hf-checkpoint {}: no catalog model matches '{}' (catalog: {}); give --model-config "
                       "config.json",
                       ckpt.empty() ? "(not given)" : ckpt, ckpt, fmt::join(sim::catalog_model_names(), ", ")));
  }
  const bool colocate = r.on("--colocate");
  const bool async = l.entry.find("train_async") != std::string::npos;
  const std::int64_t nodes = r.integer("--actor-num-nodes"), per_node = r.integer("--actor-num-gpus-per-node");
  const std::int64_t critic = critic_devices(r);
  y.line("cluster:");
  y.line("  device: " + device);
  if (colocate) {
    if (async) r.fail("--colocate", "train_async.py with --colocate: slime's asynchronous trainer needs its own rollout GPUs");
    // The engines span the actor's and the critic's GPUs (slime: rollout GPUs = actor + critic).
    y.line(fmt::format("  nodes: {}", nodes + (critic > 0 ? (critic + per_node - 1) / per_node : 0)),
           critic > 0 ? "# slime --actor-num-nodes, plus the critic's GPUs" : r.note("--actor-num-nodes"));
    y.line(fmt::format("  devices_per_node: {}", per_node), r.note("--actor-num-gpus-per-node"));
    if (critic > 0)
      out.warnings.push_back(
          fmt::format("--advantage-estimator ppo with --colocate: slime trains the critic on its own {} GPUs beside the actor's; "
                      "rlsim's colocated placement trains both on every GPU, one after the other",
                      critic));
    y.line("placement: {mode: colocated}", r.note("--colocate"));
    if (r.given("--rollout-num-gpus"))
      out.warnings.push_back("--rollout-num-gpus is ignored by slime with --colocate (the engines use the actor's GPUs)");
    return;
  }
  // Disaggregated: the trainer on its nodes, the engines on --rollout-num-gpus more; Ray packs
  // them onto nodes of the larger of the two per-node counts.
  if (!r.given("--rollout-num-gpus"))
    r.fail("--colocate", "--rollout-num-gpus is required without --colocate (slime's own rule: the engines need GPUs)");
  const std::int64_t train = nodes * per_node, rollout = r.integer("--rollout-num-gpus");
  const std::int64_t node_size = std::max(per_node, r.integer("--rollout-num-gpus-per-node"));
  const std::int64_t total_nodes = (train + critic + rollout + node_size - 1) / node_size;
  y.line(fmt::format("  nodes: {}", total_nodes),
         critic > 0 ? fmt::format("# actor {} + critic {} + rollout {} GPUs on nodes of {}", train, critic, rollout, node_size)
                    : fmt::format("# actor {} + rollout {} GPUs on nodes of {}", train, rollout, node_size));
  y.line(fmt::format("  devices_per_node: {}", node_size), r.note("--actor-num-gpus-per-node"));
  y.line("placement:");
  y.line("  mode: disaggregated", r.note("--colocate"));
  y.line(fmt::format("  rollout_devices: {}", rollout), r.note("--rollout-num-gpus"));
  y.line(fmt::format("  train_devices: {}", train), "# slime --actor-num-nodes x --actor-num-gpus-per-node");
  y.line(async ? "schedule: {mode: one-step-off}" : "schedule: {mode: sync}",
         async ? "# slime train_async.py: the next rollout overlaps this step's training" : "# slime train.py");
}

// The workload lines: prompts, samples, length distributions.
void write_workload(const Reader& r, ScenarioText& y, ImportedScenario& out) {
  if (!r.given("--rollout-batch-size")) r.fail("--rollout-batch-size", "--rollout-batch-size is required (slime's own rule)");
  const std::int64_t max_response = r.integer("--rollout-max-response-len");
  y.line("workload:");
  y.line(fmt::format("  prompts_per_step: {}", r.integer("--rollout-batch-size")), r.note("--rollout-batch-size"));
  y.line(fmt::format("  samples_per_prompt: {}", r.integer("--n-samples-per-prompt")), r.note("--n-samples-per-prompt"));
  if (r.given("--rollout-max-prompt-len")) {
    const std::int64_t max_prompt = r.integer("--rollout-max-prompt-len");
    y.line(fmt::format("  prompt_tokens: {{dist: uniform, min: {}, max: {}}}", std::max<std::int64_t>(1, max_prompt / 4),
                       max_prompt),
           r.note("--rollout-max-prompt-len"));
  } else {
    constexpr std::int64_t kAssumedMaxPrompt = 1024;  // slime filters no prompt by length unless told
    y.line(fmt::format("  prompt_tokens: {{dist: uniform, min: {}, max: {}}}", kAssumedMaxPrompt / 4, kAssumedMaxPrompt),
           "# assumed: slime --rollout-max-prompt-len not given");
  }
  y.line(fmt::format("  response_tokens: {{dist: lognormal, median: {}, sigma: 0.8, max: {}}}",
                     std::max<std::int64_t>(1, max_response / 4), max_response),
         r.note("--rollout-max-response-len"));
  out.warnings.push_back(
      "length distributions assumed (prompts uniform in [max/4, max], max 1024 unless --rollout-max-prompt-len; responses "
      "lognormal, median max/4, sigma 0.8, truncated at --rollout-max-response-len): set workload.prompt_tokens and "
      "response_tokens from your run's figures");
}

// The rollout's precision from the checkpoint it serves: *-FP8 is a block-scaled FP8 checkpoint.
void write_rollout_precision(const Reader& r, ScenarioText& y, ImportedScenario& out) {
  const std::string name = path_name_lower(r.text("--hf-checkpoint"));
  if (name.ends_with("-fp8") || name.find("-fp8-") != std::string::npos) {
    y.line("  precision: fp8-block", "# slime --hf-checkpoint *-FP8: a block-scaled FP8 checkpoint served by SGLang");
    return;
  }
  for (const char* q : {"int4", "w4a16", "awq", "gptq", "nvfp4", "mxfp4", "int8", "w8a8"}) {
    if (name.find(q) != std::string::npos) {
      out.warnings.push_back(
          fmt::format("--hf-checkpoint {} looks quantised ({}): the rollout is imported in BF16; set "
                      "rollout.precision to the checkpoint's recipe (rlsim catalog recipes)",
                      r.text("--hf-checkpoint"), q));
      return;
    }
  }
}

// The rollout lines: SGLang engines of --rollout-num-gpus-per-engine devices.
void write_rollout(const Reader& r, ScenarioText& y, ImportedScenario& out) {
  const std::int64_t tp = r.integer("--rollout-num-gpus-per-engine");
  y.line("rollout:");
  y.line("  engine: sglang", "# slime rolls out with SGLang");
  // SGLang's DP attention: --tp is the whole engine and --dp its attention ranks, each rank's
  // attention TP being tp / dp (rlsim's tensor_parallel x data_parallel = the engine).
  if (r.on("--sglang-enable-dp-attention") && r.given("--sglang-dp-size") && r.integer("--sglang-dp-size") > 1) {
    const std::int64_t dp = r.integer("--sglang-dp-size");
    if (tp % dp != 0) {
      r.fail("--sglang-dp-size", fmt::format("--sglang-dp-size {} must divide --rollout-num-gpus-per-engine {} (SGLang's "
                                             "attention TP per DP rank is tp / dp)",
                                             dp, tp));
    }
    y.line(fmt::format("  tensor_parallel: {}", tp / dp), r.note("--rollout-num-gpus-per-engine") + " / --sglang-dp-size");
    y.line(fmt::format("  data_parallel: {}", dp), r.note("--sglang-dp-size") + " with --sglang-enable-dp-attention");
  } else {
    y.line(fmt::format("  tensor_parallel: {}", tp), r.note("--rollout-num-gpus-per-engine"));
    if (r.given("--sglang-dp-size") && r.integer("--sglang-dp-size") > 1) {
      out.warnings.push_back(
          "--sglang-dp-size without --sglang-enable-dp-attention: rlsim prices one engine of "
          "--rollout-num-gpus-per-engine devices");
    }
  }
  for (const char* ep : {"--sglang-ep-size", "--sglang-expert-parallel-size"}) {
    if (r.given(ep)) y.line(fmt::format("  expert_parallel: {}", r.integer(ep)), r.note(ep));
  }
  write_rollout_precision(r, y, out);
  if (r.given("--sglang-mem-fraction-static")) {
    y.line(fmt::format("  memory_utilization: {}", r.number("--sglang-mem-fraction-static")),
           r.note("--sglang-mem-fraction-static"));
  } else {
    y.line(fmt::format("  memory_utilization: {}", sglang_default_mem_fraction(tp)),
           "# SGLang's default for the engine size (slime --sglang-mem-fraction-static not given)");
  }
  if (r.given("--sglang-max-running-requests"))
    y.line(fmt::format("  max_num_seqs: {}", r.integer("--sglang-max-running-requests")),
           r.note("--sglang-max-running-requests"));
  y.line(fmt::format("  enforce_eager: {}", r.on("--sglang-disable-cuda-graph")), r.note("--sglang-disable-cuda-graph"));
}

// The precision of the trainer: Megatron's FP8 (Transformer Engine) recipes.
void write_training_precision(const Reader& r, ScenarioText& y, ImportedScenario& out) {
  if (!r.given("--fp8-format")) return;
  const std::string recipe = ascii_lower(r.text("--fp8-recipe"));
  if (recipe == "blockwise") {
    y.line("  precision: fp8-block", "# slime --fp8-format " + r.text("--fp8-format") + " --fp8-recipe blockwise");
    return;
  }
  out.warnings.push_back(
      fmt::format("--fp8-format {} --fp8-recipe {}: FP8 training in this recipe is not in rlsim's catalog; "
                  "the trainer is imported in BF16",
                  r.text("--fp8-format"), recipe.empty() ? "(Megatron's default, delayed)" : recipe));
}

// Megatron's model-parallel sizes.
void write_megatron_layout(const Reader& r, ScenarioText& y) {
  y.line(fmt::format("  tensor_parallel: {}", r.integer("--tensor-model-parallel-size")), r.note("--tensor-model-parallel-size"));
  y.line(fmt::format("  pipeline_parallel: {}", r.integer("--pipeline-model-parallel-size")),
         r.note("--pipeline-model-parallel-size"));
  y.line(fmt::format("  expert_parallel: {}", r.integer("--expert-model-parallel-size")), r.note("--expert-model-parallel-size"));
  if (r.integer("--context-parallel-size") != 1)
    y.line(fmt::format("  context_parallel: {}", r.integer("--context-parallel-size")), r.note("--context-parallel-size"));
  if (r.given("--expert-tensor-parallel-size") && r.integer("--expert-tensor-parallel-size") != 1)
    y.line(fmt::format("  expert_tensor_parallel: {}", r.integer("--expert-tensor-parallel-size")),
           r.note("--expert-tensor-parallel-size"));
}

// Optimizer steps per rollout and micro-batching.
void write_batching(const Reader& r, ScenarioText& y) {
  // The rollout's samples in mini-batches of --global-batch-size samples.
  const std::int64_t samples = r.integer("--rollout-batch-size") * r.integer("--n-samples-per-prompt");
  if (r.given("--global-batch-size")) {
    const std::int64_t gbs = r.integer("--global-batch-size");
    if (gbs < 1 || samples % gbs != 0)
      r.fail("--global-batch-size",
             fmt::format("--global-batch-size {} must divide --rollout-batch-size x --n-samples-per-prompt = {}", gbs, samples));
    y.line(fmt::format("  mini_batches: {}", samples / gbs),
           fmt::format("# slime {} samples / --global-batch-size {}", samples, gbs));
  } else if (r.given("--num-steps-per-rollout")) {
    y.line(fmt::format("  mini_batches: {}", r.integer("--num-steps-per-rollout")), r.note("--num-steps-per-rollout"));
  } else {
    y.line("  mini_batches: 1", "# slime --global-batch-size not given: one step per rollout");
  }
  const bool dynamic = r.on("--use-dynamic-batch-size");
  y.line(fmt::format("  dynamic_batching: {}", dynamic), r.note("--use-dynamic-batch-size"));
  if (dynamic) {
    if (!r.given("--max-tokens-per-gpu"))
      r.fail("--use-dynamic-batch-size", "--use-dynamic-batch-size needs --max-tokens-per-gpu (slime's own rule)");
    y.line(fmt::format("  micro_batch_tokens: {}", r.integer("--max-tokens-per-gpu")), r.note("--max-tokens-per-gpu"));
    const char* lp = r.given("--log-probs-max-tokens-per-gpu") ? "--log-probs-max-tokens-per-gpu" : "--max-tokens-per-gpu";
    y.line(fmt::format("  logprob_micro_batch_tokens: {}", r.integer(lp)), r.note(lp));
  } else {
    y.line(fmt::format("  micro_batch_sequences: {}", r.integer("--micro-batch-size")), r.note("--micro-batch-size"));
    y.line(fmt::format("  logprob_micro_batch_sequences: {}", r.integer("--micro-batch-size")), r.note("--micro-batch-size"));
  }
}

// The training lines: backend, precision, layout, batching, reference, optimizer.
void write_training(const Reader& r, ScenarioText& y, ImportedScenario& out) {
  const std::string backend = ascii_lower(r.text("--train-backend"));
  if (backend != "megatron" && backend != "fsdp")
    r.fail("--train-backend", "--train-backend " + backend + ": expected megatron or fsdp");
  y.line("training:");
  y.line("  backend: " + backend, r.note("--train-backend"));
  write_training_precision(r, y, out);
  if (backend == "megatron") write_megatron_layout(r, y);
  write_batching(r, y);
  y.line(fmt::format("  recompute_old_logprob: {}", !r.on("--use-rollout-logprobs")), r.note("--use-rollout-logprobs"));
  const std::string recompute = ascii_lower(r.text("--recompute-granularity"));
  y.line(fmt::format("  activation_checkpointing: {}", recompute == "full"), r.note("--recompute-granularity"));
  if (recompute == "selective")
    out.warnings.push_back("--recompute-granularity selective: only attention is recomputed; imported as no checkpointing");
  const bool reference = r.on("--use-kl-loss") || r.number("--kl-coef") != 0;
  y.line(fmt::format("  reference_model: {}", reference), r.note("--use-kl-loss"));
  y.line(fmt::format("  optimizer: {{offload: false, cpu_adam: {}}}", r.on("--optimizer-cpu-offload")),
         r.note("--optimizer-cpu-offload"));
  // The algorithm: PPO's critic on its own GPUs (slime requests them beside the actor's, in the
  // actor's Megatron layout) unless colocated; REINFORCE++ by name; GRPO and GSPO are the default.
  const std::string adv = ascii_lower(r.text("--advantage-estimator"));
  if (const std::int64_t critic = critic_devices(r); critic > 0) {
    y.line("algorithm:");
    y.line("  name: ppo", r.note("--advantage-estimator"));
    if (!r.on("--colocate"))
      y.line(fmt::format("  critic: {{placement: separate, devices: {}}}", critic),
             "# slime --critic-num-nodes x --critic-num-gpus-per-node (default: the actor's)");
  } else if (adv.starts_with("reinforce_plus_plus")) {
    y.line("algorithm: {name: reinforce++}", r.note("--advantage-estimator"));
  }
}

// Every flag given: mapped, not modelled (a warning), without effect (listed) or unknown (a warning).
void classify_flags(const SlimeLaunch& l, ImportedScenario& out) {
  std::vector<std::string> seen;
  for (const SlimeArg& a : l.args) {
    if (std::find(seen.begin(), seen.end(), a.flag) != seen.end()) continue;
    seen.push_back(a.flag);
    const bool mapped =
        std::any_of(std::begin(kSlimeFlags), std::end(kSlimeFlags), [&](const SlimeFlag& f) { return a.flag == f.flag; });
    if (mapped) continue;
    const std::string where = a.line > 0 ? fmt::format("line {}: ", a.line) : "";
    const std::string shown = a.values.empty() ? a.flag : fmt::format("{} {}", a.flag, fmt::join(a.values, " "));
    if (std::any_of(std::begin(kNotModelled), std::end(kNotModelled), [&](const char* f) { return a.flag == f; })) {
      out.warnings.push_back(fmt::format("{}{}: changes performance, not modelled by rlsim", where, shown));
    } else if (std::any_of(std::begin(kNoEffectPrefixes), std::end(kNoEffectPrefixes),
                           [&](const char* p) { return a.flag.starts_with(p); })) {
      out.ignored.push_back(a.flag);
    } else {
      out.warnings.push_back(fmt::format("{}{}: not known to rlsim import slime; it may change performance", where, shown));
    }
  }
  for (const ShellWord& w : l.unread)
    out.warnings.push_back(
        fmt::format("line {}: {} is not assigned in the script (a sourced file's or the environment's): its "
                    "flags are not read; give them after the script: rlsim import slime SCRIPT -- FLAGS",
                    w.line, w.text));
}

}  // namespace

const SlimeArg* SlimeLaunch::last(const std::string& flag) const {
  for (auto it = args.rbegin(); it != args.rend(); ++it) {
    if (it->flag == flag) return &*it;
  }
  return nullptr;
}

SlimeLaunch parse_slime_script(const std::string& text, const std::string& file) {
  const LaunchCommand c = find_launch_command(text, file, is_slime_entry, "slime", "python3 train.py or train_async.py");
  SlimeLaunch l;
  l.entry = c.command.words[c.entry].text;
  add_flags(l, c.command.words, c.entry + 1, file);
  return l;
}

void append_slime_args(SlimeLaunch& launch, const std::vector<std::string>& words) {
  std::vector<ShellWord> w;
  for (const auto& x : words) w.push_back({x, 0});
  add_flags(launch, w, 0, "rlsim import slime --");
}

ImportedScenario import_slime(const SlimeLaunch& launch, const std::string& device, const std::string& model_config,
                              const std::string& source) {
  const Reader r(launch, source);
  ImportedScenario out;
  ScenarioText y;
  y.line(fmt::format("name: imported from {}", source));
  write_cluster(r, launch, device, model_config, y, out);
  write_workload(r, y, out);
  write_rollout(r, y, out);
  write_training(r, y, out);
  constexpr double kMiB = 1024.0 * 1024.0;
  y.line("weight_sync:");
  y.line(fmt::format("  bucket: {} MiB", static_cast<double>(r.integer("--update-weight-buffer-size")) / kMiB),
         r.note("--update-weight-buffer-size"));
  if (r.on("--offload") && !r.on("--colocate"))
    out.warnings.push_back("--offload without --colocate: the trainer's offload between steps is not modelled");
  classify_flags(launch, out);
  out.yaml = y.str();
  return out;
}

}  // namespace rlsim::analysis
