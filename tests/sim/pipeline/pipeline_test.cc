#include "sim/pipeline/pipeline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "sim/pipeline/collectives.h"
#include "tests/sim/recorded_run.h"
#include "tests/sim/scenario_text.h"

namespace rlsim::sim {
namespace {

Scenario load_text(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return testing::load_scenario_text(text, overrides);
}

// The message a scenario's loading fails with, or "no error".
std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    load_text(text, overrides);
  } catch (const ScenarioError& e) {
    return e.what();
  }
  return "no error";
}

const char* kBase = R"(name: pipeline test
seed: 3
steps: 3
model: qwen3-8b
cluster: {device: h100-sxm, nodes: 1, devices_per_node: 8}
workload:
  prompts_per_step: 16
  samples_per_prompt: 8
  prompt_tokens: {dist: uniform, min: 100, max: 400}
  response_tokens: {dist: lognormal, median: 1000, sigma: 0.8, max: 8192}
rollout: {memory_utilization: 0.6}
)";

// Data-parallel attention with wide EP (rollout.data_parallel): Kimi-K2 as one engine of TP1 x
// DP16 with EP16 against the same 16 devices as one TP16 EP16 group.
TEST(Pipeline, DataParallelAttentionSpreadsExpertsAndKeepsDenseWeightsPerRank) {
  const std::string path = std::string(RLSIM_SOURCE_DIR) + "/scenarios/slime-kimi-k2-fp8-h200-2node.yaml";
  const Scenario tp16 = load_scenario(path);
  const Scenario dp16 = load_scenario(path, {"rollout.tensor_parallel=1", "rollout.data_parallel=16"});
  ASSERT_EQ(dp16.rollout.engine_devices(), 16);
  const RolloutCostModel a = RolloutCostModel::build(tp16), b = RolloutCostModel::build(dp16);
  EXPECT_FALSE(a.wide_ep);
  EXPECT_TRUE(b.wide_ep);
  const double total = models::weight_bytes(dp16.model, dp16.rollout.precision);
  const double routed =
      total - a.dense_bytes_per_device * 16 -
      (dp16.model.tied_embeddings ? 0.0 : dp16.rollout.precision.embedding.bytes(dp16.model.vocab, dp16.model.hidden));
  // Every device: all dense weights (TP1) plus 1/16 of the experts; the TP16 group holds 1/16 of both.
  EXPECT_NEAR(b.weight_bytes_per_device, total - routed + routed / 16, 1e-6 * total);
  EXPECT_NEAR(a.weight_bytes_per_device, total / 16, 1e-6 * total);
  EXPECT_NEAR(b.expert_bytes_per_device, a.expert_bytes_per_device, 1e-9 * a.expert_bytes_per_device);
  EXPECT_NEAR(b.dense_bytes_per_device, 16 * a.dense_bytes_per_device, 1e-9 * b.dense_bytes_per_device);
  // The slowest DP rank runs ceil(b / 16) sequences.
  EXPECT_DOUBLE_EQ(b.rank_share(17), 2.0 / 17);
  EXPECT_DOUBLE_EQ(b.rank_share(160), 0.1 / 1.6);
  EXPECT_DOUBLE_EQ(a.rank_share(17), 1.0);
  // A DP16 engine with 16 n sequences does the attention and dense work of one rank with n: the
  // same decode memory time apart from the experts, whose bytes both spread over 16 devices.
  const int n = 32;
  const double ctx = 16.0 * n * 2000;
  RolloutCostModel one_rank = b;
  one_rank.dp = 1;
  EXPECT_NEAR(b.decode_memory_s(16 * n, ctx) - b.weights_read_s(16 * n),
              one_rank.decode_memory_s(n, ctx / 16) - one_rank.weights_read_s(n), 1e-12);
  // Busiest device under random routing: 1 + sqrt(2 ln 16 / (b top-k / 16)), toward 1 with load.
  EXPECT_DOUBLE_EQ(b.expert_imbalance(512), 1.0 + std::sqrt(2.0 * std::log(16.0) / (512.0 * b.active / 16)));
  EXPECT_GT(b.expert_imbalance(64), b.expert_imbalance(4096));
  EXPECT_DOUBLE_EQ(a.expert_imbalance(512), 1.0);
  // The run: one engine whose KV cache is 16 ranks' worth, every sequence decoded.
  NullSink sink;
  const SimResult r = simulate(dp16, sink);
  ASSERT_TRUE(r.fits()) << r.oom->reason;
  EXPECT_EQ(r.engines, 1);
  const double rank_kv = std::floor(r.kv_capacity_tokens / 16);
  EXPECT_DOUBLE_EQ(r.kv_capacity_tokens, 16 * rank_kv);
  EXPECT_GT(r.tokens_generated, 0);
}

// max_num_seqs on a DP-attention engine: vLLM schedules each DP rank on its own (an engine core
// per rank, max_num_seqs each); SGLang divides --max-running-requests over the ranks.
TEST(Pipeline, DataParallelEnginesCountMaxNumSeqsAsTheirFrameworkDoes) {
  NullSink sink;
  auto run = [&](const std::string& engine) {
    // The rollout on its own devices (the trainer's memory is not what this checks).
    const Scenario s = load_text(
        kBase, {"model=qwen3-30b-a3b", "cluster.nodes=2", "placement={mode: disaggregated, rollout_devices: 8, train_devices: 8}",
                "rollout={engine: " + engine + ", tensor_parallel: 1, data_parallel: 8, expert_parallel: 8, max_num_seqs: 4}"});
    const SimResult r = simulate(s, sink);
    EXPECT_TRUE(!r.oom || r.oom->role == Role::kTraining) << engine << ": " << r.oom->reason;
    return std::pair{s.rollout.engine_max_seqs(), r.max_running};
  };
  EXPECT_EQ(run("vllm"), std::make_pair(32, 32));
  EXPECT_EQ(run("sglang"), std::make_pair(4, 4));
}

// A wide-EP decode step against the SGLang team's large-scale EP deployment (LMSYS blog
// 2025-05-05, "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96
// H100 GPUs"; launch commands in sgl-project/sglang issue #6017): the decode side is 9 nodes, one
// engine of DP72 attention with EP72 (DeepEP low-latency), 256 running requests per rank
// (--max-running-requests = nodes x 2048), 2,000-token inputs, DeepSeek-V3 FP8 weights;
// published 22,282 output tokens/s per node. Catalog H100 and built-in calibration, nothing
// fitted to it (EPLB's redundant experts and two-batch overlap are not modelled): within 25 %.
TEST(Pipeline, WideEpDecodeReproducesSglangLargeScaleEp) {
  const Scenario s = load_text(R"(name: sglang large-scale EP decode
model: deepseek-v3
cluster: {device: h100-sxm, nodes: 10, devices_per_node: 8}
placement: {mode: disaggregated, rollout_devices: 72, train_devices: 8}
workload:
  prompts_per_step: 18432
  samples_per_prompt: 1
  prompt_tokens: {dist: fixed, value: 2000}
  response_tokens: {dist: fixed, value: 100}
rollout: {engine: sglang, tensor_parallel: 1, data_parallel: 72, expert_parallel: 72, precision: fp8-block}
)");
  const RolloutCostModel c = RolloutCostModel::build(s);
  ASSERT_TRUE(c.wide_ep);
  const int batch = 72 * 256;
  const double step_s = c.decode_s(batch, batch * 2050.0);  // mid-response context
  const double per_node = batch / step_s / 9;
  EXPECT_NEAR(per_node / 22282, 1.0, 0.25) << per_node << " tok/s per node, step " << step_s * 1e3 << " ms";
}

