// rlsim import verl: the launch-script parser, verl's defaults, the key mapping and the errors.
#include "analysis/verl_import.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "sim/scenario/scenario.h"
#include "tests/sim/scenario_text.h"

namespace rlsim::analysis {
namespace {

namespace fs = std::filesystem;

std::string example_script() {
  std::ifstream in(fs::path(RLSIM_SOURCE_DIR) / "tests/data/verl/run_qwen3_8b_grpo.sh");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string error_of(const std::string& script) {
  try {
    (void)parse_verl_script(script, "run.sh");
  } catch (const sim::ScenarioError& e) {
    return e.what();
  }
  return "no error";
}

// The scenario text loads as a scenario.
sim::Scenario load(const std::string& yaml) { return sim::testing::load_scenario_text(yaml); }

TEST(VerlImport, ParsesContinuationsQuotesVariablesAndRepeatedKeys) {
  const VerlLaunch l = parse_verl_script(example_script(), "run.sh");
  EXPECT_EQ(l.config_name, "ppo_trainer");
  EXPECT_EQ(l.get("data.train_batch_size"), "256");                               // ${train_prompt_bsz}
  EXPECT_EQ(l.get("actor_rollout_ref.rollout.n"), "8");                           // $n_resp
  EXPECT_EQ(l.get("actor_rollout_ref.model.path"), "/models/Qwen3-8B");           // ${MODEL_PATH:-...}, double-quoted
  EXPECT_EQ(l.get("actor_rollout_ref.rollout.tensor_model_parallel_size"), "2");  // given twice: the last wins
  EXPECT_EQ(l.get("trainer.logger"), "[\"console\",\"wandb\"]");                  // single quotes keep the inner ones
  EXPECT_EQ(l.get("data.train_files"), "${HOME}/data/gsm8k/train.parquet");       // the environment's: left as is
  for (const auto& o : l.overrides) EXPECT_NE(o.key, "$@");
  // Each override keeps its physical line.
  for (const auto& o : l.overrides) {
    if (o.key == "actor_rollout_ref.rollout.enable_chunked_prefill") {
      EXPECT_EQ(o.line, 27);
    }
  }
  const VerlLaunch m = parse_verl_script(
      "python3 -m verl.trainer.main_ppo --config-name='ppo_megatron_trainer.yaml' +actor_rollout_ref.x=1 a.b=2 2>&1 | tee log\n",
      "m.sh");
  EXPECT_EQ(m.config_name, "ppo_megatron_trainer.yaml");
  EXPECT_EQ(m.get("actor_rollout_ref.x"), "1");
  EXPECT_EQ(m.overrides.size(), 2u);  // the redirection ends the command
}

TEST(VerlImport, BadScriptsNameTheLine) {
  EXPECT_NE(
      error_of("echo hi\npython3 -m verl.trainer.main_ppo \\\n  data.x='unterminated\n").find("run.sh:2:1: unterminated ' quote"),
      std::string::npos)
      << error_of("echo hi\npython3 -m verl.trainer.main_ppo \\\n  data.x='unterminated\n");
  EXPECT_NE(
      error_of("python3 -m verl.trainer.main_ppo \\\n  data.x=1 \\\n  oops\n").find("run.sh:3:1: 'oops' is not a Hydra override"),
      std::string::npos)
      << error_of("python3 -m verl.trainer.main_ppo \\\n  data.x=1 \\\n  oops\n");
  EXPECT_NE(error_of("echo nothing here\n").find("no verl command"), std::string::npos);
}

TEST(VerlImport, MapsEveryKeyWithVerlsDefaultsAndComments) {
  const ImportedScenario imp = import_verl(parse_verl_script(example_script(), "run.sh"), "h100-sxm", "", "run.sh");
  const sim::Scenario s = load(imp.yaml);
  EXPECT_EQ(s.model.name, "qwen3-8b");
  EXPECT_EQ(s.cluster.devices(), 8);
  EXPECT_EQ(s.workload.prompts_per_step, 256);
  EXPECT_EQ(s.workload.samples_per_prompt, 8);
  EXPECT_EQ(s.workload.prompt_tokens.upper_bound(), 1024);
  EXPECT_EQ(s.workload.response_tokens.upper_bound(), 4096);
  EXPECT_EQ(s.rollout.tensor_parallel, 2);
  EXPECT_DOUBLE_EQ(s.rollout.memory_utilization, 0.6);
  EXPECT_EQ(s.rollout.max_num_seqs, 1024);  // verl's default
  EXPECT_FALSE(s.rollout.enforce_eager);    // verl's default
  EXPECT_EQ(s.training.backend, sim::TrainingBackend::kFsdp);
  EXPECT_EQ(s.training.mini_batches, 4);  // 256 / ppo_mini_batch_size 64
  EXPECT_TRUE(s.training.dynamic_batching);
  EXPECT_EQ(s.training.micro_batch_tokens, 24000);
  EXPECT_TRUE(s.training.reference_model);           // use_kl_loss
  EXPECT_TRUE(s.training.activation_checkpointing);  // FSDP default: enable_gradient_checkpointing true
  EXPECT_NE(imp.yaml.find("# verl actor_rollout_ref.rollout.max_num_seqs=1024 (verl default)"), std::string::npos);
  EXPECT_NE(imp.yaml.find("# verl data.train_batch_size=256\n"), std::string::npos);
  bool chunked = false;
  for (const auto& w : imp.warnings)
    chunked = chunked || w.find("line 27: actor_rollout_ref.rollout.enable_chunked_prefill") == 0;
  EXPECT_TRUE(chunked);
  EXPECT_NE(std::find(imp.ignored.begin(), imp.ignored.end(), "actor_rollout_ref.actor.optim.lr"), imp.ignored.end());
  // An unknown key is never dropped silently: it is a warning.
  VerlLaunch extra = parse_verl_script(example_script(), "run.sh");
  extra.overrides.push_back({"actor_rollout_ref.rollout.some_new_knob", "3", 0});
  bool listed = false;
  for (const auto& w : import_verl(extra, "h100-sxm", "", "run.sh").warnings)
    listed = listed || w.find("some_new_knob") != std::string::npos;
  EXPECT_TRUE(listed);
}

TEST(VerlImport, MegatronDefaultsModelMatchingAndErrors) {
  const VerlLaunch m = parse_verl_overrides(
      {"actor_rollout_ref.model.path=/ckpt/Qwen3-8B-Base", "actor_rollout_ref.actor.strategy=megatron",
       "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
       "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16"});
  const sim::Scenario s = load(import_verl(m, "h20", "", "cli").yaml);
  EXPECT_EQ(s.model.name, "qwen3-8b");  // Qwen3-8B-Base -> qwen3-8b
  EXPECT_EQ(s.training.backend, sim::TrainingBackend::kMegatron);
  EXPECT_EQ(s.training.tensor_parallel, 2);
  EXPECT_FALSE(s.training.activation_checkpointing);  // Megatron: recompute_granularity null
  EXPECT_EQ(s.training.micro_batch_sequences, 4);
  EXPECT_EQ(s.training.logprob_micro_batch_sequences, 16);
  EXPECT_EQ(s.rollout.data_parallel, 1);  // verl's default: no data_parallel line
  EXPECT_EQ(import_verl(m, "h20", "", "cli").yaml.find("data_parallel:"), std::string::npos);
  EXPECT_EQ(s.workload.prompts_per_step, 1024);  // verl's data.train_batch_size default
  // verl's default advantage estimator is GAE, which trains a critic: PPO, the critic in verl's
  // Megatron critic defaults (TP1 PP1) on the actor's devices.
  EXPECT_EQ(s.algorithm.name, sim::Algorithm::kPpo);
  ASSERT_TRUE(s.algorithm.critic.has_value());
  EXPECT_EQ(s.algorithm.critic->layout.backend, sim::TrainingBackend::kMegatron);
  EXPECT_EQ(s.algorithm.critic->layout.tensor_parallel, 1);
  EXPECT_EQ(s.algorithm.critic->placement, sim::AuxPlacement::kActor);
  EXPECT_FALSE(s.algorithm.reward_model.has_value());
  EXPECT_NE(import_verl(m, "h20", "", "cli").yaml.find("# verl algorithm.adv_estimator=gae (verl default)"), std::string::npos);
  // GRPO needs no section; a reward model, a critic's own layout and the other estimators map by name.
  const VerlLaunch g = parse_verl_overrides({"actor_rollout_ref.model.path=/ckpt/Qwen3-8B", "algorithm.adv_estimator=grpo"});
  EXPECT_EQ(import_verl(g, "h20", "", "cli").yaml.find("algorithm:"), std::string::npos);
  const VerlLaunch p = parse_verl_overrides(
      {"actor_rollout_ref.model.path=/ckpt/Qwen3-8B", "actor_rollout_ref.actor.strategy=megatron",
       "critic.megatron.tensor_model_parallel_size=2", "reward_model.enable=True", "reward_model.model.path=/ckpt/RM-8B"});
  const ImportedScenario pi = import_verl(p, "h20", "", "cli");
  const sim::Scenario ps = load(pi.yaml);
  EXPECT_EQ(ps.algorithm.critic->layout.tensor_parallel, 2);
  EXPECT_TRUE(ps.algorithm.reward_model.has_value());
  bool rm_warned = false;
  for (const auto& w : pi.warnings) rm_warned = rm_warned || w.find("reward_model.model.path=/ckpt/RM-8B") == 0;
  EXPECT_TRUE(rm_warned) << "a reward checkpoint other than the actor's is priced as the actor's model, and said so";
  // A reward checkpoint of a disabled reward model prices nothing: no such warning.
  const VerlLaunch off =
      parse_verl_overrides({"actor_rollout_ref.model.path=/ckpt/Qwen3-8B", "reward_model.model.path=/ckpt/RM-8B"});
  for (const auto& w : import_verl(off, "h20", "", "cli").warnings)
    EXPECT_EQ(w.find("priced as the actor's model"), std::string::npos) << w;
  for (const auto& [adv, want] :
       {std::pair{"rloo", sim::Algorithm::kRloo}, std::pair{"reinforce_plus_plus_baseline", sim::Algorithm::kReinforcePlusPlus},
        std::pair{"remax", sim::Algorithm::kGrpo}}) {
    const VerlLaunch a = parse_verl_overrides({"actor_rollout_ref.model.path=/ckpt/Qwen3-8B",
                                               std::string("algorithm.adv_estimator=") + adv, "actor_rollout_ref.rollout.n=4"});
    EXPECT_EQ(load(import_verl(a, "h20", "", "cli").yaml).algorithm.name, want) << adv;
  }
  auto error = [](const VerlLaunch& l) {
    try {
      (void)import_verl(l, "h100-sxm", "", "run.sh");
    } catch (const sim::ScenarioError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error(parse_verl_overrides({"actor_rollout_ref.model.path=/m/MyModel-13B"})).find("no catalog model matches"),
            std::string::npos);
  EXPECT_NE(error(parse_verl_overrides({"actor_rollout_ref.model.path=Qwen3-8B", "data.train_batch_size=lots"}))
                .find("data.train_batch_size=lots: expected an integer"),
            std::string::npos);
  EXPECT_NE(error(parse_verl_script("python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=Qwen3-8B \\\n"
                                    "  data.train_batch_size=${BSZ}\n",
                                    "run.sh"))
                .find("run.sh:2:1: data.train_batch_size=${BSZ}: the variable is not assigned"),
            std::string::npos);
}

// verl's rollout data_parallel_size / expert_parallel_size: DP-attention engines with wide EP.
TEST(VerlImport, RolloutDataAndExpertParallelSizes) {
  const VerlLaunch m = parse_verl_overrides({"actor_rollout_ref.model.path=/ckpt/Qwen3-30B-A3B",
                                             "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
                                             "actor_rollout_ref.rollout.data_parallel_size=4",
                                             "actor_rollout_ref.rollout.expert_parallel_size=8", "trainer.n_gpus_per_node=8"});
  const ImportedScenario imp = import_verl(m, "h100-sxm", "", "cli");
  const sim::Scenario s = load(imp.yaml);
  EXPECT_EQ(s.model.name, "qwen3-30b-a3b");
  EXPECT_EQ(s.rollout.tensor_parallel, 2);
  EXPECT_EQ(s.rollout.data_parallel, 4);
  EXPECT_EQ(s.rollout.expert_parallel, 8);
  EXPECT_NE(imp.yaml.find("data_parallel: 4"), std::string::npos);
  // Megatron's context parallel size is the trainer's context_parallel.
  const VerlLaunch cp =
      parse_verl_overrides({"actor_rollout_ref.model.path=/ckpt/Qwen3-8B", "actor_rollout_ref.actor.strategy=megatron",
                            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
                            "actor_rollout_ref.actor.megatron.context_parallel_size=2", "trainer.n_gpus_per_node=8"});
  EXPECT_EQ(load(import_verl(cp, "h100-sxm", "", "cli").yaml).training.context_parallel, 2);
}

// The recipes: one-step-off splits the devices (shell arithmetic included), fully async also
// sets the staleness and a weight update's batch.
TEST(VerlImport, OneStepOffAndFullyAsyncRecipes) {
  std::ifstream in(fs::path(RLSIM_SOURCE_DIR) / "tests/data/verl/one_step_off_qwen3_8b.sh");
  std::ostringstream ss;
  ss << in.rdbuf();
  const VerlLaunch l = parse_verl_script(ss.str(), "osp.sh");
  EXPECT_EQ(l.get("trainer.n_gpus_per_node"), "6");  // $((NGPUS_PER_NODE - n_gpus_rollout))
  const ImportedScenario imp = import_verl(l, "h20", "", "osp.sh");
  const sim::Scenario s = load(imp.yaml);
  EXPECT_EQ(s.placement.mode, sim::PlacementMode::kDisaggregated);
  EXPECT_EQ(s.placement.rollout_devices, 2);
  EXPECT_EQ(s.placement.train_devices, 6);
  EXPECT_EQ(s.cluster.devices(), 8);
  EXPECT_EQ(s.schedule.mode, sim::ScheduleMode::kOneStepOff);
  EXPECT_EQ(s.training.backend, sim::TrainingBackend::kFsdp);  // fsdp2
  EXPECT_EQ(s.training.mini_batches, 6);                       // 1152 / 192
  for (const auto& w : imp.warnings) EXPECT_EQ(w.find("hybrid_engine"), std::string::npos) << w;

  const VerlLaunch a = parse_verl_script(
      "python3 -m recipe.fully_async_policy.fully_async_main actor_rollout_ref.model.path=Qwen/Qwen3-8B \\\n"
      "  actor_rollout_ref.actor.ppo_mini_batch_size=32 async_training.require_batches=2 \\\n"
      "  async_training.trigger_parameter_sync_step=2 trainer.nnodes=2 rollout.nnodes=2 data.max_response_length=2048\n",
      "async.sh");
  const sim::Scenario t = load(import_verl(a, "h20", "", "async.sh").yaml);
  EXPECT_EQ(t.schedule.mode, sim::ScheduleMode::kAsync);
  EXPECT_DOUBLE_EQ(t.schedule.staleness, 0.1);  // the recipe's default
  EXPECT_TRUE(t.schedule.partial_rollout);
  EXPECT_EQ(t.workload.prompts_per_step, 128);  // 32 x 2 x 2 prompts per weight update
  EXPECT_EQ(t.training.mini_batches, 4);
  EXPECT_EQ(t.cluster.nodes, 4);
  EXPECT_EQ(t.placement.rollout_devices, 16);
}

// A console log sets the lengths: the fitted lognormal clipped at max_response_length has the
// log's clip ratio and mean (closed form, checked here by sampling-free integration).
TEST(VerlImport, ConsoleLogSetsTheLengthDistributions) {
  const std::string log =
      "(TaskRunner pid=1) step:1 - actor/pg_loss:np.float64(0.01) - response_length/mean:np.float64(2900.5) - "
      "response_length/max:np.float64(4096.0) - response_length/clip_ratio:np.float64(0.30) - prompt_length/mean:180.0 - "
      "prompt_length/max:np.float64(400.0) - timing_s/gen:np.float64(300.1)\n"
      "unrelated line\n"
      "(TaskRunner pid=1) step:2 - response_length/mean:3100.5 - response_length/max:4096 - response_length/clip_ratio:0.34 - "
      "prompt_length/mean:190.0 - prompt_length/max:420\n";
  const VerlLogLengths l = parse_verl_log(log, "log.txt");
  EXPECT_EQ(l.steps, 2);
  EXPECT_DOUBLE_EQ(l.response_mean, 3000.5);
  EXPECT_DOUBLE_EQ(l.response_clip_ratio, 0.32);
  EXPECT_DOUBLE_EQ(l.prompt_max, 410.0);
  for (const auto& [mean, clip] : {std::pair{3000.5, 0.32}, {1200.0, 0.02}, {3900.0, 0.9}}) {
    const auto [median, sigma] = fit_clipped_lognormal(mean, clip, 4096);
    const double mu = std::log(median), lm = std::log(4096.0);
    const double p_clip = 0.5 * std::erfc((lm - mu) / sigma / std::sqrt(2.0));
    const double cmean =
        std::exp(mu + sigma * sigma / 2) * 0.5 * std::erfc(-((lm - mu - sigma * sigma) / sigma) / std::sqrt(2.0)) + 4096 * p_clip;
    EXPECT_NEAR(p_clip, clip, 1e-6) << mean << " " << clip;
    EXPECT_NEAR(cmean, mean, 1e-3 * mean) << mean << " " << clip;
  }
  const ImportedScenario imp = import_verl(parse_verl_script(example_script(), "run.sh"), "h100-sxm", "", "run.sh", &l);
  const sim::Scenario s = load(imp.yaml);
  EXPECT_EQ(s.workload.response_tokens.kind, sim::LengthDist::Kind::kLognormal);
  EXPECT_EQ(s.workload.response_tokens.max, 4096);
  EXPECT_EQ(s.workload.prompt_tokens.upper_bound(), 410);
  EXPECT_NE(imp.yaml.find("# log: response_length/mean 3000.5"), std::string::npos);
  EXPECT_THROW(parse_verl_log("no steps here\n", "log.txt"), sim::ScenarioError);
  EXPECT_THROW(parse_verl_log("step:1 - response_length/mean:10 - prompt_length/mean:5\n", "log.txt"), sim::ScenarioError);
}

}  // namespace
}  // namespace rlsim::analysis
