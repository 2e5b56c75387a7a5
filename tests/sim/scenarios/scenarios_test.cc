// Examples are tests: every scenario in scenarios/ runs, fits and obeys the pipeline's
// invariants; the ones that mirror a published figure are checked against it here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "analysis/report.h"
#include "sim/pipeline/pipeline.h"
#include "tests/sim/recorded_run.h"

namespace rlsim {
namespace {

namespace fs = std::filesystem;

fs::path scenario_dir() { return fs::path(RLSIM_SOURCE_DIR) / "scenarios"; }

sim::SimResult run(const std::string& file, const std::vector<std::string>& overrides = {}) {
  const sim::Scenario s = sim::load_scenario((scenario_dir() / file).string(), overrides);
  sim::NullSink sink;
  return sim::simulate(s, sink);
}

double mean_phase(const sim::SimResult& r, sim::Phase phase) {
  double sum = 0;
  for (const auto& st : r.steps) sum += st.phase_s[phase];
  return sum / static_cast<double>(r.steps.size());
}

class EveryScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryScenario, RunsFitsAndConserves) {
  const sim::Scenario s = sim::load_scenario((scenario_dir() / GetParam()).string());
  sim::NullSink sink;
  const sim::testing::RecordedRun run = sim::testing::simulate_recorded(s, sink);
  const sim::SimResult& r = run.result;
  ASSERT_TRUE(r.fits()) << r.oom->reason;
  ASSERT_EQ(static_cast<int>(r.steps.size()), s.steps);
  for (const auto& q : run.requests) ASSERT_EQ(q.generated, q.response_tokens);
  for (const auto& l : r.ledgers) EXPECT_EQ(l.live_allocations(), 0u);
  const analysis::RunSummary u = analysis::summarize(s, r);
  EXPECT_GT(u.step_time_mean_s, 0);
  EXPECT_GT(u.rollout_share, 0);
  EXPECT_LT(u.rollout_share, 1);
  EXPECT_LE(u.peak_rollout_bytes, s.cluster.device.memory_bytes);
  EXPECT_LE(u.peak_training_bytes, s.cluster.device.memory_bytes);
  // Conservation: tokens decoded = tokens of consumed sequences (+ those left in flight, async),
  // and no device is busy longer than the wall clock.
  std::int64_t consumed = 0;
  for (const auto& q : run.requests) consumed += q.generated;
  EXPECT_EQ(r.tokens_generated, consumed + r.left_in_flight_tokens);
  // Busy time sums the stages' durations in seconds, the clock advances in whole nanoseconds: up
  // to 1 ns of rounding per event (a saturated pipeline, as the host scenario's, meets the bound).
  const bool shared = s.placement.mode == sim::PlacementMode::kColocated;
  const double wall = r.wall_s * (1 + 1e-9) + 1e-9 * static_cast<double>(r.events);
  for (double b : r.engine_busy_s) EXPECT_LE(b + (shared ? r.trainer_busy_s : 0.0), wall);
  EXPECT_LE(r.trainer_busy_s, wall);
}

// Every pipeline scenario: the .yaml files of scenarios/ except the drift and train files
// (drift-*.yaml, train-*.yaml, for `rlsim drift` and `rlsim train`, tested in
// tests/cli/cli_test.sh) and the study files (study-*.yaml, for `rlsim plan`, tested in
// tests/analysis/plan_test.cc; bench-plan.yaml, `rlsim bench plan`'s, run by the CLI test).
std::vector<std::string> scenario_files() {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(scenario_dir())) {
    const std::string name = e.path().filename().string();
    const bool study = name.starts_with("study-") || name == "bench-plan.yaml";
    const bool runtime = name.starts_with("drift-") || name.starts_with("train-");  // rlsim drift / rlsim train
    if (e.path().extension() == ".yaml" && !runtime && !study) v.push_back(name);
  }
  std::sort(v.begin(), v.end());
  return v;
}