// PPO (algorithm.name ppo): a critic colocated with the actor (values forward, critic update
// before the actor's), an optional reward model's forward; GRPO runs none of these phases.
TEST(Pipeline, PpoRunsTheCriticAndTheRewardModelByName) {
  NullSink sink;
  const Scenario grpo = load_text(kBase);
  const Scenario ppo = load_text(kBase, {"algorithm={name: ppo, reward_model: {model: qwen3-8b}}"});
  ASSERT_TRUE(ppo.algorithm.critic.has_value());
  EXPECT_EQ(ppo.algorithm.critic->model.name, "qwen3-8b");  // the actor's model by default
  const std::vector<Phase> g = phases_of(grpo), p = phases_of(ppo);
  EXPECT_EQ(g.size(), 7u);
  EXPECT_EQ(p.size(), 10u);
  EXPECT_EQ(std::find(g.begin(), g.end(), Phase::kValues), g.end());
  const SimResult rg = simulate(grpo, sink), rp = simulate(ppo, sink);
  ASSERT_TRUE(rp.fits());
  const auto& st = rp.steps.front();
  // The critic's forward and update are the value-head trainer's passes over the step's batch.
  Scenario critic = ppo;
  critic.training.recompute_old_logprob = true;
  critic.training.reference_model = false;
  const TrainerCostModel ct(critic, ModelHead::kValue), at(ppo);
  TrainBatch b;
  b.tokens = 16 * 8 * 2000.0;
  b.sequences = 128;
  b.max_sequence = 8192;
  EXPECT_LT(ct.phase_times(b).actor_update, at.phase_times(b).actor_update);  // no LM head
  EXPECT_LT(ct.memory(b).logits, 1e-3 * at.memory(b).logits);                 // one value per token, not a vocabulary
  EXPECT_GT(st.phase_s[Phase::kValues], 0);
  EXPECT_GT(st.phase_s[Phase::kCriticUpdate], st.phase_s[Phase::kValues]);
  EXPECT_NEAR(st.phase_s[Phase::kReward], st.phase_s[Phase::kValues], 1e-9);  // same model, same head, same batch
  EXPECT_DOUBLE_EQ(rg.steps.front().phase_s[Phase::kValues], 0.0);
  // Same seed, same rollout; the PPO step is longer by its extra phases, and the critic's and the
  // reward model's resident bytes show by name on the training ledger.
  EXPECT_NEAR(st.phase_s[Phase::kRollout], rg.steps.front().phase_s[Phase::kRollout], 1e-6);
  EXPECT_GT(st.step_s(), rg.steps.front().step_s() + st.phase_s[Phase::kCriticUpdate]);
  bool critic_params = false, reward_params = false;
  for (const auto& l : rp.ledgers) {
    for (const auto& e : l.events()) {
      critic_params |= e.tag == MemoryTag::kCriticParams && e.delta_bytes > 0;
      reward_params |= e.tag == MemoryTag::kRewardParams && e.delta_bytes > 0;
    }
  }
  EXPECT_TRUE(critic_params);
  EXPECT_TRUE(reward_params);
  EXPECT_GT(rp.peak_training_bytes, rg.peak_training_bytes);
}

// OpenRLHF's layout: the critic (and the reward model beside it) on devices of their own. Their
// passes run beside the actor's: the experience block lasts the longer of the actor's chain
// (old log-probs, reference) and the critic's (values, reward); the update block the longer of
// the two updates. Each group's memory is on its own ledger.
TEST(Pipeline, SeparateCriticRunsBesideTheActor) {
  NullSink sink;
  const std::vector<std::string> layout{"model=qwen2.5-math-1.5b",
                                        "placement={mode: disaggregated, rollout_devices: 4, train_devices: 2}",
                                        "rollout.tensor_parallel=1"};
  auto with = [&](const std::string& algorithm) {
    auto o = layout;
    o.push_back(algorithm);
    return load_text(kBase, o);
  };
  const Scenario sep =
      with("algorithm={name: ppo, critic: {placement: separate, devices: 2}, reward_model: {placement: critic}}");
  const SimResult r = simulate(sep, sink);
  ASSERT_TRUE(r.fits()) << r.oom->reason;
  ASSERT_EQ(r.ledgers.size(), 3u);
  EXPECT_EQ(r.ledgers[2].group(), "critic (2 devices)");
  for (const auto& st : r.steps) {
    const auto& p = st.phase_s;
    const double experience = std::max(p[Phase::kOldLogprob] + p[Phase::kReference], p[Phase::kValues] + p[Phase::kReward]);
    const double update = std::max(p[Phase::kActorUpdate] + p[Phase::kOffload], p[Phase::kCriticUpdate]);
    EXPECT_NEAR(st.step_s(), p[Phase::kRollout] + p[Phase::kStepOverhead] + experience + update + p[Phase::kWeightSync], 1e-6);
    EXPECT_LT(st.step_s(), p.total() - 1.0) << "the critic's passes overlap the actor's";
  }
  // The values pass starts with the old-log-prob pass; the critic's update with the actor's.
  auto start = [&](Phase ph) {
    for (const auto& span : r.phases)
      if (span.step == 0 && span.phase == ph) return span.start;
    return TimeNs{-1};
  };
  EXPECT_EQ(start(Phase::kValues), start(Phase::kOldLogprob));
  EXPECT_EQ(start(Phase::kCriticUpdate), start(Phase::kActorUpdate));
  // phases.csv and the timeline name the devices: the critic's passes (and the reward model's on
  // its devices) as "critic", the actor's as "training".
  for (const auto& span : r.phases) {
    if (span.phase == Phase::kValues || span.phase == Phase::kReward || span.phase == Phase::kCriticUpdate) {
      EXPECT_EQ(phase_role(span), "critic") << phase_name(span.phase);
    } else if (span.role == Role::kTraining) {
      EXPECT_EQ(phase_role(span), "training") << phase_name(span.phase);
    }
  }
  // Its peak is reported per device of its group (summary.json's peak_memory_bytes.critic).
  EXPECT_DOUBLE_EQ(r.peak_critic_bytes, r.ledgers[2].peak());
  EXPECT_GT(r.peak_critic_bytes, 0.0);
  EXPECT_DOUBLE_EQ(r.peak_reward_model_bytes, 0.0);  // on the critic's devices, no group of its own
  // The critic's and reward model's bytes are on the critic's ledger, none on the actor's.
  for (std::size_t i = 0; i < r.ledgers.size(); ++i) {
    for (const auto& e : r.ledgers[i].events()) {
      const bool aux = e.tag == MemoryTag::kCriticParams || e.tag == MemoryTag::kRewardParams;
      if (aux) {
        EXPECT_EQ(i, 2u) << memory_tag_name(e.tag);
      }
    }
  }
  // Its own layout prices it: the critic as Megatron TP2 on its 2 devices (no parameter gathers),
  // the actor's passes untouched.
  const SimResult tp = simulate(with("algorithm={name: ppo, critic: {placement: separate, devices: 2, backend: megatron, "
                                     "tensor_parallel: 2}, reward_model: {placement: critic}}"),
                                sink);
  ASSERT_TRUE(tp.fits());
  EXPECT_NE(tp.steps[0].phase_s[Phase::kCriticUpdate], r.steps[0].phase_s[Phase::kCriticUpdate]);
  EXPECT_DOUBLE_EQ(tp.steps[0].phase_s[Phase::kActorUpdate], r.steps[0].phase_s[Phase::kActorUpdate]);
  // The same models on the actor's devices: the same rollout, the passes one after another.
  const SimResult c = simulate(with("algorithm={name: ppo, reward_model: {}}"), sink);
  ASSERT_TRUE(c.fits());
  EXPECT_EQ(c.ledgers.size(), 2u);
  EXPECT_NEAR(c.steps[0].phase_s[Phase::kRollout], r.steps[0].phase_s[Phase::kRollout], 1e-9);
  EXPECT_NEAR(c.steps[0].step_s(), c.steps[0].phase_s.total(), 1e-6);
  EXPECT_GT(c.steps[0].step_s(), r.steps[0].step_s());
}

// A reference on devices of its own (OpenRLHF --ref_num_gpus_per_node): its pass runs beside the
// actor's old-log-prob pass, as long as the same pass on its own devices would take, and its
// weights leave the actor's ledger for its own.
TEST(Pipeline, SeparateReferenceRunsBesideTheActor) {
  NullSink sink;
  const std::vector<std::string> base{"model=qwen2.5-math-1.5b",
                                      "placement={mode: disaggregated, rollout_devices: 4, train_devices: 2}",
                                      "rollout.tensor_parallel=1"};
  auto with = [&](const std::string& algorithm) {
    auto o = base;
    o.push_back(algorithm);
    return load_text(kBase, o);
  };
  const SimResult on_actor = simulate(with("algorithm={name: grpo}"), sink);
  const SimResult sep = simulate(with("algorithm={name: grpo, reference: {placement: separate, devices: 2}}"), sink);
  ASSERT_TRUE(on_actor.fits() && sep.fits());
  ASSERT_EQ(sep.ledgers.size(), 3u);
  EXPECT_EQ(sep.ledgers[2].group(), "reference (2 devices)");
  for (std::size_t k = 0; k < sep.steps.size(); ++k) {
    const auto& p = sep.steps[k].phase_s;
    // Same devices count and layout: the pass costs what it cost on the actor's devices.
    EXPECT_NEAR(p[Phase::kReference], on_actor.steps[k].phase_s[Phase::kReference], 1e-9);
    const double experience = std::max(p[Phase::kOldLogprob], p[Phase::kReference]);
    EXPECT_NEAR(sep.steps[k].step_s(),
                p[Phase::kRollout] + p[Phase::kStepOverhead] + experience + p[Phase::kActorUpdate] + p[Phase::kOffload] +
                    p[Phase::kWeightSync],
                1e-6);
    EXPECT_NEAR(on_actor.steps[k].step_s() - sep.steps[k].step_s(), std::min(p[Phase::kOldLogprob], p[Phase::kReference]), 1e-6);
  }
  for (const auto& span : sep.phases) {
    if (span.phase == Phase::kReference) {
      EXPECT_EQ(phase_role(span), "reference");
    }
  }
  // Its weights are on its own ledger only; the actor's peak drops by them.
  for (std::size_t i = 0; i < sep.ledgers.size(); ++i) {
    for (const auto& e : sep.ledgers[i].events()) {
      if (e.tag == MemoryTag::kReferenceParams) {
        EXPECT_EQ(i, 2u);
      }
    }
  }
  EXPECT_DOUBLE_EQ(sep.peak_reference_bytes, sep.ledgers[2].peak());
  EXPECT_LT(sep.peak_training_bytes, on_actor.peak_training_bytes);
  // placement: actor is today's behaviour, byte for byte.
  const SimResult same = simulate(with("algorithm={name: grpo, reference: {placement: actor}}"), sink);
  EXPECT_DOUBLE_EQ(same.steps[1].step_s(), on_actor.steps[1].step_s());
  EXPECT_EQ(same.ledgers.size(), 2u);
}

