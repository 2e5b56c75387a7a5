// The GRPO loop's verifiable reward, on closed-form cases.
#include "analysis/grpo.h"

#include <gtest/gtest.h>

namespace rlsim::analysis {
namespace {

TEST(Grpo, LipogramRewardIsTheShareOfWordsWithoutE) {
  EXPECT_DOUBLE_EQ(task_reward(GrpoTask::kLipogram, "The cat sat on a mat."), 5.0 / 6.0);  // "The" has an e
  EXPECT_DOUBLE_EQ(task_reward(GrpoTask::kLipogram, "Eek! EVE, eve."), 0.0);               // either case counts
  EXPECT_DOUBLE_EQ(task_reward(GrpoTask::kLipogram, "A dog ran far"), 1.0);
  EXPECT_DOUBLE_EQ(task_reward(GrpoTask::kLipogram, "  ... 42 !"), 0.0);  // no words
  EXPECT_DOUBLE_EQ(task_reward(GrpoTask::kLipogram, "tree-house"), 0.0);  // two words, both with e
  EXPECT_DOUBLE_EQ(task_reward(GrpoTask::kLipogram, "big\nhouse"), 0.5);
}

}  // namespace
}  // namespace rlsim::analysis