INSTANTIATE_TEST_SUITE_P(Scenarios, EveryScenario, ::testing::ValuesIn(scenario_files()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param.substr(0, p.param.size() - 5);
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

// Golden summaries: every ready scenario's summary.json (as `rlsim run` writes it) equals the
// one in tests/golden/, byte for byte, so a change to the cost model shows where it moves
// figures. When a change is meant to move them, refresh the files with
//   RLSIM_UPDATE_GOLDEN=1 ctest --test-dir build -R GoldenSummary
// and review the diff before committing it.
class GoldenSummary : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenSummary, MatchesTheRepository) {
  const sim::Scenario s = sim::load_scenario((scenario_dir() / GetParam()).string());
  sim::NullSink sink;
  sim::SimResult r = sim::simulate(s, sink);
  analysis::add_warnings(s, r);
  const std::string text = analysis::summary_json(analysis::summarize(s, r, analysis::check_precision_flow(s))).dump(2) + "\n";
  const fs::path golden =
      fs::path(RLSIM_SOURCE_DIR) / "tests/golden" / (GetParam().substr(0, GetParam().size() - 5) + ".summary.json");
  if (std::getenv("RLSIM_UPDATE_GOLDEN")) {
    std::ofstream(golden, std::ios::binary) << text;
    GTEST_SKIP() << "wrote " << golden;
  }
  std::ifstream in(golden, std::ios::binary);
  ASSERT_TRUE(in) << golden << " is missing: RLSIM_UPDATE_GOLDEN=1 ctest --test-dir build -R GoldenSummary writes it";
  const std::string want((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, want) << GetParam() << ": summary.json differs from " << golden
                        << " (if the change is meant: RLSIM_UPDATE_GOLDEN=1 ctest --test-dir build -R GoldenSummary)";
}

INSTANTIATE_TEST_SUITE_P(Scenarios, GoldenSummary, ::testing::ValuesIn(scenario_files()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param.substr(0, p.param.size() - 5);
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

// verl docs/advance/fp8.md (ANCHORS.md): Qwen3-8B-Base DAPO on 8 x H100, FP8 (block-wise) rollout
// is ~12 % (CUDA 12.6) to 18 % (CUDA 12.9) faster than BF16 rollout. Tolerance: the published
// band widened by 5 points on each side (7-23 %), because the simulated workload's response-length
// distribution is an assumption (the doc gives only the 20K maximum) and kernel efficiency
// differs between CUDA versions by the band's own width.
TEST(PublishedFigures, VerlFp8RolloutSpeedupQwen3_8B) {
  const auto bf16 = run("verl-dapo-qwen3-8b-bf16.yaml");
  const auto fp8 = run("verl-dapo-qwen3-8b-fp8.yaml");
  ASSERT_TRUE(bf16.fits());
  ASSERT_TRUE(fp8.fits());
  const double speedup = mean_phase(bf16, sim::Phase::kRollout) / mean_phase(fp8, sim::Phase::kRollout) - 1.0;
  RecordProperty("fp8_rollout_speedup_percent", std::to_string(100 * speedup));
  std::cout << "[ figure ] FP8 rollout speedup " << 100 * speedup << " % (published 12-18 %)\n";
  EXPECT_GE(speedup, 0.07);
  EXPECT_LE(speedup, 0.23);
  // The training phases are untouched by the rollout precision.
  EXPECT_DOUBLE_EQ(mean_phase(bf16, sim::Phase::kActorUpdate), mean_phase(fp8, sim::Phase::kActorUpdate));
}

double mean_step(const sim::SimResult& r, std::size_t from = 0) {
  double sum = 0;
  for (std::size_t i = from; i < r.steps.size(); ++i) sum += r.steps[i].step_s();
  return sum / static_cast<double>(r.steps.size() - from);
}

void figure(const std::string& what, double predicted, double published) {
  std::cout << "[ figure ] " << what << ": predicted " << predicted << ", published " << published << " ("
            << 100 * (predicted / published - 1) << " %)\n";
}

// verl docs/advance/one_step_off.md: Qwen2.5-Math-7B DAPO on 16 x H20; colocated sync step 749 s,
// one-step-off (4 rollout + 12 training GPUs) 520 s. Tolerance +-15 % on each step time: the
// published step also holds reward scoring and data movement that rlsim does not model (749 s
// against 695 s of gen + old_log_prob + update_actor), and the response-length distribution is an
// assumption (only the 20,480 maximum is published). One-step-off is compared in steady state
// (steps after the first, which cannot overlap anything).
TEST(PublishedFigures, VerlOneStepOffQwen25Math7B_16xH20) {
  const auto sync = run("verl-qwen2.5-math-7b-h20-colocate-sync.yaml");
  const auto off = run("verl-qwen2.5-math-7b-h20-one-step-off.yaml");
  ASSERT_TRUE(sync.fits());
  ASSERT_TRUE(off.fits());
  const double t_sync = mean_step(sync), t_off = mean_step(off, 1);
  figure("colocated sync step s", t_sync, 749);
  figure("one-step-off step s", t_off, 520);
  EXPECT_NEAR(t_sync, 749, 0.15 * 749);
  EXPECT_NEAR(t_off, 520, 0.15 * 520);
  EXPECT_GT(t_sync / t_off, 1.15) << "published speed-up 1.44x";
  // One-step-off trains on samples one policy version old.
  for (std::size_t i = 1; i < off.steps.size(); ++i) EXPECT_EQ(off.steps[i].staleness_max, 1);
}

// verl DeepSeek-V3 671B on 96 x H20 (docs/perf/dpsk.md; ANCHORS.md): mean response 1,960 tokens,
// rollout 1,050 s, step 1,700 s, 66 GB per GPU. Tolerance: +-25 % on rollout and step (eager-mode
// TP 32 decode across four nodes and the per-tensor resharding path are modelled by their
// launch, all-reduce and copy costs only; the published step includes reward and data-movement
// time outside the model), +-15 % on memory, +-5 % on the mean response (the workload's input).
TEST(PublishedFigures, VerlDeepSeekV3_96xH20) {
  const sim::Scenario s = sim::load_scenario((scenario_dir() / "verl-deepseek-v3-h20-96.yaml").string());
  sim::NullSink sink;
  const sim::testing::RecordedRun run = sim::testing::simulate_recorded(s, sink);
  const auto& r = run.result;
  ASSERT_TRUE(r.fits()) << r.oom->reason;
  double resp = 0;
  for (const auto& q : run.requests) resp += static_cast<double>(q.response_tokens);
  resp /= static_cast<double>(run.requests.size());
  figure("DeepSeek-V3 mean response tokens", resp, 1960);
  figure("DeepSeek-V3 rollout s", mean_phase(r, sim::Phase::kRollout), 1050);
  figure("DeepSeek-V3 step s", mean_step(r), 1700);
  figure("DeepSeek-V3 GPU memory GB", r.peak_training_bytes / 1e9, 66);
  EXPECT_NEAR(resp, 1960, 0.05 * 1960);
  EXPECT_NEAR(mean_phase(r, sim::Phase::kRollout), 1050, 0.25 * 1050);
  EXPECT_NEAR(mean_step(r), 1700, 0.25 * 1700);
  EXPECT_NEAR(std::max(r.peak_training_bytes, r.peak_rollout_bytes) / 1e9, 66, 0.15 * 66);
}

// SGLang RL memory blog (ANCHORS.md): colocated Qwen2.5-7B on 8 x H200: training peak 38-53 GB,
// rollout 80-115 GB per GPU, CUDA-IPC weight update under 0.5 s. Tolerance: the published bands.
TEST(PublishedFigures, SglangQwen25_7BColocatedMemory_8xH200) {
  const auto r = run("sglang-qwen2.5-7b-h200-colocated-memory.yaml");
  ASSERT_TRUE(r.fits());
  figure("Qwen2.5-7B training peak GB", r.peak_training_bytes / 1e9, 45.5);
  figure("Qwen2.5-7B rollout peak GB", r.peak_rollout_bytes / 1e9, 97.5);
  EXPECT_GE(r.peak_training_bytes, 38e9);
  EXPECT_LE(r.peak_training_bytes, 53e9);
  EXPECT_GE(r.peak_rollout_bytes, 80e9);
  EXPECT_LE(r.peak_rollout_bytes, 115e9);
  EXPECT_LT(r.sync.total(), 0.5);
}

// slime INT4 QAT blog (ANCHORS.md): Kimi-K2 in FP8 does not fit one 8 x H200 node and needs two;
// INT4 W4A16 g32 fits one node and rolls out faster than two-node FP8. Tolerance: the fit results
// exactly; the speed-up must exceed 5 % (the blog gives the direction, not a number).
TEST(PublishedFigures, SlimeKimiK2Int4OneNodeBeatsFp8TwoNodes_H200) {
  const auto int4 = run("slime-kimi-k2-int4-h200-1node.yaml");
  const auto fp8 = run("slime-kimi-k2-fp8-h200-2node.yaml");
  const auto fp8_one = run("slime-kimi-k2-fp8-h200-2node.yaml", {"cluster.nodes=33", "placement.rollout_devices=8",
                                                                 "rollout.tensor_parallel=8", "rollout.expert_parallel=8"});
  ASSERT_TRUE(int4.fits());
  ASSERT_TRUE(fp8.fits());
  ASSERT_FALSE(fp8_one.fits());
  EXPECT_EQ(fp8_one.oom->role, sim::Role::kRollout);
  const double speedup = mean_phase(fp8, sim::Phase::kRollout) / mean_phase(int4, sim::Phase::kRollout);
  std::cout << "[ figure ] Kimi-K2 rollout: INT4 1 node " << mean_phase(int4, sim::Phase::kRollout) << " s, FP8 2 nodes "
            << mean_phase(fp8, sim::Phase::kRollout) << " s (INT4 " << speedup << "x faster; published: faster)\n";
  EXPECT_GT(speedup, 1.05);
}

// Ascend 950DT (MXFP8) beside H200 (FP8 block-wise) on the same workload. Datasheet ratios
// (ANCHORS.md): HBM 4.0 vs 4.8 TB/s bounds memory-bound decode at 1.2x, MXFP8 weights carry 3 %
// more bytes (one E8M0 per 32) and per-iteration overheads are equal, so the 950DT's rollout takes
// 1.0-1.3x the H200's; training is bound by the BF16 rate, 989 vs 500 TFLOPS (catalog default).
TEST(PublishedFigures, Ascend950DtMxfp8BesideH200) {
  const auto npu = run("ascend-950dt-qwen3-8b-mxfp8.yaml");
  const auto gpu = run("h200-qwen3-8b-fp8-block.yaml");
  ASSERT_TRUE(npu.fits());
  ASSERT_TRUE(gpu.fits());
  const double rollout = mean_phase(npu, sim::Phase::kRollout) / mean_phase(gpu, sim::Phase::kRollout);
  const double train = mean_phase(npu, sim::Phase::kActorUpdate) / mean_phase(gpu, sim::Phase::kActorUpdate);
  std::cout << "[ figure ] 950DT / H200: rollout " << rollout << "x, actor update " << train << "x\n";
  EXPECT_GE(rollout, 1.0);
  EXPECT_LE(rollout, 1.3);
  EXPECT_NEAR(train, 989.0 / 500.0, 0.05 * 989.0 / 500.0);
}

}  // namespace
}  // namespace rlsim