TEST(Pipeline, AlgorithmRulesNameWhatTheyBreak) {
  auto error = [](const std::vector<std::string>& o) { return load_error(kBase, o); };
  EXPECT_NE(error({"algorithm={name: grpo, critic: {model: qwen3-8b}}"}).find("algorithm.critic needs name: ppo"),
            std::string::npos);
  EXPECT_NE(
      error({"algorithm={name: rloo}", "workload.samples_per_prompt=1"}).find("rloo needs workload.samples_per_prompt >= 2"),
      std::string::npos);
  EXPECT_NE(error({"algorithm={name: dpo}"}).find("algorithm.name"), std::string::npos);
  EXPECT_NE(error({"algorithm={name: ppo, critic: {modle: qwen3-8b}}"}).find("modle"), std::string::npos);
  EXPECT_EQ(error({"algorithm={name: reinforce++}"}), "no error");
  // The reference is the actor's initial policy: no model or precision of its own, and there has
  // to be a reference pass to place.
  EXPECT_NE(error({"algorithm={reference: {model: qwen3-8b}}"}).find("model"), std::string::npos);
  EXPECT_NE(error({"training.reference_model=false", "algorithm={reference: {placement: actor}}"})
                .find("training.reference_model is false"),
            std::string::npos);
  EXPECT_NE(error({"algorithm={reference: {placement: separate, devices: 2}}"}).find("needs placement.mode: disaggregated"),
            std::string::npos);
  EXPECT_EQ(error({"algorithm={name: ppo, critic: {model: qwen3-32b, precision: bf16}}"}), "no error");
  // Separate groups: disaggregated placement, devices that fit beside the others, whole copies of
  // the training layout; a reward model on the critic's devices needs a critic.
  EXPECT_NE(
      error({"algorithm={name: ppo, critic: {placement: separate, devices: 2}}"}).find("needs placement.mode: disaggregated"),
      std::string::npos);
  const std::string dis = "placement={mode: disaggregated, rollout_devices: 4, train_devices: 2}";
  EXPECT_NE(
      error({dis, "algorithm={name: ppo, critic: {placement: separate, devices: 4}}"}).find("exceeds the cluster's 8 devices"),
      std::string::npos);
  EXPECT_NE(error({dis, "training.tensor_parallel=2", "algorithm={name: ppo, critic: {placement: separate, devices: 1}}"})
                .find("algorithm.critic tensor_parallel x pipeline_parallel = 2 must divide the 1 algorithm.critic devices"),
            std::string::npos);
  // A layout of its own follows the same rules, named under its section.
  EXPECT_NE(error({"algorithm={name: ppo, critic: {expert_parallel: 2}}"})
                .find("algorithm.critic.expert_parallel > 1 needs an MoE model"),
            std::string::npos);
  EXPECT_NE(error({"algorithm={name: ppo, critic: {context_parallel: 2}}"})
                .find("algorithm.critic.context_parallel > 1 needs backend: megatron"),
            std::string::npos);
  EXPECT_NE(error({"algorithm={name: ppo, critic: {tensor_parallel: 3}}"}).find("must divide the 8 algorithm.critic devices"),
            std::string::npos);
  EXPECT_EQ(error({"algorithm={name: ppo, critic: {backend: megatron, tensor_parallel: 2, pipeline_parallel: 2}}"}), "no error");
  EXPECT_NE(error({dis, "algorithm={name: ppo, critic: {placement: separate}}"}).find("devices"), std::string::npos);
  EXPECT_NE(error({dis, "algorithm={name: ppo, critic: {devices: 2}}"}).find("only valid with placement: separate"),
            std::string::npos);
  EXPECT_NE(error({"algorithm={name: grpo, reward_model: {placement: critic}}"}).find("placement: critic needs a critic"),
            std::string::npos);
  EXPECT_NE(error({"algorithm={name: ppo, critic: {placement: critic}}"}).find("algorithm.critic.placement"), std::string::npos);
  EXPECT_EQ(error({dis, "algorithm={name: ppo, critic: {placement: separate, devices: 2}, reward_model: {placement: critic}}"}),
            "no error");
}

TEST(Pipeline, SyncStepIsTheSumOfItsPhases) {
  NullSink sink;
  const Scenario s = load_text(kBase);
  const SimResult r = simulate(s, sink);
  ASSERT_TRUE(r.fits());
  ASSERT_EQ(r.steps.size(), 3u);
  for (const auto& st : r.steps) {
    EXPECT_NEAR(st.step_s(), st.phase_s.total(), 1e-6);
    EXPECT_GT(st.phase_s[Phase::kRollout], 0);
    EXPECT_GT(st.phase_s[Phase::kActorUpdate], 0);
  }
  for (std::size_t i = 1; i < r.steps.size(); ++i) EXPECT_EQ(r.steps[i].start, r.steps[i - 1].end);
}

TEST(Pipeline, EverySequenceOnceAndEveryAllocationFreed) {
  NullSink sink;
  const Scenario s = load_text(kBase);
  const testing::RecordedRun run = testing::simulate_recorded(s, sink);
  const SimResult& r = run.result;
  ASSERT_EQ(run.requests.size(), static_cast<std::size_t>(s.steps * s.workload.sequences_per_step()));
  for (const auto& q : run.requests) {
    EXPECT_EQ(q.generated, q.response_tokens);
    EXPECT_GE(q.finish_ns, r.steps[static_cast<std::size_t>(q.step)].start);
  }
  for (const auto& l : r.ledgers) {
    EXPECT_EQ(l.live_allocations(), 0u) << l.group();
    double sum = 0;
    for (const auto& e : l.events()) sum += e.delta_bytes;
    EXPECT_NEAR(sum, 0.0, 1.0) << l.group();
    EXPECT_LE(l.peak(), l.capacity());
  }
}

TEST(Pipeline, SameSeedSameResultDifferentSeedDifferent) {
  NullSink a, b, c;
  const SimResult r1 = simulate(load_text(kBase), a);
  const SimResult r2 = simulate(load_text(kBase), b);
  const SimResult r3 = simulate(load_text(kBase, {"seed=4"}), c);
  ASSERT_EQ(r1.steps.size(), r2.steps.size());
  for (std::size_t i = 0; i < r1.steps.size(); ++i) EXPECT_EQ(r1.steps[i].end, r2.steps[i].end);
  EXPECT_NE(r1.steps.back().end, r3.steps.back().end);
}

TEST(Pipeline, LowerPrecisionRolloutIsFasterAndSmaller) {
  NullSink sink;
  const SimResult bf16 = simulate(load_text(kBase), sink);
  const SimResult fp8 = simulate(load_text(kBase, {"rollout.precision=fp8-block"}), sink);
  const SimResult int4 = simulate(load_text(kBase, {"rollout.precision=int4-w4a16-g32"}), sink);
  EXPECT_LT(fp8.rollout_cost.weight_bytes_per_device, 0.6 * bf16.rollout_cost.weight_bytes_per_device);
  EXPECT_LT(int4.rollout_cost.weight_bytes_per_device, fp8.rollout_cost.weight_bytes_per_device);
  EXPECT_GT(fp8.kv_capacity_tokens, bf16.kv_capacity_tokens);
  EXPECT_LT(fp8.steps[0].phase_s[Phase::kRollout], bf16.steps[0].phase_s[Phase::kRollout]);
  EXPECT_EQ(fp8.rollout_cost.compute_type, models::ComputeType::kFp8);
  EXPECT_EQ(int4.rollout_cost.compute_type, models::ComputeType::kBf16);  // W4A16 on Hopper
  // The same sampled workload: training time does not depend on the rollout format.
  EXPECT_DOUBLE_EQ(fp8.steps[0].phase_s[Phase::kActorUpdate], bf16.steps[0].phase_s[Phase::kActorUpdate]);
}

TEST(Pipeline, ModelTooLargeIsAnOomResult) {
  NullSink sink;
  const SimResult r = simulate(load_text(kBase, {"model=kimi-k2"}), sink);
  EXPECT_FALSE(r.fits());
  ASSERT_TRUE(r.oom);
  EXPECT_EQ(r.oom->role, Role::kRollout);
  EXPECT_GT(r.oom->breakdown.at("rollout_weights"), 1e12);  // ~2 TB of BF16 weights on one device
  EXPECT_TRUE(r.steps.empty());
}

