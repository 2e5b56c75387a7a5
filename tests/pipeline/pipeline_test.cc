#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "sim/pipeline/pipeline.h"

namespace rlsim::sim {
namespace {

namespace fs = std::filesystem;

Scenario load_text(const std::string& text, const std::vector<std::string>& overrides = {}) {
  const fs::path p = fs::temp_directory_path() / ("rlsim_pipeline_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << text;
  Scenario s = load_scenario(p.string(), overrides);
  fs::remove(p);
  return s;
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

TEST(Pipeline, SyncStepIsTheSumOfItsPhases) {
  NullSink sink;
  const Scenario s = load_text(kBase);
  const SimResult r = simulate(s, sink);
  ASSERT_TRUE(r.fits());
  ASSERT_EQ(r.steps.size(), 3u);
  for (const auto& st : r.steps) {
    double sum = 0;
    for (const auto& [_, v] : st.phase_s) sum += v;
    EXPECT_NEAR(st.step_s(), sum, 1e-6);
    EXPECT_GT(st.phase_s.at("rollout"), 0);
    EXPECT_GT(st.phase_s.at("actor_update"), 0);
  }
  for (std::size_t i = 1; i < r.steps.size(); ++i) EXPECT_EQ(r.steps[i].start, r.steps[i - 1].end);
}

TEST(Pipeline, EverySequenceOnceAndEveryAllocationFreed) {
  NullSink sink;
  const Scenario s = load_text(kBase);
  const SimResult r = simulate(s, sink);
  ASSERT_EQ(r.requests.size(), static_cast<std::size_t>(s.steps * s.workload.sequences_per_step()));
  for (const auto& q : r.requests) {
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
  EXPECT_LT(fp8.steps[0].phase_s.at("rollout"), bf16.steps[0].phase_s.at("rollout"));
  EXPECT_EQ(fp8.rollout_cost.compute_type, models::ComputeType::kFp8);
  EXPECT_EQ(int4.rollout_cost.compute_type, models::ComputeType::kBf16);  // W4A16 on Hopper
  // The same sampled workload: training time does not depend on the rollout format.
  EXPECT_DOUBLE_EQ(fp8.steps[0].phase_s.at("actor_update"), bf16.steps[0].phase_s.at("actor_update"));
}

TEST(Pipeline, ModelTooLargeIsAnOomResult) {
  NullSink sink;
  const SimResult r = simulate(load_text(kBase, {"model=kimi-k2"}), sink);
  EXPECT_FALSE(r.fits());
  ASSERT_TRUE(r.oom);
  EXPECT_EQ(r.oom->role, "rollout");
  EXPECT_GT(r.oom->breakdown.at("rollout_weights"), 1e12);  // ~2 TB of BF16 weights on one device
  EXPECT_TRUE(r.steps.empty());
}

TEST(Pipeline, ColocatedReservationOomIncludesTrainingState) {
  NullSink sink;
  // The engine reserves 95 % of the device while the FSDP actor keeps its shards resident.
  const SimResult r = simulate(load_text(kBase, {"rollout.memory_utilization=0.95"}), sink);
  ASSERT_FALSE(r.fits());
  EXPECT_EQ(r.oom->role, "rollout");
  EXPECT_GT(r.oom->breakdown.at("optimizer"), 0);
  EXPECT_GT(r.oom->required_bytes, r.oom->capacity_bytes);
}

TEST(Pipeline, OneStepOffOverlapsRolloutAndTraining) {
  NullSink sink;
  const std::string dis = std::string(kBase) + "placement: {mode: disaggregated, rollout_devices: 4, train_devices: 4}\n";
  const SimResult sync = simulate(load_text(dis, {"steps=4"}), sink);
  const SimResult off = simulate(load_text(dis + "schedule: {mode: one-step-off}\n", {"steps=4"}), sink);
  ASSERT_TRUE(sync.fits());
  ASSERT_TRUE(off.fits());
  const double sync_total = to_seconds(sync.steps.back().end);
  const double off_total = to_seconds(off.steps.back().end);
  EXPECT_LT(off_total, sync_total);
  // Overlap cannot beat the busier side: total >= sum of rollouts and >= sum of training phases.
  double rollouts = 0, train = 0;
  for (const auto& st : off.steps) {
    rollouts += st.phase_s.at("rollout");
    train += st.phase_s.at("actor_update");
  }
  EXPECT_GE(off_total, rollouts - 1e-6);
  EXPECT_GE(off_total, train);
  for (const auto& q : off.requests) EXPECT_EQ(q.generated, q.response_tokens);
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

TEST(Pipeline, SyncGatherBufferFollowsTheBackend) {
  NullSink sink;
  auto gather_peak = [](const SimResult& r) {
    double peak = 0;
    for (const auto& e : r.ledgers.back().events()) {
      if (e.tag == "sync_gather_buffer" && e.delta_bytes > 0) peak = std::max(peak, e.delta_bytes);
    }
    return peak;
  };
  const SimResult fsdp = simulate(load_text(kBase), sink);
  const SimResult megatron = simulate(load_text(kBase, {"training.backend=megatron", "weight_sync.bucket=1 GB"}), sink);
  const double full = static_cast<double>(catalog_model("qwen3-8b").params().total()) * 2.0;
  EXPECT_DOUBLE_EQ(gather_peak(fsdp), full);
  EXPECT_DOUBLE_EQ(gather_peak(megatron), 1e9);
}

}  // namespace
}  // namespace rlsim::sim
