#include <gtest/gtest.h>

#include "models/hardware/device.h"
#include "models/precision/footprint.h"
#include "models/precision/format.h"
#include "models/precision/recipe.h"

namespace rlsim::models {
namespace {

TEST(Format, ParseAndPrint) {
  EXPECT_EQ(parse_format("fp8-e4m3/block128x128").str(), "fp8-e4m3/block128x128");
  EXPECT_EQ(parse_format("fp8-e4m3/group1x128").scaling, (Scaling{ScaleKind::kGroup1xN, 1, 128}));
  EXPECT_EQ(parse_format("int4/group32").scaling, (Scaling{ScaleKind::kGroupN, 1, 32}));
  EXPECT_EQ(parse_format("mxfp8").str(), "fp8-e4m3/mx32");
  EXPECT_EQ(parse_format("nvfp4").str(), "fp4-e2m1/nv16");
  EXPECT_EQ(parse_format("mxfp4").str(), "fp4-e2m1/mx32");
  EXPECT_THROW(parse_format("fp9"), std::invalid_argument);
  EXPECT_THROW(parse_format("fp8-e4m3/block128"), std::invalid_argument);
  EXPECT_THROW(parse_format("int4/group0"), std::invalid_argument);
  EXPECT_THROW(parse_format("e8m0"), std::invalid_argument);  // scale-only element
}

TEST(Format, BytesIncludeScaleOverhead) {
  // BF16: 2 bytes per value, no scales.
  EXPECT_DOUBLE_EQ(parse_format("bf16").bytes(4096, 4096), 4096.0 * 4096 * 2);
  // INT4 g32 with BF16 scales: 4 + 16/32 = 4.5 bits (slime W4A16).
  EXPECT_DOUBLE_EQ(parse_format("int4/group32").bits_per_value(4096, 4096), 4.5);
  EXPECT_DOUBLE_EQ(parse_format("int4/group128").bits_per_value(4096, 4096), 4.125);
  // MXFP8: 8 + 8/32 = 8.25; MXFP4: 4 + 8/32 = 4.25 (OCP MX v1.0).
  EXPECT_DOUBLE_EQ(parse_format("mxfp8").bits_per_value(4096, 4096), 8.25);
  EXPECT_DOUBLE_EQ(parse_format("mxfp4").bits_per_value(4096, 4096), 4.25);
  // NVFP4: 4 + 8/16 = 4.5 plus one FP32 per tensor.
  EXPECT_DOUBLE_EQ(parse_format("nvfp4").bytes(16, 16), (256 * 4 + 16 * 8 + 32) / 8.0);
  // Block 128x128 FP32 scales: 8 + 32/16384 bits.
  EXPECT_DOUBLE_EQ(parse_format("fp8-e4m3/block128x128").bits_per_value(4096, 4096), 8.0 + 32.0 / 16384);
  // HiF4: 64-element blocks with 32 bits of metadata = 4.5 bits.
  EXPECT_DOUBLE_EQ(parse_format("hif4").bits_per_value(64, 64), 4.5);
}

TEST(Format, RaggedShapesGetTheirOwnScales) {
  // 100 columns in groups of 32: 4 groups per row (the last holds 4 values).
  EXPECT_DOUBLE_EQ(parse_format("int4/group32").bytes(3, 100), (3 * 100 * 4 + 3 * 4 * 16) / 8.0);
  // 130 x 130 in 128x128 blocks: 2 x 2 blocks.
  EXPECT_DOUBLE_EQ(parse_format("fp8-e4m3/block128x128").bytes(130, 130), 130.0 * 130 + 4 * 4);
  EXPECT_THROW(parse_format("bf16").bytes(0, 5), std::invalid_argument);
}

TEST(Format, GemmComputeType) {
  EXPECT_EQ(gemm_compute(parse_format("fp8-e4m3/block128x128"), parse_format("fp8-e4m3/group1x128")), ComputeType::kFp8);
  EXPECT_EQ(gemm_compute(parse_format("int4/group32"), parse_format("bf16")), ComputeType::kBf16);  // W4A16
  EXPECT_EQ(gemm_compute(parse_format("nvfp4"), parse_format("nvfp4")), ComputeType::kFp4);
  EXPECT_EQ(gemm_compute(parse_format("nvfp4"), parse_format("bf16")), ComputeType::kBf16);
  EXPECT_EQ(gemm_compute(parse_format("int8/channel"), parse_format("int8/token")), ComputeType::kInt8);
}

TEST(Recipe, BuiltinsAreComplete) {
  for (const char* name : {"bf16", "fp16", "fp8-tensor", "fp8-block", "mxfp8", "int4-w4a16-g32", "int4-w4a16-g128", "nvfp4",
                           "mxfp4", "hif8", "int4-qat-g32"}) {
    EXPECT_NO_THROW(builtin_recipe(name)) << name;
  }
  EXPECT_THROW(builtin_recipe("fp8"), std::invalid_argument);
  const Recipe& qat = builtin_recipe("int4-qat-g32");
  EXPECT_EQ(qat.mode, QuantMode::kFake);
  EXPECT_EQ(qat.linear.compute(qat.mode), ComputeType::kBf16);
  // Fake and real INT4 g32 store the same quantised values: same weight format.
  EXPECT_EQ(qat.linear.weight, builtin_recipe("int4-w4a16-g32").linear.weight);
  EXPECT_TRUE(builtin_recipe("fp8-block").dynamic_activation_quant());
  EXPECT_FALSE(builtin_recipe("int4-w4a16-g32").dynamic_activation_quant());
  EXPECT_FALSE(builtin_recipe("bf16").dynamic_activation_quant());
}

TEST(Device, ComputeFallback) {
  Device h100;
  h100.name = "h100";
  h100.flops_per_s = {{ComputeType::kBf16, 989e12}, {ComputeType::kFp8, 1979e12}};
  EXPECT_EQ(h100.effective(ComputeType::kFp4), ComputeType::kFp8);  // Hopper: no FP4 tensor cores
  EXPECT_EQ(h100.effective(ComputeType::kInt8), ComputeType::kBf16);
  EXPECT_DOUBLE_EQ(h100.rate(ComputeType::kFp8), 1979e12);
  Device ascend;
  ascend.flops_per_s = {{ComputeType::kFp8, 1e15}};
  EXPECT_EQ(ascend.effective(ComputeType::kBf16), std::nullopt);
  EXPECT_THROW(ascend.rate(ComputeType::kBf16), std::logic_error);
}

// Footprint widths come from the formats: unscaled elements at their width, scaled formats with
// their amortised scales, per-tensor constants left out.
TEST(Footprint, BytesPerValueFromTheFormat) {
  EXPECT_DOUBLE_EQ(bytes_per_value(parse_format("bf16"), 4096), 2.0);
  EXPECT_DOUBLE_EQ(bytes_per_value(parse_format("fp32"), 4096), 4.0);
  EXPECT_DOUBLE_EQ(bytes_per_value(parse_format("fp8-e4m3/tensor"), 4096), 1.0);
  const Format g = parse_format("fp8-e4m3/group1x128");
  EXPECT_DOUBLE_EQ(bytes_per_value(g, 4096), g.bytes(1, 4096) / 4096.0);
  EXPECT_GT(bytes_per_value(g, 4096), 1.0);
  // A 128x128 block scale amortises over 128 rows.
  const Format b = parse_format("fp8-e4m3/block128x128");
  EXPECT_NEAR(bytes_per_value(b, 4096), b.bytes(128, 4096) / (128.0 * 4096), 1e-12);
}

TEST(Footprint, KvHiddenAndParameterWidthsFollowTheRecipe) {
  ModelArch m;
  m.layers = 4;
  m.hidden = 256;
  m.heads = 4;
  m.kv_heads = 2;
  m.head_dim = 64;
  m.intermediate = 512;
  m.vocab = 1000;
  Recipe r = builtin_recipe("bf16");
  // K and V of 2 heads x 64 per layer, 4 layers, BF16.
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(m, r), 4 * 2 * 2 * 64 * 2.0);
  // A per-token scale adds one scale per layer row.
  r.kv_cache = parse_format("fp8-e4m3/token");
  const double row = 2 * 2 * 64;
  EXPECT_DOUBLE_EQ(kv_bytes_per_token(m, r), 4 * r.kv_cache.bytes(1, static_cast<std::int64_t>(row)));
  EXPECT_DOUBLE_EQ(hidden_bytes_per_token(m, builtin_recipe("bf16")), 256 * 2.0);
  EXPECT_DOUBLE_EQ(hidden_bytes_per_token(m, builtin_recipe("fp16")), 256 * 2.0);
  const ParamWidths w = param_widths(builtin_recipe("bf16"));
  EXPECT_DOUBLE_EQ(w.master, 2.0);
  EXPECT_DOUBLE_EQ(w.gradient, 4.0);
  EXPECT_DOUBLE_EQ(w.sync, 2.0);
  EXPECT_DOUBLE_EQ(w.reference, 2.0);
  Recipe low = builtin_recipe("bf16");
  low.gradient = parse_format("bf16");
  low.reference = parse_format("fp8-e4m3/block128x128");
  EXPECT_DOUBLE_EQ(param_widths(low).gradient, 2.0);
  EXPECT_LT(param_widths(low).reference, 1.01);
}

// The weight sync converts exactly the weights the engine does not keep in the sync format.
TEST(Footprint, StoresWeightsAs) {
  const Format bf16 = parse_format("bf16");
  EXPECT_TRUE(builtin_recipe("bf16").stores_weights_as(bf16));
  EXPECT_FALSE(builtin_recipe("fp16").stores_weights_as(bf16));
  EXPECT_FALSE(builtin_recipe("fp8-block").stores_weights_as(bf16));
  EXPECT_FALSE(builtin_recipe("int4-w4a16-g32").stores_weights_as(bf16));
}

}  // namespace
}  // namespace rlsim::models
