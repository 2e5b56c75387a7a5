#include <gtest/gtest.h>

#include "sim/pipeline/collectives.h"
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

TEST(Collectives, GroupLinkCrossesNodes) {
  const models::Link intra{450e9, 2e-6}, inter{50e9, 5e-6};
  EXPECT_DOUBLE_EQ(group_link(8, 8, intra, inter).bandwidth_bytes_per_s, 450e9);
  EXPECT_DOUBLE_EQ(group_link(16, 8, intra, inter).bandwidth_bytes_per_s, 50e9);
}

TEST(MemoryLedger, BalancesAndReportsOom) {
  MemoryLedger l("dev", 100.0);
  l.set_phase("rollout");
  const auto a = l.allocate(0, "weights", 40);
  const auto b = l.allocate(1, "kv", 50);
  EXPECT_DOUBLE_EQ(l.in_use(), 90);
  EXPECT_FALSE(l.oom());
  l.set_phase("training");
  l.free(2, b);
  const auto c = l.allocate(3, "activations", 70);  // 110 > 100
  ASSERT_TRUE(l.oom());
  EXPECT_EQ(l.oom()->phase, "training");
  EXPECT_EQ(l.oom()->tag, "activations");
  EXPECT_DOUBLE_EQ(l.oom()->breakdown.at("weights"), 40);
  EXPECT_DOUBLE_EQ(l.oom()->breakdown.at("activations"), 70);
  EXPECT_DOUBLE_EQ(l.peak_in("rollout"), 90);
  EXPECT_DOUBLE_EQ(l.peak_in("training"), 110);
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
