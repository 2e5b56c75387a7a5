#include "sim/pipeline/collectives.h"

#include <gtest/gtest.h>

#include "sim/pipeline/memory_ledger.h"

namespace rlsim::sim {
namespace {

const models::Link kLink{100e9, 1e-6};  // 100 GB/s, 1 us

TEST(Collectives, RingFormulas) {
  // all-gather of 8 GB over 8 ranks: 7/8 * 8e9 / 1e11 + 7 us
  EXPECT_DOUBLE_EQ(all_gather_s(8e9, 8, kLink, 1.0), 7.0 / 8 * 8e9 / 100e9 + 7e-6);
  EXPECT_DOUBLE_EQ(reduce_scatter_s(8e9, 8, kLink, 1.0), all_gather_s(8e9, 8, kLink, 1.0));
  // all-reduce = 2 (n-1)/n S / B + 2 (n-1) a
  EXPECT_DOUBLE_EQ(all_reduce_s(1e9, 4, kLink, 0.5), 2 * 3.0 / 4 * 1e9 / 50e9 + 6e-6);
  EXPECT_DOUBLE_EQ(broadcast_s(1e9, 5, kLink, 1.0), 1e9 / 100e9 + 4e-6);
  EXPECT_DOUBLE_EQ(all_reduce_s(1e9, 1, kLink, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(broadcast_s(0, 4, kLink, 1.0), 0.0);
}

// Across nodes the all-reduce is hierarchical: reduce-scatter in the node, all-reduce of one
// shard across nodes (one NIC per device), all-gather in the node; inside a node it is the ring.
TEST(Collectives, HierarchicalAllReduceAcrossNodes) {
  const models::Link intra{450e9, 2e-6}, inter{50e9, 5e-6};
  EXPECT_DOUBLE_EQ(hierarchical_all_reduce_s(1e6, 8, 8, intra, inter, 1.0), all_reduce_s(1e6, 8, intra, 1.0));
  const double two_nodes = 2 * (7.0 / 8 * 1e6 / 450e9 + 7 * 2e-6) + (2 * 1.0 / 2 * (1e6 / 8) / 50e9 + 2 * 5e-6);
  EXPECT_DOUBLE_EQ(hierarchical_all_reduce_s(1e6, 16, 8, intra, inter, 1.0), two_nodes);
  // Latency-bound small messages: far below a flat ring over the inter-node link (30 hops of 5 us).
  EXPECT_LT(hierarchical_all_reduce_s(1e5, 16, 8, intra, inter, 1.0), 0.5 * all_reduce_s(1e5, 16, inter, 1.0));
}

TEST(Collectives, GroupLinkCrossesNodes) {
  const models::Link intra{450e9, 2e-6}, inter{50e9, 5e-6};
  EXPECT_DOUBLE_EQ(group_link(8, 8, intra, inter).bandwidth_bytes_per_s, 450e9);
  EXPECT_DOUBLE_EQ(group_link(16, 8, intra, inter).bandwidth_bytes_per_s, 50e9);
}

// Wide-EP dispatch and combine against DeepEP's published low-latency kernels (README of
// deepseek-ai/DeepEP: H800, one CX7 400 Gb/s NIC per GPU, 128 tokens per rank, hidden 7168, top-8,
// FP8 dispatch with 1x128 FP32 scales, BF16 combine), with the H800 catalog links and the default
// comm efficiency (0.7), nothing fitted to the table: within 25 % at EP 16-256.
TEST(Collectives, ExpertAllToAllReproducesDeepEpLowLatency) {
  const models::Link intra{200e9, 2e-6}, inter{50e9, 5e-6};  // models/hardware/catalog/devices/h800.yaml
  const double tokens = 128, topk = 8, hidden = 7168;
  const double dispatch = tokens * topk * (hidden + hidden / 128 * 4), combine = tokens * topk * hidden * 2;
  struct Row {
    int ep;
    double dispatch_us, combine_us;
  };
  for (const Row& r : {Row{16, 118, 195}, Row{32, 155, 273}, Row{64, 173, 314}, Row{128, 192, 369}, Row{256, 194, 360}}) {
    const double d = expert_all_to_all_s(dispatch, r.ep, 8, intra, inter, 0.7) * 1e6;
    const double c = expert_all_to_all_s(combine, r.ep, 8, intra, inter, 0.7) * 1e6;
    EXPECT_NEAR(d / r.dispatch_us, 1.0, 0.25) << "dispatch EP" << r.ep << ": " << d << " us";
    EXPECT_NEAR(c / r.combine_us, 1.0, 0.25) << "combine EP" << r.ep << ": " << c << " us";
  }
  // Closed forms: in one node the NVLink share only; across nodes the slower of the two shares.
  EXPECT_DOUBLE_EQ(expert_all_to_all_s(8e6, 8, 8, intra, inter, 1.0), 8e6 * 7 / 8 / 200e9 + 4e-6);
  EXPECT_DOUBLE_EQ(expert_all_to_all_s(8e6, 32, 8, intra, inter, 1.0), 8e6 * 24 / 32 / 50e9 + 10e-6);
  EXPECT_DOUBLE_EQ(expert_all_to_all_s(8e6, 1, 8, intra, inter, 1.0), 0.0);
}

TEST(MemoryLedger, BalancesAndReportsOom) {
  MemoryLedger l("dev", 100.0);
  l.set_phase(Role::kRollout);
  const auto a = l.allocate(0, MemoryTag::kRolloutWeights, 40);
  const auto b = l.allocate(1, MemoryTag::kKvCache, 50);
  EXPECT_DOUBLE_EQ(l.in_use(), 90);
  EXPECT_FALSE(l.oom());
  l.set_phase(Role::kTraining);
  l.free(2, b);
  const auto c = l.allocate(3, MemoryTag::kActivations, 70);  // 110 > 100
  ASSERT_TRUE(l.oom());
  EXPECT_EQ(l.oom()->phase, Role::kTraining);
  EXPECT_EQ(l.oom()->tag, MemoryTag::kActivations);
  EXPECT_DOUBLE_EQ(l.oom()->breakdown.at("rollout_weights"), 40);
  EXPECT_DOUBLE_EQ(l.oom()->breakdown.at("activations"), 70);
  EXPECT_DOUBLE_EQ(l.peak_in(Role::kRollout), 90);
  EXPECT_DOUBLE_EQ(l.peak_in(Role::kTraining), 110);
  l.free(4, c);
  l.free(5, a);
  EXPECT_EQ(l.live_allocations(), 0u);
  EXPECT_DOUBLE_EQ(l.in_use(), 0);
  double sum = 0;
  for (const auto& e : l.events()) sum += e.delta_bytes;
  EXPECT_DOUBLE_EQ(sum, 0);
  EXPECT_THROW(l.free(6, a), std::logic_error);
}

}  // namespace
}  // namespace rlsim::sim
