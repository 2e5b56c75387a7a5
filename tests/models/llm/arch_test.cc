#include "models/llm/arch.h"

#include <gtest/gtest.h>

#include "models/precision/footprint.h"
#include "sim/pipeline/rollout.h"
#include "sim/scenario/scenario.h"

namespace rlsim {
namespace {

struct Published {
  const char* name;
  double total_b;   // published total parameters (billions)
  double active_b;  // published active parameters (billions)
  double tol;       // relative tolerance (model cards round; MTP / vision parts excluded)
};

// Totals from the model cards: Qwen3 (Qwen3 technical report table 1 / model cards), Llama 3.1
// 8B, Qwen2.5-7B 7.61B, DeepSeek-V3 671B / 37B, Kimi-K2 1.04T / 32B; Llama 2 7B / 13B / 70B and
// CodeLlama-34B as the Hugging Face checkpoints count them (6,738,415,616 / 13,015,864,320 /
// 68,976,648,192 / 33,743,970,304 parameters).
class CatalogParams : public ::testing::TestWithParam<Published> {};

TEST_P(CatalogParams, MatchPublishedCounts) {
  const auto p = GetParam();
  const auto m = sim::catalog_model(p.name);
  EXPECT_NEAR(static_cast<double>(m.params().total()) / 1e9, p.total_b, p.total_b * p.tol) << p.name;
  EXPECT_NEAR(static_cast<double>(m.active_params()) / 1e9, p.active_b, p.active_b * p.tol) << p.name;
}

INSTANTIATE_TEST_SUITE_P(
    All, CatalogParams,
    ::testing::Values(Published{"qwen3-8b", 8.2, 8.2, 0.01}, Published{"qwen3-32b", 32.8, 32.8, 0.01},
                      Published{"qwen3-30b-a3b", 30.5, 3.3, 0.02}, Published{"qwen3-235b-a22b", 235.0, 22.0, 0.02},
                      Published{"qwen2.5-7b", 7.61, 7.61, 0.01}, Published{"qwen2.5-math-7b", 7.61, 7.61, 0.01},
                      Published{"llama3.1-8b", 8.03, 8.03, 0.01}, Published{"deepseek-v3", 671.0, 37.0, 0.02},
                      Published{"kimi-k2", 1040.0, 32.0, 0.03}, Published{"llama2-7b", 6.74, 6.74, 0.01},
                      Published{"llama2-13b", 13.02, 13.02, 0.01}, Published{"codellama-34b", 33.74, 33.74, 0.01},
                      Published{"llama2-70b", 68.98, 68.98, 0.01}));

TEST(Arch, LinearShapesSumToParams) {
  for (const auto& name : sim::catalog_model_names()) {
    const auto m = sim::catalog_model(name);
    const auto p = m.params();
    double sum = 0;
    for (const auto& l : m.linear_shapes()) sum += static_cast<double>(l.out * l.in * l.count);
    const double bias = m.qkv_bias ? static_cast<double>(m.heads + 2 * m.kv_heads) * m.head_dim * m.layers : 0.0;
    const double expected =
        static_cast<double>(p.linear() + p.router) - bias + static_cast<double>(m.tied_embeddings ? p.embedding : p.lm_head);
    EXPECT_DOUBLE_EQ(sum, expected) << name;
  }
}

TEST(Arch, KvCachePerToken) {
  // Qwen3-8B: 2 (K,V) x 8 kv heads x 128 x 36 layers = 73728 elements = 144 KiB in BF16.
  EXPECT_EQ(sim::catalog_model("qwen3-8b").kv_elements_per_token(), 73728);
  // DeepSeek-V3 MLA: (512 latent + 64 rope) x 61 layers.
  EXPECT_EQ(sim::catalog_model("deepseek-v3").kv_elements_per_token(), 576 * 61);
}

TEST(Arch, CausalAttentionFlops) {
  models::ModelArch m;
  m.layers = 2;
  m.heads = 4;
  m.head_dim = 8;
  // per (query, key) pair: 2 * heads * (qk + v) * layers = 2 * 4 * 16 * 2 = 256 FLOPs
  EXPECT_DOUBLE_EQ(m.attention_flops_per_token(1.0), 256.0);
  EXPECT_DOUBLE_EQ(m.causal_attention_flops(3.0), 256.0 * 6);  // 1 + 2 + 3 pairs
}

TEST(Arch, ExpertsTouched) {
  EXPECT_DOUBLE_EQ(sim::experts_touched(128, 8, 1), 8.0);  // one token: exactly k experts
  EXPECT_NEAR(sim::experts_touched(128, 8, 10000), 128.0, 1e-9);
  EXPECT_NEAR(sim::experts_touched(256, 8, 32), 256.0 * (1 - std::pow(1 - 8.0 / 256, 32)), 1e-9);
  EXPECT_DOUBLE_EQ(sim::experts_touched(0, 0, 5), 0.0);
}

TEST(Arch, WeightBytesByRecipe) {
  const auto m = sim::catalog_model("qwen3-8b");
  const double bf16 = models::weight_bytes(m, models::builtin_recipe("bf16"));
  EXPECT_NEAR(bf16, static_cast<double>(m.params().total()) * 2, 1.0);
  // FP8 block: linears at ~1 byte, embedding and lm_head stay BF16.
  const double fp8 = models::weight_bytes(m, models::builtin_recipe("fp8-block"));
  const auto p = m.params();
  const double expect = static_cast<double>(p.linear()) * (1 + 4.0 / 16384) + (p.embedding + p.lm_head + p.norms) * 2.0;
  EXPECT_NEAR(fp8 / expect, 1.0, 1e-3);
  // INT4 g32: 4.5 bits per linear weight.
  const double int4 = models::weight_bytes(m, models::builtin_recipe("int4-w4a16-g32"));
  EXPECT_NEAR(int4, static_cast<double>(p.linear()) * 4.5 / 8 + (p.embedding + p.lm_head + p.norms) * 2.0, 1e6);
}

}  // namespace
}  // namespace rlsim