TEST(Pipeline, ColocatedReservationOomIncludesTrainingState) {
  NullSink sink;
  // The engine reserves 95 % of the device while the FSDP actor keeps its shards resident.
  const SimResult r = simulate(load_text(kBase, {"rollout.memory_utilization=0.95"}), sink);
  ASSERT_FALSE(r.fits());
  EXPECT_EQ(r.oom->role, Role::kRollout);
  EXPECT_GT(r.oom->breakdown.at("optimizer"), 0);
  EXPECT_GT(r.oom->required_bytes, r.oom->capacity_bytes);
  // The reason names what to change: the keys that move the resident state to the host, and the
  // engine's share; a key already set is not offered again.
  EXPECT_NE(r.oom->reason.find("optimizer states"), std::string::npos) << r.oom->reason;
  EXPECT_NE(r.oom->reason.find("setting training.optimizer.offload and training.param_offload moves them to the host, or a "
                               "lower rollout.memory_utilization (now 0.95)"),
            std::string::npos)
      << r.oom->reason;
  const SimResult p = simulate(load_text(kBase, {"rollout.memory_utilization=0.95", "training.param_offload=true"}), sink);
  ASSERT_FALSE(p.fits());
  EXPECT_EQ(p.oom->reason.find("training.param_offload"), std::string::npos) << p.oom->reason;
  EXPECT_NE(p.oom->reason.find("setting training.optimizer.offload moves them"), std::string::npos) << p.oom->reason;
  // A trainer out of memory on devices of its own gets no such advice: no engine runs beside it.
  const SimResult d = simulate(load_text(kBase, {"model=qwen3-32b", "rollout.tensor_parallel=4", "placement.mode=disaggregated",
                                                 "placement.rollout_devices=4", "placement.train_devices=4"}),
                               sink);
  ASSERT_FALSE(d.fits());
  EXPECT_EQ(d.oom->role, Role::kTraining);
  EXPECT_EQ(d.oom->reason.find("stay on the device"), std::string::npos) << d.oom->reason;
}

TEST(Pipeline, OneStepOffOverlapsRolloutAndTraining) {
  NullSink sink;
  const std::string dis = std::string(kBase) + "placement: {mode: disaggregated, rollout_devices: 4, train_devices: 4}\n";
  const SimResult sync = simulate(load_text(dis, {"steps=4"}), sink);
  const testing::RecordedRun off_run =
      testing::simulate_recorded(load_text(dis + "schedule: {mode: one-step-off}\n", {"steps=4"}), sink);
  const SimResult& off = off_run.result;
  ASSERT_TRUE(sync.fits());
  ASSERT_TRUE(off.fits());
  const double sync_total = to_seconds(sync.steps.back().end);
  const double off_total = to_seconds(off.steps.back().end);
  EXPECT_LT(off_total, sync_total);
  // Overlap cannot beat the busier side: total >= sum of rollouts and >= sum of training phases.
  double rollouts = 0, train = 0;
  for (const auto& st : off.steps) {
    rollouts += st.phase_s[Phase::kRollout];
    train += st.phase_s[Phase::kActorUpdate];
  }
  EXPECT_GE(off_total, rollouts - 1e-6);
  EXPECT_GE(off_total, train);
  for (const auto& q : off_run.requests) EXPECT_EQ(q.generated, q.response_tokens);
}

TEST(Pipeline, DisaggregatedUsesNcclBroadcast) {
  NullSink sink;
  const std::string dis = std::string(kBase) + "placement: {mode: disaggregated, rollout_devices: 4, train_devices: 4}\n";
  const SimResult r = simulate(load_text(dis), sink);
  const SimResult co = simulate(load_text(kBase), sink);
  EXPECT_GT(r.sync.transfer, co.sync.transfer);  // 16 GB over 50 GB/s links vs IPC hand-over
  EXPECT_EQ(r.ledgers.size(), 2u);
  EXPECT_EQ(co.ledgers.size(), 1u);
}

// Weight sync streams buckets (verl FSDP and Megatron, slime): two buckets in flight, never the
// whole BF16 model, unless the model is smaller than that.
TEST(Pipeline, SyncGatherBufferIsTwoBuckets) {
  NullSink sink;
  auto gather_peak = [](const SimResult& r) {
    double peak = 0;
    for (const auto& e : r.ledgers.back().events()) {
      if (e.tag == MemoryTag::kSyncGatherBuffer && e.delta_bytes > 0) peak = std::max(peak, e.delta_bytes);
    }
    return peak;
  };
  const SimResult fsdp = simulate(load_text(kBase), sink);
  const SimResult megatron = simulate(load_text(kBase, {"training.backend=megatron", "weight_sync.bucket=1 GB"}), sink);
  const double full = static_cast<double>(catalog_model("qwen3-8b").params().total()) * 2.0;
  EXPECT_DOUBLE_EQ(gather_peak(fsdp), 2.0 * 512 * 1024 * 1024);  // default bucket 512 MiB
  EXPECT_DOUBLE_EQ(gather_peak(megatron), 2e9);
  const SimResult huge_bucket = simulate(load_text(kBase, {"weight_sync.bucket=64 GB"}), sink);
  EXPECT_DOUBLE_EQ(gather_peak(huge_bucket), full);
}

// --- schedules, placement, offload, MoE, multi-node (issue 3) ---------------------------------

const char* kDisagg = R"(name: async test
seed: 5
steps: 6
model: qwen3-8b
cluster: {device: h100-sxm, nodes: 1, devices_per_node: 8}
placement: {mode: disaggregated, rollout_devices: 4, train_devices: 4}
workload:
  prompts_per_step: 16
  samples_per_prompt: 8
  prompt_tokens: {dist: uniform, min: 100, max: 400}
  response_tokens: {dist: lognormal, median: 1000, sigma: 1.0, max: 8192}
rollout: {memory_utilization: 0.8, max_num_seqs: 64}
)";

// Conservation: every consumed sequence is generated exactly once (tokens decoded by the engines
// = tokens of consumed sequences + tokens of those left in flight), no sequence is consumed twice,
// every allocation is freed, and no device is busy longer than the wall clock. Requests come out
// in (step, index) order.
void expect_conserved(const Scenario& s, const testing::RecordedRun& run) {
  const SimResult& r = run.result;
  ASSERT_TRUE(r.fits());
  ASSERT_EQ(run.requests.size(), static_cast<std::size_t>(s.steps * s.workload.sequences_per_step()));
  EXPECT_EQ(r.requests_consumed, static_cast<std::int64_t>(run.requests.size()));
  for (std::size_t i = 1; i < run.requests.size(); ++i) {
    const auto& a = run.requests[i - 1];
    const auto& b = run.requests[i];
    ASSERT_TRUE(a.step < b.step || (a.step == b.step && a.index < b.index)) << "request " << i;
  }
  std::int64_t consumed_tokens = 0;
  std::set<std::pair<std::int64_t, int>> seen;  // (group, sample)
  for (const auto& q : run.requests) {
    EXPECT_EQ(q.generated, q.response_tokens);
    consumed_tokens += q.generated;
    EXPECT_TRUE(seen.insert({q.group, q.index % s.workload.samples_per_prompt}).second) << "group " << q.group;
    EXPECT_LE(q.finish_ns, r.steps[static_cast<std::size_t>(q.step)].end);
    EXPECT_GE(q.step, q.version);
  }
  EXPECT_EQ(r.tokens_generated, consumed_tokens + r.left_in_flight_tokens);
  for (const auto& l : r.ledgers) EXPECT_EQ(l.live_allocations(), 0u) << l.group();
  ASSERT_EQ(r.engine_busy_s.size(), static_cast<std::size_t>(r.engines));
  const bool shared = s.placement.mode == PlacementMode::kColocated;
  for (double b : r.engine_busy_s) {
    EXPECT_GT(b, 0);
    EXPECT_LE(b + (shared ? r.trainer_busy_s : 0.0), r.wall_s * (1 + 1e-9));
  }
  EXPECT_LE(r.trainer_busy_s, r.wall_s * (1 + 1e-9));
  // The busy time behind verl's idle ratios, against an independent record of the same time: the
  // trainer is busy exactly during the phases it runs (training, offload, weight sync)...
  double trainer_spans = 0, rollout_spans = 0;
  for (const auto& p : r.phases) (p.role == Role::kRollout ? rollout_spans : trainer_spans) += p.seconds();
  EXPECT_NEAR(r.trainer_busy_s, trainer_spans, 1e-6 * r.wall_s);
  EXPECT_GT(r.trainer_idle_ratio(), 0);
  EXPECT_LT(r.trainer_idle_ratio(), 1);
  // ... and, unless async (whose rollout phase is the trainer's wait for samples while the engines
  // run on), an engine is busy only within the rollout phases.
  if (s.schedule.mode != ScheduleMode::kAsync) {
    for (double e : r.engine_busy_s) EXPECT_LE(e, rollout_spans * (1 + 1e-9));
  }
}

