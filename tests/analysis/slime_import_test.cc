// rlsim import slime: a slime launch's flags (bash arrays, train_async.py), slime's defaults,
// the mapping to a scenario that loads, and the errors.
#include "analysis/slime_import.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/scenario/scenario.h"
#include "tests/sim/scenario_text.h"

namespace rlsim::analysis {
namespace {

namespace fs = std::filesystem;

std::string read(const std::string& name) {
  std::ifstream in(fs::path(RLSIM_SOURCE_DIR) / "tests/data/slime" / name);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

sim::Scenario load(const std::string& yaml) { return sim::testing::load_scenario_text(yaml); }

bool has_warning(const ImportedScenario& imp, const std::string& text) {
  for (const auto& w : imp.warnings) {
    if (w.find(text) != std::string::npos) return true;
  }
  return false;
}

std::string error_of(const SlimeLaunch& l) {
  try {
    (void)import_slime(l, "h100-sxm", "", "run.sh");
  } catch (const sim::ScenarioError& e) {
    return e.what();
  }
  return "no error";
}

SlimeLaunch flags(const std::vector<std::string>& words) {
  SlimeLaunch l;
  append_slime_args(l, words);
  return l;
}

TEST(SlimeImport, ColocatedLaunchWithArraysMapsEveryFlag) {
  const SlimeLaunch l = parse_slime_script(read("run_qwen3_4b_fp8_colocated.sh"), "run.sh");
  EXPECT_EQ(l.entry, "train.py");
  ASSERT_NE(l.last("--max-tokens-per-gpu"), nullptr);
  EXPECT_EQ(l.last("--max-tokens-per-gpu")->values, std::vector<std::string>{"9216"});        // $((2 * 4608))
  EXPECT_EQ(l.last("--rollout-num-gpus-per-engine")->values, std::vector<std::string>{"1"});  // SGLANG_ARGS+=(...): the last wins
  ASSERT_EQ(l.unread.size(), 1u);
  EXPECT_EQ(l.unread[0].text, "${MODEL_ARGS[@]}");  // from the sourced file
  const ImportedScenario imp = import_slime(l, "h100-sxm", "", "run.sh");
  const sim::Scenario s = load(imp.yaml);
  EXPECT_EQ(s.model.name, "qwen3-4b");
  EXPECT_EQ(s.placement.mode, sim::PlacementMode::kColocated);
  EXPECT_EQ(s.cluster.devices(), 8);
  EXPECT_EQ(s.workload.prompts_per_step, 64);
  EXPECT_EQ(s.workload.samples_per_prompt, 8);
  EXPECT_EQ(s.workload.response_tokens.upper_bound(), 4096);
  EXPECT_EQ(s.rollout.engine, sim::RolloutEngineKind::kSglang);
  EXPECT_EQ(s.rollout.tensor_parallel, 1);
  EXPECT_DOUBLE_EQ(s.rollout.memory_utilization, 0.6);
  EXPECT_EQ(s.rollout.precision.name, "fp8-block");  // the -FP8 checkpoint
  EXPECT_EQ(s.training.backend, sim::TrainingBackend::kMegatron);
  EXPECT_EQ(s.training.tensor_parallel, 2);
  EXPECT_EQ(s.training.mini_batches, 4);  // 64 x 8 samples / --global-batch-size 128
  EXPECT_TRUE(s.training.dynamic_batching);
  EXPECT_EQ(s.training.micro_batch_tokens, 9216);
  EXPECT_EQ(s.training.logprob_micro_batch_tokens, 9216);
  EXPECT_TRUE(s.training.activation_checkpointing);  // --recompute-granularity full
  EXPECT_TRUE(s.training.reference_model);           // --use-kl-loss
  EXPECT_TRUE(s.training.recompute_old_logprob);
  EXPECT_NE(imp.yaml.find("# slime --rollout-batch-size 64\n"), std::string::npos);
  EXPECT_NE(imp.yaml.find("# slime --expert-model-parallel-size 1 (slime default)\n"), std::string::npos);
  // Not modelled: a warning with the line the flag was written on; no effect: listed.
  EXPECT_TRUE(has_warning(imp, "line 44: --sequence-parallel"));
  EXPECT_TRUE(has_warning(imp, "--sglang-cuda-graph-bs 1 2 4 8 $(seq 16 8 128)"));
  EXPECT_TRUE(has_warning(imp, "${MODEL_ARGS[@]} is not assigned"));
  EXPECT_NE(std::find(imp.ignored.begin(), imp.ignored.end(), "--lr"), imp.ignored.end());
  EXPECT_NE(std::find(imp.ignored.begin(), imp.ignored.end(), "--rollout-temperature"), imp.ignored.end());
  // PPO colocated: the engines span the actor's and the critic's GPUs; rlsim trains both on all
  // of them, one after the other, and says so.
  SlimeLaunch ppo = l;
  append_slime_args(ppo, {"--advantage-estimator", "ppo"});
  const ImportedScenario pi = import_slime(ppo, "h100-sxm", "", "run.sh");
  const sim::Scenario sp = load(pi.yaml);
  EXPECT_EQ(sp.cluster.devices(), 2 * s.cluster.devices());
  EXPECT_EQ(sp.algorithm.critic->placement, sim::AuxPlacement::kActor);
  EXPECT_TRUE(has_warning(pi, "slime trains the critic on its own"));
}

TEST(SlimeImport, DisaggregatedAsyncLaunch) {
  const SlimeLaunch l = parse_slime_script(read("run_qwen3_30b_a3b_async.sh"), "run.sh");
  EXPECT_EQ(l.entry, "/root/slime/train_async.py");
  const ImportedScenario imp = import_slime(l, "h100-sxm", "", "run.sh");
  const sim::Scenario s = load(imp.yaml);
  EXPECT_EQ(s.model.name, "qwen3-30b-a3b");
  EXPECT_EQ(s.placement.mode, sim::PlacementMode::kDisaggregated);
  EXPECT_EQ(s.placement.rollout_devices, 8);
  EXPECT_EQ(s.placement.train_devices, 8);
  EXPECT_EQ(s.cluster.devices(), 16);
  EXPECT_EQ(s.schedule.mode, sim::ScheduleMode::kOneStepOff);
  EXPECT_EQ(s.rollout.tensor_parallel, 8);
  EXPECT_EQ(s.rollout.expert_parallel, 8);               // --sglang-ep-size
  EXPECT_DOUBLE_EQ(s.rollout.memory_utilization, 0.81);  // SGLang's default at TP 8
  EXPECT_EQ(s.workload.prompt_tokens.upper_bound(), 2048);
  EXPECT_EQ(s.training.expert_parallel, 8);
  EXPECT_EQ(s.training.mini_batches, 4);  // 256 / 64
  EXPECT_EQ(s.training.logprob_micro_batch_tokens, 32768);
  EXPECT_FALSE(s.training.recompute_old_logprob);  // --use-rollout-logprobs
  EXPECT_FALSE(s.training.reference_model);
  EXPECT_FALSE(s.training.activation_checkpointing);
  EXPECT_TRUE(s.training.optimizer.cpu_adam);  // --optimizer-cpu-offload
  EXPECT_TRUE(has_warning(imp, "--some-future-flag 3: not known to rlsim import slime"));
  // Flags after the script win: TP 4 engines, on a colocated layout.
  SlimeLaunch more = l;
  append_slime_args(more, {"--rollout-num-gpus-per-engine", "4", "--sglang-ep-size=4"});
  EXPECT_EQ(load(import_slime(more, "h100-sxm", "", "run.sh").yaml).rollout.tensor_parallel, 4);
  // SGLang DP attention: --tp 8 --dp 4 --enable-dp-attention is attention TP 2 on 4 DP ranks,
  // the experts over the whole engine of 8.
  SlimeLaunch dp = l;
  append_slime_args(dp, {"--sglang-enable-dp-attention", "--sglang-dp-size", "4"});
  const sim::Scenario sd = load(import_slime(dp, "h100-sxm", "", "run.sh").yaml);
  EXPECT_EQ(sd.rollout.tensor_parallel, 2);
  EXPECT_EQ(sd.rollout.data_parallel, 4);
  EXPECT_EQ(sd.rollout.expert_parallel, 8);
  EXPECT_EQ(sd.rollout.engine_devices(), 8);
  // Megatron context parallel: the trainer's context_parallel.
  SlimeLaunch cp = l;
  append_slime_args(cp, {"--context-parallel-size", "2"});
  EXPECT_EQ(load(import_slime(cp, "h100-sxm", "", "run.sh").yaml).training.context_parallel, 2);
  // PPO: slime requests the critic's GPUs beside the actor's (--critic-num-*, default the
  // actor's): a separate critic group, the cluster grown by it; REINFORCE++ by name.
  SlimeLaunch ppo = l;
  append_slime_args(ppo, {"--advantage-estimator", "ppo"});
  const sim::Scenario sp = load(import_slime(ppo, "h100-sxm", "", "run.sh").yaml);
  EXPECT_EQ(sp.algorithm.name, sim::Algorithm::kPpo);
  ASSERT_TRUE(sp.algorithm.critic.has_value());
  EXPECT_EQ(sp.algorithm.critic->placement, sim::AuxPlacement::kSeparate);
  EXPECT_EQ(sp.algorithm.critic->devices, 8);
  EXPECT_EQ(sp.cluster.devices(), 24);  // actor 8 + critic 8 + rollout 8
  // A critic group the actor's EP8 layout cannot divide is refused, naming the rule.
  SlimeLaunch small = ppo;
  append_slime_args(small, {"--critic-num-gpus-per-node", "4"});
  std::string refused = "loaded";
  try {
    (void)load(import_slime(small, "h100-sxm", "", "run.sh").yaml);
  } catch (const sim::ScenarioError& e) {
    refused = e.what();
  }
  EXPECT_NE(refused.find("algorithm.critic.expert_parallel must divide"), std::string::npos) << refused;
  SlimeLaunch rpp = l;
  append_slime_args(rpp, {"--advantage-estimator", "reinforce_plus_plus"});
  EXPECT_EQ(load(import_slime(rpp, "h100-sxm", "", "run.sh").yaml).algorithm.name, sim::Algorithm::kReinforcePlusPlus);
  SlimeLaunch bad = l;
  append_slime_args(bad, {"--sglang-enable-dp-attention", "--sglang-dp-size", "3"});
  EXPECT_NE(error_of(bad).find("--sglang-dp-size 3 must divide --rollout-num-gpus-per-engine 8"), std::string::npos)
      << error_of(bad);
}

TEST(SlimeImport, DefaultsAndErrors) {
  const sim::Scenario s = load(
      import_slime(flags({"--hf-checkpoint", "Qwen/Qwen3-8B", "--rollout-batch-size", "16", "--colocate"}), "h100-sxm", "", "cli")
          .yaml);
  EXPECT_EQ(s.workload.samples_per_prompt, 1);                // slime's default
  EXPECT_EQ(s.workload.response_tokens.upper_bound(), 1024);  // --rollout-max-response-len default
  EXPECT_EQ(s.rollout.tensor_parallel, 1);
  EXPECT_DOUBLE_EQ(s.rollout.memory_utilization, 0.88);
  EXPECT_FALSE(s.training.dynamic_batching);
  EXPECT_EQ(s.training.micro_batch_sequences, 1);  // slime resets Megatron's --micro-batch-size to 1
  EXPECT_EQ(s.training.mini_batches, 1);
  EXPECT_EQ(s.cluster.devices(), 8);
  EXPECT_NE(error_of(flags({"--hf-checkpoint", "Qwen3-8B", "--colocate"})).find("--rollout-batch-size is required"),
            std::string::npos);
  EXPECT_NE(error_of(flags({"--hf-checkpoint", "Qwen3-8B", "--rollout-batch-size", "8"})).find("--rollout-num-gpus is required"),
            std::string::npos);
  EXPECT_NE(error_of(flags({"--hf-checkpoint", "Qwen3-8B", "--rollout-batch-size", "x", "--colocate"}))
                .find("--rollout-batch-size x: expected an integer"),
            std::string::npos);
  EXPECT_NE(error_of(flags({"--hf-checkpoint", "Qwen3-8B", "--rollout-batch-size", "8", "--colocate", "yes"}))
                .find("--colocate is a switch and takes no value"),
            std::string::npos);
  EXPECT_NE(error_of(flags({"--hf-checkpoint", "Qwen3-8B", "--rollout-batch-size", "6", "--n-samples-per-prompt", "4",
                            "--global-batch-size", "16", "--colocate"}))
                .find("--global-batch-size 16 must divide"),
            std::string::npos);
  EXPECT_NE(error_of(flags({"--hf-checkpoint", "/m/MyModel-13B", "--rollout-batch-size", "8", "--colocate"}))
                .find("no catalog model matches"),
            std::string::npos);
  const std::string script_error = [] {
    try {
      (void)parse_slime_script("A=(--x 1)\npython3 train.py \\\n  stray --x 2\n", "run.sh");
    } catch (const sim::ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  }();
  EXPECT_NE(script_error.find("run.sh:3:1: 'stray' comes before any --flag"), std::string::npos) << script_error;
}

}  // namespace
}  // namespace rlsim::analysis
