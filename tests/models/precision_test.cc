#include <gtest/gtest.h>

#include "models/hardware/device.h"
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
  for (const char* name : {"bf16", "fp16", "fp8-tensor", "fp8-block", "mxfp8", "int4-w4a16-g32", "int4-w4a16-g128",
                           "nvfp4", "mxfp4", "hif8", "int4-qat-g32"}) {
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

}  // namespace
}  // namespace rlsim::models