// One engine on a synchronous schedule decodes from each rollout's start to its end (it is the
// slowest engine of every step): its busy time is the rollout phases', and verl's rollout idle
// ratio is the share of the wall clock outside them.
TEST(Schedules, OneSyncEngineIsBusyExactlyDuringRollout) {
  NullSink sink;
  const Scenario s = load_text(kDisagg, {"rollout.tensor_parallel=4"});
  const SimResult r = simulate(s, sink);
  ASSERT_EQ(r.engines, 1);
  double rollout_spans = 0;
  for (const auto& p : r.phases) rollout_spans += p.role == Role::kRollout ? p.seconds() : 0.0;
  EXPECT_NEAR(r.engine_busy_s[0], rollout_spans, 1e-6 * r.wall_s);
  EXPECT_NEAR(r.rollout_idle_ratio(), 1.0 - rollout_spans / r.wall_s, 1e-6);
}

TEST(Schedules, SyncAndOneStepOffConserve) {
  for (const char* mode : {"sync", "one-step-off"}) {
    NullSink sink;
    const Scenario s = load_text(kDisagg, {std::string("schedule.mode=") + mode});
    const testing::RecordedRun run = testing::simulate_recorded(s, sink);
    SCOPED_TRACE(mode);
    expect_conserved(s, run);
    EXPECT_EQ(run.result.left_in_flight, 0);
  }
  NullSink sink;
  const Scenario s = load_text(kBase);  // colocated
  expect_conserved(s, testing::simulate_recorded(s, sink));
}

TEST(Schedules, AsyncConservesWithAndWithoutPartialRollout) {
  for (const char* partial : {"false", "true"}) {
    NullSink sink;
    const Scenario s =
        load_text(kDisagg, {"schedule.mode=async", "schedule.staleness=0.5", std::string("schedule.partial_rollout=") + partial});
    const testing::RecordedRun run = testing::simulate_recorded(s, sink);
    const SimResult& r = run.result;
    SCOPED_TRACE(partial);
    expect_conserved(s, run);
    std::int64_t interrupted = 0;
    for (const auto& st : r.steps) {
      interrupted += st.interruptions;
      // At most (1 + staleness) x B groups per window: a batch's samples are at most one version
      // behind here (the window is 1.5 batches).
      EXPECT_LE(st.staleness_max, 1);
    }
    if (std::string(partial) == "true") {
      EXPECT_GT(interrupted, 0) << "partial rollout pauses sequences across weight updates";
      EXPECT_GT(r.tokens_recomputed, 0) << "paused sequences lose their KV cache";
    } else {
      EXPECT_EQ(interrupted, 0);
    }
  }
}

TEST(Schedules, AsyncStalenessZeroIsOnPolicyAndStalenessBuysThroughput) {
  NullSink a, b;
  const Scenario s0 = load_text(kDisagg, {"schedule.mode=async", "schedule.staleness=0"});
  const Scenario s1 = load_text(kDisagg, {"schedule.mode=async", "schedule.staleness=1"});
  const testing::RecordedRun run0 = testing::simulate_recorded(s0, a);
  const testing::RecordedRun run1 = testing::simulate_recorded(s1, b);
  const SimResult& r0 = run0.result;
  const SimResult& r1 = run1.result;
  expect_conserved(s0, run0);
  expect_conserved(s1, run1);
  for (const auto& st : r0.steps) {
    EXPECT_EQ(st.staleness_max, 0);
    EXPECT_EQ(st.stale_sequences, 0);
  }
  std::int64_t stale = 0;
  for (const auto& st : r1.steps) stale += st.stale_sequences;
  EXPECT_GT(stale, 0);
  // Overlap: the staleness window lets rollout run during training.
  EXPECT_LT(r1.wall_s, r0.wall_s);
  EXPECT_LT(r1.trainer_idle_ratio(), r0.trainer_idle_ratio());
}

TEST(Placement, ColocatedSleepLevelOneCopiesWeightsOverTheHostLink) {
  NullSink a, b;
  const Scenario l1 = load_text(kBase, {"rollout.sleep_level=1"});
  const Scenario l2 = load_text(kBase, {"rollout.sleep_level=2"});
  const SimResult r1 = simulate(l1, a);
  const SimResult r2 = simulate(l2, b);
  const double w = r1.rollout_cost.weight_bytes_per_device;
  // Level 1: weights go to host memory after the rollout and come back before the sync.
  const double expect = 2 * copy_s(w, l1.cluster.host_link);
  EXPECT_NEAR(r1.steps[0].phase_s[Phase::kOffload], expect, 1e-6);
  EXPECT_EQ(r2.steps[0].phase_s[Phase::kOffload], 0.0);
  // Either way the KV cache is gone while the trainer runs: the memory ledger shows it.
  const auto& ev = r1.ledgers.front().events();
  bool kv_freed_before_training = false;
  for (std::size_t i = 0; i < ev.size(); ++i) {
    if (ev[i].tag == MemoryTag::kKvCache && ev[i].delta_bytes < 0) {
      for (std::size_t j = i; j < ev.size(); ++j) {
        if (ev[j].tag == MemoryTag::kGrads && ev[j].delta_bytes > 0) kv_freed_before_training = true;
      }
      break;
    }
  }
  EXPECT_TRUE(kv_freed_before_training);
}

TEST(Placement, OptimizerAndParamOffloadCostTimeAndMemory) {
  NullSink a, b;
  const Scenario base = load_text(kBase);
  const Scenario off = load_text(kBase, {"training.optimizer.offload=true", "training.param_offload=true"});
  const SimResult rb = simulate(base, a);
  const SimResult ro = simulate(off, b);
  // Offloaded training state is absent during the rollout: the rollout-phase peak drops by it.
  EXPECT_NEAR(rb.peak_rollout_bytes - ro.peak_rollout_bytes,
              rb.train_memory.optimizer + rb.train_memory.params + rb.train_memory.reference, 1.0);
  const TrainerCostModel tc(off);
  const double per_step =
      2 * tc.optimizer_offload_s() + 2 * copy_s(ro.train_memory.params + ro.train_memory.reference, off.cluster.host_link);
  EXPECT_NEAR(ro.steps[1].phase_s[Phase::kOffload] - rb.steps[1].phase_s[Phase::kOffload], per_step, 1e-6);
}

TEST(MoE, ExpertParallelReplacesFfnAllReduceByAllToAll) {
  const Scenario tp = load_text(kBase, {"model=qwen3-30b-a3b", "rollout.tensor_parallel=4"});
  const Scenario ep = load_text(kBase, {"model=qwen3-30b-a3b", "rollout.tensor_parallel=4", "rollout.expert_parallel=4"});
  const auto ct = RolloutCostModel::build(tp);
  const auto ce = RolloutCostModel::build(ep);
  const double tokens = 64;
  const auto& link = tp.cluster.intra_node;
  const double ar = all_reduce_s(tokens * tp.model.hidden * 2.0, 4, link, tp.rollout.efficiency.comm);
  EXPECT_NEAR(ct.comm_s(tokens), 2 * tp.model.layers * ar, 1e-12);
  const double k = tp.model.moe->active;
  const double a2a = all_to_all_s(tokens / 4 * k * tp.model.hidden * 2.0, 4, link, tp.rollout.efficiency.comm);
  // bf16 recipe: dispatch and combine both in BF16
  EXPECT_NEAR(ce.comm_s(tokens), tp.model.layers * ar + tp.model.moe_layers() * 2 * a2a, 1e-12);
  // Decode touches E (1 - (1 - k/E)^b) experts.
  const double E = tp.model.moe->experts;
  EXPECT_NEAR(ct.weights_read_bytes(tokens) - ct.dense_bytes_per_device,
              E * (1 - std::pow(1 - k / E, tokens)) * ct.expert_bytes_per_device, 1e-3);
}

TEST(MoE, RouterPrecisionComesFromTheRecipe) {
  const auto arch = catalog_model("qwen3-30b-a3b");
  models::Recipe a = models::builtin_recipe("fp8-block");
  models::Recipe b = a;
  a.router.weight = models::Format{models::Element::kBf16, {}};
  b.router.weight = models::Format{models::Element::kFp32, {}};
  const unsigned router = 1u << static_cast<unsigned>(models::LinearKind::kRouter);
  EXPECT_NEAR(models::weight_bytes(arch, b, router, false) - models::weight_bytes(arch, a, router, false),
              2.0 * static_cast<double>(arch.params().router), 1.0);
  EXPECT_NEAR(models::weight_bytes(arch, b) - models::weight_bytes(arch, a), 2.0 * static_cast<double>(arch.params().router),
              1.0);
}

TEST(MoE, MegatronExpertParallelSplitsExpertsAndPaysAllToAll) {
  const char* text = R"(name: ep
model: qwen3-30b-a3b
cluster: {device: h100-sxm, nodes: 2, devices_per_node: 8}
workload:
  prompts_per_step: 16
  samples_per_prompt: 8
  prompt_tokens: {dist: fixed, value: 256}
  response_tokens: {dist: fixed, value: 1024}
training: {backend: megatron, tensor_parallel: 2, pipeline_parallel: 1, expert_parallel: 1}
)";
  const Scenario s1 = load_text(text);
  const Scenario s8 = load_text(text, {"training.expert_parallel=8"});
  const TrainerCostModel t1(s1), t8(s8);
  TrainBatch b;
  b.tokens = 16 * 8 * 1280;
  b.max_sequence = 1280;
  const auto m1 = t1.memory(b), m8 = t8.memory(b);
  EXPECT_LT(m8.params, m1.params);  // experts over EP=8 instead of TP=2
  EXPECT_GT(t8.phase_times(b).comm_s, t1.phase_times(b).comm_s);
}

// Megatron layouts beyond TP x PP x DP (issue 26, part 2): context parallel, interleaved
// pipeline stages, sequence parallel and expert tensor parallel, each against its closed form.
TEST(MegatronLayouts, ContextParallelVirtualStagesSequenceParallelAndExpertTp) {
  const char* text = R"(name: layouts
model: qwen3-30b-a3b
cluster: {device: h100-sxm, nodes: 4, devices_per_node: 8}
workload:
  prompts_per_step: 16
  samples_per_prompt: 8
  prompt_tokens: {dist: fixed, value: 1024}
  response_tokens: {dist: fixed, value: 15360}
training: {backend: megatron, tensor_parallel: 2, pipeline_parallel: 4, expert_parallel: 4, micro_batch_tokens: 16384}
)";
  TrainBatch b;
  b.sequences = 128;
  b.tokens = 128 * 16384.0;
  b.max_sequence = 16384;
  b.attention_flops = 128 * 4.0 * 4096 * 16384.0 * 16384.0 / 2;  // order of magnitude of 48 layers' causal attention
  const Scenario base = load_text(text);
  const Scenario cp2 = load_text(text, {"training.context_parallel=2"});
  const TrainerCostModel t1(base), t2(cp2);
  // CP 2: each device holds half of every micro-batch's tokens; parameters and their shards are
  // those of TP x PP (the optimizer shards over DP x CP, the same 4 ranks as DP 4 before).
  const auto m1 = t1.memory(b), m2 = t2.memory(b);
  EXPECT_NEAR(m2.activations, m1.activations / 2, 1e-9 * m1.activations);
  EXPECT_DOUBLE_EQ(m2.params, m1.params);
  EXPECT_DOUBLE_EQ(m2.optimizer, m1.optimizer);
  // Long sequences: attention hides the ring traffic (nothing exposed); the CP model's update is
  // its compute and collectives, more micro-batches per DP group than without CP.
  EXPECT_DOUBLE_EQ(t2.ring_attention_exposed_s(b, 4.0, 16384 / 2.0, 8), 0.0);
  TrainBatch short_b = b;
  short_b.attention_flops = 0;  // no attention to hide behind: the whole ring is exposed
  const double chunk = 8192.0 * 2 * base.model.kv_heads * base.model.head_dim * 2 / 2;  // tokens x K,V x BF16 / TP
  const models::Link link = base.cluster.intra_node;
  const double per_layer = 4.0 * (chunk / (link.bandwidth_bytes_per_s * base.training.efficiency.comm) + link.latency_s);
  EXPECT_NEAR(t2.ring_attention_exposed_s(short_b, 4.0, 8192, 8), per_layer * base.model.layers / 4 * 8, 1e-12);
  // Interleaved stages: the bubble (PP - 1) / (V m + PP - 1) shrinks with V, so the update is faster.
  const Scenario v2 = load_text(text, {"training.virtual_pipeline=2"});
  EXPECT_LT(TrainerCostModel(v2).phase_times(b).actor_update, t1.phase_times(b).actor_update);
  // Sequence parallel off: 5 h of the 9 h + 3 ffn elements per token stay whole on each TP rank.
  const Scenario nosp = load_text(text, {"training.sequence_parallel=false", "training.activation_checkpointing=false"});
  const Scenario sp = load_text(text, {"training.activation_checkpointing=false"});
  const double h = base.model.hidden, ffn = base.model.moe->expert_intermediate * base.model.moe->active;
  EXPECT_NEAR(TrainerCostModel(nosp).memory(b).activations / TrainerCostModel(sp).memory(b).activations,
              (5 * h + (4 * h + 3 * ffn) / 2) / ((9 * h + 3 * ffn) / 2), 1e-12);
  // Expert tensor parallel 2: the experts split over EP x ETP, and their tokens are gathered.
  const Scenario etp = load_text(text, {"training.expert_tensor_parallel=2"});
  EXPECT_LT(TrainerCostModel(etp).memory(b).params, m1.params);
  EXPECT_GT(TrainerCostModel(etp).phase_times(b).comm_s, t1.phase_times(b).comm_s);
}

TEST(MegatronLayouts, RulesNameWhatTheyBreak) {
  const std::string text = R"(name: rules
model: qwen3-30b-a3b
cluster: {device: h100-sxm, nodes: 1, devices_per_node: 8}
workload:
  prompts_per_step: 4
  samples_per_prompt: 2
  prompt_tokens: {dist: fixed, value: 100}
  response_tokens: {dist: fixed, value: 200}
)";
  auto error = [&](const std::string& training) { return load_error(text + "training: " + training + "\n"); };
  EXPECT_NE(error("{backend: megatron, tensor_parallel: 2, context_parallel: 3}")
                .find("x 3 x 1 must divide the 8 training devices (world = TP x CP x PP x DP)"),
            std::string::npos);
  EXPECT_NE(error("{backend: fsdp, context_parallel: 2}").find("needs backend: megatron"), std::string::npos);
  EXPECT_NE(error("{backend: megatron, expert_parallel: 4, expert_tensor_parallel: 4}")
                .find("expert_parallel x expert_tensor_parallel = 4 x 4 must divide tensor_parallel x context_parallel x "
                      "data-parallel size = 8"),
            std::string::npos);
  EXPECT_NE(error("{backend: megatron, pipeline_parallel: 2, virtual_pipeline: 5}").find("must divide the model's 48 layers"),
            std::string::npos);
  EXPECT_NE(error("{backend: megatron, virtual_pipeline: 2}").find("pipeline_parallel >= 2"), std::string::npos);
  EXPECT_EQ(error("{backend: megatron, tensor_parallel: 2, context_parallel: 2, pipeline_parallel: 2, expert_parallel: 4}"),
            "no error");
}

TEST(MultiNode, EngineAcrossNodesPaysInterNodeAllReduce) {
  const Scenario one = load_text(kBase, {"cluster.nodes=2", "rollout.tensor_parallel=8"});
  const Scenario two = load_text(kBase, {"cluster.nodes=2", "rollout.tensor_parallel=16"});
  const auto c1 = RolloutCostModel::build(one);
  const auto c2 = RolloutCostModel::build(two);
  EXPECT_DOUBLE_EQ(c1.tp_link.bandwidth_bytes_per_s, one.cluster.intra_node.bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(c2.tp_link.bandwidth_bytes_per_s, two.cluster.inter_node.bandwidth_bytes_per_s);
  EXPECT_NEAR(c2.comm_s(32),
              2 * two.model.layers *
                  hierarchical_all_reduce_s(32 * two.model.hidden * 2.0, 16, 8, two.cluster.intra_node, two.cluster.inter_node,
                                            two.rollout.efficiency.comm),
              1e-12);
  EXPECT_GT(c2.comm_s(32), c1.comm_s(32));
}

// Longest-first assignment to the least-loaded rank; the slowest rank sets the pace.
TEST(DataParallel, ImbalanceOfLongestFirstAssignment) {
  EXPECT_DOUBLE_EQ(dp_imbalance({4, 1, 1, 1, 1}, 2), 1.0);  // 4 | 1+1+1+1
  EXPECT_DOUBLE_EQ(dp_imbalance({1, 5, 1, 1}, 2), 1.25);    // 5 | 3: 5 x 2 / 8
  // Longest first, each to the lighter rank: 5 | 3, 5 | 3+3, 5+3 | 6 -> 8 x 2 / 14.
  EXPECT_DOUBLE_EQ(dp_imbalance({3, 5, 3, 3}, 2), 8.0 * 2 / 14);
  EXPECT_DOUBLE_EQ(dp_imbalance({7, 3, 2}, 1), 1.0);
  EXPECT_DOUBLE_EQ(dp_imbalance({}, 8), 1.0);
  // More ranks than sequences: the longest sequence is a rank's whole load.
  EXPECT_DOUBLE_EQ(dp_imbalance({6, 2}, 4), 6.0 * 4 / 8);
}

// The slowest rank sets a pass's compute time, forward-only or update; forward-only passes also
// run at the forward-pass efficiency.
TEST(DataParallel, ImbalanceAndForwardEfficiencyScaleCompute) {
  const Scenario s = load_text(kBase);
  const TrainerCostModel t(s);
  TrainBatch b;
  b.tokens = 1e6;
  b.attention_flops = 1e15;
  TrainBatch skewed = b;
  skewed.imbalance = 1.5;
  EXPECT_NEAR(t.compute_s(skewed, 1.0), 1.5 * t.compute_s(b, 1.0), 1e-12);
  EXPECT_NEAR(t.compute_s(skewed, 3.0), 1.5 * t.compute_s(b, 3.0), 1e-12);
  // Same FLOPs: a forward-only pass costs 1 / efficiency.forward of a third of the update.
  EXPECT_NEAR(t.compute_s(b, 1.0), t.compute_s(b, 3.0) / 3.0 / s.training.efficiency.forward, 1e-12);
}

// efficiency.attention_compute prices attention's FLOPs at that fraction of the GEMMs' rate, in
// the trainer and in the rollout engine, and leaves the matmul part alone.
TEST(Efficiency, AttentionComputeScalesOnlyAttention) {
  const Scenario base = load_text(kBase);
  const Scenario slow =
      load_text(kBase, {"training.efficiency.attention_compute=0.25", "rollout.efficiency.attention_compute=0.5"});
  TrainBatch matmul_only, with_attention;
  matmul_only.tokens = with_attention.tokens = 1e6;
  with_attention.attention_flops = 1e15;
  const TrainerCostModel tb(base), ts(slow);
  EXPECT_DOUBLE_EQ(ts.compute_s(matmul_only, 3.0), tb.compute_s(matmul_only, 3.0));
  const double attn_base = tb.compute_s(with_attention, 3.0) - tb.compute_s(matmul_only, 3.0);
  const double attn_slow = ts.compute_s(with_attention, 3.0) - ts.compute_s(matmul_only, 3.0);
  EXPECT_NEAR(attn_slow, 4.0 * attn_base, 1e-9 * attn_slow);
  const auto rb = RolloutCostModel::build(base), rs = RolloutCostModel::build(slow);
  EXPECT_DOUBLE_EQ(rs.decode_compute_s(8, 0), rb.decode_compute_s(8, 0));
  const double ctx = 1e5;
  EXPECT_NEAR(rs.decode_compute_s(8, ctx) - rs.decode_compute_s(8, 0),
              2.0 * (rb.decode_compute_s(8, ctx) - rb.decode_compute_s(8, 0)), 1e-9 * rs.decode_compute_s(8, ctx));
}

// verl's dynamic batching (use_dynamic_bsz) packs each mini-batch's tokens on a device up to
// the budget; fixed batching cuts its sequences into ppo_micro_batch_size_per_gpu; forward-only
// passes use the log-prob micro-batch size over the whole batch.
TEST(DataParallel, MicroBatchesPerDeviceFollowVerlsBatching) {
  TrainBatch b;
  b.tokens = 1.0e6;
  b.sequences = 512;
  b.max_sequence = 8000;
  // 8 devices, FSDP: DP 8. Dynamic: 4 mini-batches of 250K tokens, 31,250 per device over 16,384.
  const Scenario dyn = load_text(
      kBase, {"training.mini_batches=4", "training.micro_batch_tokens=16384", "training.logprob_micro_batch_tokens=65536"});
  const TrainerCostModel td(dyn);
  EXPECT_DOUBLE_EQ(td.micro_batches_per_device(b, true), 4 * 2.0);
  EXPECT_DOUBLE_EQ(td.micro_batches_per_device(b, false), 2.0);  // 125,000 per device over 65,536
  EXPECT_DOUBLE_EQ(td.micro_batch_tokens(b, true), 16384);
  // Fixed: 512 sequences / 4 mini-batches / 8 devices = 16 per device, 3 per micro-batch -> 6.
  const Scenario fixed = load_text(kBase, {"training.mini_batches=4", "training.dynamic_batching=false",
                                           "training.micro_batch_sequences=3", "training.logprob_micro_batch_sequences=32"});
  const TrainerCostModel tf(fixed);
  EXPECT_DOUBLE_EQ(tf.micro_batches_per_device(b, true), 4 * 6.0);
  EXPECT_DOUBLE_EQ(tf.micro_batches_per_device(b, false), 2.0);  // 64 per device over 32
  EXPECT_DOUBLE_EQ(tf.micro_batch_tokens(b, true), 3 * 8000.0);
  // The larger log-prob micro-batch sizes the logits when its logits alone outgrow the update's
  // logits and gradient.
  const auto m = tf.memory(b);
  EXPECT_NEAR(m.logits, std::max(2.0 * 3 * 8000, 32.0 * 8000) * fixed.model.vocab * 4.0, 1.0);
  // More micro-batches, more FSDP parameter gathers: with short sequences (gathers outlast the
  // compute they overlap) the update costs more at the same FLOPs.
  TrainBatch short_seqs = b;
  short_seqs.tokens = 1e5;
  const Scenario fine =
      load_text(kBase, {"training.mini_batches=4", "training.dynamic_batching=false", "training.micro_batch_sequences=1"});
  EXPECT_GT(TrainerCostModel(fine).phase_times(short_seqs).actor_update, 1.5 * tf.phase_times(short_seqs).actor_update);
}

// training.padding: the linears of a pass run on its micro-batches' padded rows, attention on the
// sequences' own tokens. Padding equal to the sequences' tokens doubles a pass's linear work and
// the padded row sizes a fixed micro-batch; in a simulation, equal lengths need no padding,
// max_length pads every row to the longest prompt plus the longest response, micro_batch lies
// between; the loader refuses padding with dynamic batching and max_length on an unbounded length.
TEST(Training, PaddingCostsTheLinearsOfThePaddedRows) {
  const Scenario fixed = load_text(kBase, {"training.dynamic_batching=false", "model=qwen3-8b"});
  const TrainerCostModel tc(fixed);
  TrainBatch b;
  b.tokens = 1.0e6;
  b.sequences = 512;
  b.max_sequence = 4000;
  TrainBatch p = b;
  p.update_padding = 1.0e6;
  p.padded_row = 6000;
  EXPECT_DOUBLE_EQ(tc.compute_s(p, 4.0), 2.0 * tc.compute_s(b, 4.0));
  EXPECT_DOUBLE_EQ(tc.compute_s(p, 1.0), tc.compute_s(b, 1.0));  // no forward padding
  EXPECT_DOUBLE_EQ(tc.micro_batch_tokens(p, true), 8 * 6000.0);
  EXPECT_DOUBLE_EQ(tc.micro_batch_tokens(b, true), 8 * 4000.0);

  NullSink sink;
  auto update_s = [&](const std::vector<std::string>& o) {
    const SimResult r = simulate(load_text(kBase, o), sink);
    return r.steps.front().phase_s[Phase::kActorUpdate];
  };
  const std::vector<std::string> same = {"training.dynamic_batching=false", "workload.prompt_tokens={dist: fixed, value: 300}",
                                         "workload.response_tokens={dist: fixed, value: 900}"};
  auto with = [](std::vector<std::string> o, const std::string& x) {
    o.push_back(x);
    return o;
  };
  const double none = update_s(same);
  EXPECT_DOUBLE_EQ(update_s(with(same, "training.padding=micro_batch")), none);
  EXPECT_DOUBLE_EQ(update_s(with(same, "training.padding=max_length")), none);
  const std::vector<std::string> spread = {"training.dynamic_batching=false"};  // uniform prompts, lognormal responses
  const double packed = update_s(spread), micro = update_s(with(spread, "training.padding=micro_batch")),
               full = update_s(with(spread, "training.padding=max_length"));
  EXPECT_GT(micro, 1.2 * packed);
  EXPECT_GT(full, 1.5 * micro);

  EXPECT_NE(load_error(kBase, {"training.padding=micro_batch"}).find("dynamic_batching: false"), std::string::npos);
  EXPECT_NE(load_error(kBase, {"training.dynamic_batching=false", "training.padding=micro-batch"}).find("micro_batch"),
            std::string::npos);
  EXPECT_NE(load_error(kBase, {"training.dynamic_batching=false", "training.padding=max_length",
                               "workload.response_tokens={dist: lognormal, median: 500, sigma: 1}"})
                .find("workload.response_tokens a max"),
            std::string::npos);
}

// Routed-expert GEMMs of the trainer run at the MoE rate, the rest at the dense rate.
TEST(MoE, TrainingExpertGemmsRunAtTheMoeRate) {
  const Scenario s = load_text(kBase, {"model=qwen3-30b-a3b"});
  const TrainerCostModel t(s);
  TrainBatch b;
  b.tokens = 1e6;
  b.attention_flops = 0;
  double routed = 0;
  for (const auto& l : s.model.linear_shapes()) {
    if (l.kind == models::LinearKind::kRoutedExpert) routed += static_cast<double>(l.count) * l.out * l.in;
  }
  const double active_routed = routed * s.model.moe->active / s.model.moe->experts;
  const double dense = static_cast<double>(s.model.active_matmul_params()) - active_routed;
  const double peak = s.cluster.device.rate(models::ComputeType::kBf16);
  const double expect = 3.0 *
                        (2 * dense * b.tokens / (peak * s.training.efficiency.compute) +
                         2 * active_routed * b.tokens / (peak * s.training.efficiency.moe_compute)) /
                        t.devices();
  EXPECT_NEAR(t.compute_s(b, 3.0), expect, expect * 1e-12);
  EXPECT_LT(s.training.efficiency.moe_compute, s.training.efficiency.compute);
}

// Two optimizer offloads: states parked in host memory between updates with the step on the
// device (verl optimizer_offload), or states on the host and Adam on the CPU (MCore
// optimizer_cpu_offload), whose step leaves the actor update for the offload phase.
TEST(Placement, OptimizerOffloadAndCpuAdamAreDistinct) {
  const Scenario dev = load_text(kBase, {"training.optimizer.offload=true"});
  const Scenario cpu = load_text(kBase, {"training.optimizer.cpu_adam=true"});
  NullSink a, c;
  const SimResult rd = simulate(dev, a), rc = simulate(cpu, c);
  const TrainerCostModel td(dev), tc(cpu);
  EXPECT_FALSE(td.cpu_optimizer());
  EXPECT_TRUE(tc.cpu_optimizer());
  // The update of the CPU-Adam run lacks the device step the other one has.
  EXPECT_GT(rd.steps[1].phase_s[Phase::kActorUpdate], rc.steps[1].phase_s[Phase::kActorUpdate]);
  // Its offload phase holds the host step: gradients down, parameters up, Adam at the CPU rate.
  EXPECT_GE(rc.steps[1].phase_s[Phase::kOffload], tc.cpu_optimizer_s() - 1e-9);
  const double shard = tc.memory(TrainBatch{}).grads / 4.0;
  EXPECT_NEAR(tc.cpu_optimizer_s(),
              std::max(shard * 6.0 / cpu.cluster.host_link.bandwidth_bytes_per_s, shard * 8 / kCpuAdamParamsPerSPerNode) +
                  2 * cpu.cluster.host_link.latency_s,
              1e-9);
  EXPECT_THROW(load_text(kBase, {"training.optimizer.offload=true", "training.optimizer.cpu_adam=true"}), ScenarioError);
  // DeepSpeed's CPU Adam runs under ZeRO-Offload: gradients leave the device layer by layer, so it
  // holds one layer's FP32 gradients instead of its shard's; the host step is priced on the same
  // shard either way.
  const Scenario ds = load_text(kBase, {"training.optimizer={cpu_adam: true, cpu_adam_kernel: deepspeed}"});
  const TrainerCostModel tds(ds);
  EXPECT_TRUE(tds.zero_offload());
  EXPECT_FALSE(tc.zero_offload());
  const double params = static_cast<double>(ds.model.params().total());
  EXPECT_NEAR(tds.memory(TrainBatch{}).grads, 4.0 * params / ds.model.layers, 1e-6 * params);
  EXPECT_NEAR(tc.memory(TrainBatch{}).grads, 4.0 * params / tc.devices(), 1e-6 * params);
  EXPECT_DOUBLE_EQ(tds.memory(TrainBatch{}).params, tc.memory(TrainBatch{}).params);
}

// ZeRO-Offload accumulates gradients in host memory: every micro-batch of the update sends the
// device's FP32 gradient partition to the host and brings it back (DeepSpeed stage3.py
// partition_grads). Over a slow host link those copies, queued behind the reduce-scatters from the
// backward's start on, set the update's length; over a fast one they hide behind the backward.
TEST(Placement, ZeroOffloadAccumulatesGradientsOnTheHostEveryMicroBatch) {
  const std::vector<std::string> fixed = {"training.dynamic_batching=false", "training.micro_batch_sequences=2",
                                          "training.mini_batches=2"};
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), fixed.begin(), fixed.end());
    return load_text(kBase, sets);
  };
  const std::string slow = "cluster.host_link={bandwidth: 0.5 GB/s, latency: 10 us}";
  const Scenario ds = with({"training.optimizer={cpu_adam: true, cpu_adam_kernel: deepspeed}", slow});
  const Scenario torch = with({"training.optimizer={cpu_adam: true, cpu_adam_kernel: torch}", slow});
  const TrainerCostModel tds(ds), ttorch(torch);
  TrainBatch b;
  b.sequences = 128;
  b.tokens = 128 * 1500.0;
  b.max_sequence = 1500;
  b.attention_flops = 0;
  // 128 sequences / 2 mini-batches / 8 devices / 2 per micro-batch: 4 a mini-batch, 8 in all.
  const double mb = tds.micro_batches_per_device(b, true);
  ASSERT_EQ(mb, 8.0);
  const double partition = static_cast<double>(ds.model.params().total()) / tds.devices() * 4.0;  // FP32
  EXPECT_NEAR(tds.host_gradient_accumulation_s(mb), mb * 2.0 * (partition / 0.5e9 + 10e-6), 1e-9);
  const double factor = ds.training.activation_checkpointing ? 4.0 : 3.0;
  const double first_forward = tds.compute_s(b, factor) / factor;
  const TrainTimes a = tds.phase_times(b), t = ttorch.phase_times(b);
  // The copies (~100 s) outlast everything else, so the pass is forward + reduce-scatters + copies.
  EXPECT_GT(a.actor_update, first_forward + tds.host_gradient_accumulation_s(mb));
  EXPECT_LT(a.actor_update, first_forward + tds.host_gradient_accumulation_s(mb) + t.actor_update);
  EXPECT_GT(a.actor_update, 2.0 * t.actor_update);
  // Forward-only passes send no gradients.
  EXPECT_DOUBLE_EQ(a.old_logprob, t.old_logprob);
  // Over the catalog's host link (PCIe Gen5) the 16 copies of 4.1 GB hide behind the backward.
  const Scenario ds_fast = with({"training.optimizer={cpu_adam: true, cpu_adam_kernel: deepspeed}"});
  const Scenario torch_fast = with({"training.optimizer={cpu_adam: true, cpu_adam_kernel: torch}"});
  EXPECT_DOUBLE_EQ(TrainerCostModel(ds_fast).phase_times(b).actor_update,
                   TrainerCostModel(torch_fast).phase_times(b).actor_update);
}

// The fixed per-step overhead is a phase of its own at the end of every step.
TEST(Pipeline, StepOverheadIsAPhaseOfEveryStep) {
  const Scenario a = load_text(kBase, {"training.step_overhead=2 s"});
  const Scenario b = load_text(kBase, {"training.step_overhead=12 s"});
  NullSink sa, sb;
  const SimResult ra = simulate(a, sa), rb = simulate(b, sb);
  for (std::size_t i = 0; i < ra.steps.size(); ++i) {
    EXPECT_DOUBLE_EQ(ra.steps[i].phase_s[Phase::kStepOverhead], 2.0);
    EXPECT_NEAR(rb.steps[i].step_s() - ra.steps[i].step_s(), 10.0, 1e-6);
  }
}

// The training recipe's tensor classes size the trainer: BF16 gradients halve the gradient
// memory of FP32 ones, a narrower reference halves the reference weights.
TEST(Footprint, TrainingRecipeSizesGradientsAndReference) {
  const Scenario fp32 = load_text(kBase);
  const Scenario narrow =
      load_text(std::string(kBase) + "training: {precision: {base: bf16, gradient: bf16, reference: fp8-e4m3/tensor}}\n");
  EXPECT_EQ(narrow.training.precision.gradient, models::parse_format("bf16"));
  const TrainMemory a = TrainerCostModel(fp32).memory(TrainBatch{}), b = TrainerCostModel(narrow).memory(TrainBatch{});
  EXPECT_NEAR(b.grads, a.grads / 2, 1.0);
  EXPECT_NEAR(b.reference, a.reference / 2, a.reference * 1e-6);
  EXPECT_EQ(b.params, a.params);
}

TEST(WeightSync, QuantisedEngineReloadCostsRestoreLoadTransform) {
  const Scenario bf = load_text(kBase);
  const Scenario q = load_text(kBase, {"rollout.precision=int4-w4a16-g32"});
  const TrainerCostModel tb(bf), tq(q);
  const double wb = models::weight_bytes(bf.model, bf.rollout.precision), wq = models::weight_bytes(q.model, q.rollout.precision);
  const auto sb = tb.weight_sync(wb, 8, 1), sq = tq.weight_sync(wq, 8, 1);
  EXPECT_EQ(sb.quantize, 0.0);
  EXPECT_EQ(sb.repack, 0.0);
  const double hbm = q.cluster.device.memory_bandwidth_bytes_per_s * q.rollout.efficiency.memory;
  EXPECT_NEAR(sq.repack, 4 * wq / hbm, 1e-9);
  // Quantising reads BF16 and writes the format, plus the host-side cost of each weight matrix.
  double matrices = 0;
  for (const auto& l : q.model.linear_shapes()) matrices += static_cast<double>(l.count);
  EXPECT_NEAR(sq.quantize,
              (static_cast<double>(q.model.params().total()) * 2 + wq) / hbm + matrices * q.weight_sync.quantize_per_matrix_s,
              1e-9);
  EXPECT_NEAR(sq.load, 2 * wq / hbm, 1e-9);
  // Every matrix also passes the sync path's per-matrix step, quantised or not.
  EXPECT_NEAR(sq.gather - tq.weight_sync(wq, 8, 1).gather, 0.0, 1e-12);
  Scenario slow = q;
  slow.weight_sync.per_matrix_s += 1e-3;
  EXPECT_NEAR(TrainerCostModel(slow).weight_sync(wq, 8, 1).gather - sq.gather, matrices * 1e-3, 1e-9);
}

}  // namespace
}  // namespace rlsim::sim
