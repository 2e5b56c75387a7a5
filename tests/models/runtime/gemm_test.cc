// The prefill GEMM on packed weights (models/runtime/gemm.h): for every weight layout and the
// activation formats the recipes pair with it, on aligned and ragged shapes, the result equals the
// dequantised weights times the rounded activations (a double-precision reference) to FP32
// summation accuracy; the kernel choice follows the codes; the decoded operands are exact.
#include "models/runtime/gemm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "models/precision/format.h"
#include "models/precision/quantize.h"
#include "models/runtime/transformer.h"
#include "tests/models/runtime/test_data.h"

namespace rlsim::models {
namespace {

using test_data::float_bits_hash;
using test_data::normal;

struct Pair {
  const char* weight;
  const char* activation;
  bool bf16_kernel;  // the kernel gemm_bf16_applies must choose
};

// The built-in recipes' linear formats, plus layouts and scalings only the FP32 kernel can take.
const Pair kPairs[] = {
    {"bf16", "bf16", true},
    {"fp8-e4m3/tensor", "fp8-e4m3/token", true},
    {"fp8-e4m3/block128x128", "fp8-e4m3/group1x128", true},
    {"mxfp8", "mxfp8", true},
    {"int4/group32", "bf16", true},
    {"int4/group128", "bf16", true},
    {"nvfp4", "nvfp4", true},
    {"mxfp4", "mxfp4", true},
    {"fp8-e4m3/channel", "fp8-e4m3/tensor", true},
    {"int4/group32", "fp8-e4m3/group1x128", true},  // nested blocks of 32 and 128
    {"fp32", "fp32", false},
    {"fp16", "bf16", false},
    {"bf16", "fp32", false},
    {"hif8/tensor", "hif8/token", false},
    {"fp8-e5m2/tensor", "fp8-e4m3/token", false},  // E5M2 weights have no kernel layout (FP32 values)
};

// |y - reference| <= this times sum |w x| (FP32 sums of up to a few thousand products, and for the
// BF16 kernel the block scales applied to each block's sum).
constexpr double kRelativeBound = 4e-6;

void check(const Pair& pc, std::int64_t rows, std::int64_t cols, std::int64_t tokens) {
  SCOPED_TRACE(std::string(pc.weight) + " x " + pc.activation + " rows " + std::to_string(rows) + " cols " +
               std::to_string(cols) + " tokens " + std::to_string(tokens));
  const Format wf = parse_format(pc.weight), af = parse_format(pc.activation);
  const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 3, 0.05f);
  std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 4, 1.0f);
  x[static_cast<std::size_t>(cols / 2)] = 40.0f;  // an outlier: block scales differ across blocks
  const PackedWeight p(quantize(wf, rows, cols, std::span<const float>(w)));
  const bool bf16 = gemm_bf16_applies(p, af);
  ASSERT_EQ(bf16, pc.bf16_kernel);
  const GemmActivations a(x.data(), tokens, cols, af, bf16);
  std::vector<float> y(static_cast<std::size_t>(tokens * (rows + 3)), -1.0f);
  const GemmJob job{&p, &a, y.data(), rows + 3};  // ldy > rows: columns past rows stay untouched
  gemm(std::span<const GemmJob>(&job, 1));
  std::vector<float> xr = x;
  round_to_format(xr.data(), tokens, cols, af);
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (std::int64_t r = 0; r < rows; ++r) {
      double ref = 0, mag = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double prod = static_cast<double>(p.at(r, c)) * xr[static_cast<std::size_t>(t * cols + c)];
        ref += prod, mag += std::abs(prod);
      }
      const float got = y[static_cast<std::size_t>(t * (rows + 3) + r)];
      ASSERT_LE(std::abs(got - ref), kRelativeBound * mag + 1e-30) << "token " << t << " row " << r;
    }
    for (std::int64_t r = rows; r < rows + 3; ++r) ASSERT_EQ(y[static_cast<std::size_t>(t * (rows + 3) + r)], -1.0f);
  }
}

TEST(PrefillGemm, EqualsDequantisedWeightsTimesRoundedActivations) {
  for (const Pair& pc : kPairs) {
    check(pc, 96, 256, 64);  // aligned: whole panels, tiles and blocks
    check(pc, 53, 160, 37);  // ragged rows (a partial panel), a partial token tile and vector
  }
}

// The BF16 kernel gives the same bits with VDPBF16PS (AVX512-BF16) and with its FMA form
// (AVX-512 without it, AVX2): simd::bf16_pair_dot adds a pair's odd product first, as VDPBF16PS
// does. The hashes below came out alike from three builds on a Zen 4 VM (2026-11-29:
// -march=native with AVX512-BF16, the same with -mno-avx512bf16, and -march=znver2); before the
// FMA form's order was fixed, the two without AVX512-BF16 gave other hashes for bf16, fp8, int4
// and mxfp8. AMX tiles round their own way and are off here; 70 tokens: a full 64-token tile and
// a ragged one.
TEST(PrefillGemm, GivesTheSameBitsWithAndWithoutAvx512Bf16) {
  if (!simd_kernels_available()) GTEST_SKIP() << "portable build: the scalar kernels sum in another order";
  gemm_allow_amx(false);
  const std::pair<Pair, std::uint64_t> cases[] = {{{"bf16", "bf16", true}, 0xb8b0848ace6a4887ull},
                                                  {{"fp8-e4m3/block128x128", "fp8-e4m3/group1x128", true}, 0x91fcc5249d8afd28ull},
                                                  {{"int4/group32", "bf16", true}, 0xa97a1aaef06a779eull},
                                                  {{"nvfp4", "nvfp4", true}, 0xcfd947b65bdc1cfeull},
                                                  {{"mxfp8", "mxfp8", true}, 0xa2e33d13a516692dull}};
  for (const auto& [pc, want] : cases) {
    std::vector<float> out;
    for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{37, 200}, {64, 576}}) {
      const std::vector<float> w = normal(static_cast<std::size_t>(rows * cols), 5, 0.02f);
      const PackedWeight p(quantize(parse_format(pc.weight), rows, cols, std::span<const float>(w)));
      const std::int64_t tokens = 70;
      const std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 6, 1.0f);
      const Format af = parse_format(pc.activation);
      ASSERT_TRUE(gemm_bf16_applies(p, af)) << pc.weight;
      const GemmActivations a(x.data(), tokens, cols, af, true);
      std::vector<float> y(static_cast<std::size_t>(tokens * rows));
      const GemmJob job{&p, &a, y.data(), rows};
      gemm(std::span<const GemmJob>(&job, 1));
      out.insert(out.end(), y.begin(), y.end());
    }
    EXPECT_EQ(float_bits_hash(out), want) << pc.weight << ": 0x" << std::hex << float_bits_hash(out);
  }
  gemm_allow_amx(true);
}

TEST(PrefillGemm, RaggedColumnsAndManyTiles) {
  // 200 columns: a partial scale block at the end of every row; 130 tokens: three token tiles.
  check({"fp8-e4m3/block128x128", "fp8-e4m3/group1x128", true}, 50, 200, 130);
  check({"int4/group32", "bf16", true}, 50, 200, 130);
  check({"bf16", "bf16", true}, 49, 99, 130);  // an odd column count: the last pair half zero
  check({"fp32", "fp32", false}, 49, 99, 130);
  check({"nvfp4", "nvfp4", true}, 50, 208, 2);
}

TEST(PrefillGemm, SeveralJobsInOneCallMatchOneByOne) {
  const std::int64_t cols = 192, tokens = 40;
  const std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 5, 1.0f);
  const Format af = parse_format("bf16");
  std::vector<PackedWeight> ws;
  for (std::int64_t rows : {64, 200, 17})
    ws.emplace_back(quantize(parse_format("int4/group32"), rows, cols,
                             std::span<const float>(normal(static_cast<std::size_t>(rows * cols), 6, 0.05f))));
  const GemmActivations a(x.data(), tokens, cols, af, true);
  std::vector<std::vector<float>> together(3), alone(3);
  std::vector<GemmJob> jobs;
  for (std::size_t k = 0; k < 3; ++k) {
    together[k].resize(static_cast<std::size_t>(tokens * ws[k].rows()));
    alone[k].resize(together[k].size());
    jobs.push_back({&ws[k], &a, together[k].data(), ws[k].rows()});
  }
  gemm(jobs);
  for (std::size_t k = 0; k < 3; ++k) {
    const GemmJob one{&ws[k], &a, alone[k].data(), ws[k].rows()};
    gemm(std::span<const GemmJob>(&one, 1));
    EXPECT_EQ(together[k], alone[k]) << "job " << k;  // each panel is computed alike wherever it runs
  }
}

// Tokens 17..20 sit in the second 16-token vector of the first tile of a 70-token call and in
// the first vector alone; token 69 in the second tile. Where the activations round row by row,
// each must get the same bits either way.
void check_token_independence() {
  const std::int64_t rows = 70, cols = 256, tokens = 70;
  const std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 11, 1.0f);
  for (const Pair& pc : kPairs) {
    const Format wf = parse_format(pc.weight), af = parse_format(pc.activation);
    if (!rows_round_independently(af)) continue;
    SCOPED_TRACE(std::string(pc.weight) + " x " + pc.activation);
    const PackedWeight p(
        quantize(wf, rows, cols, std::span<const float>(normal(static_cast<std::size_t>(rows * cols), 12, 0.05f))));
    const bool bf16 = gemm_bf16_applies(p, af);
    auto run = [&](std::int64_t t0, std::int64_t n) {
      const GemmActivations a(x.data() + t0 * cols, n, cols, af, bf16);
      std::vector<float> y(static_cast<std::size_t>(n * rows));
      const GemmJob job{&p, &a, y.data(), rows};
      gemm(std::span<const GemmJob>(&job, 1));
      return y;
    };
    const std::vector<float> all = run(0, tokens);
    for (const auto& [t0, n] : {std::pair<std::int64_t, std::int64_t>{17, 4}, {69, 1}}) {
      const std::vector<float> alone = run(t0, n);
      for (std::int64_t i = 0; i < n * rows; ++i)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(alone[i]), std::bit_cast<std::uint32_t>(all[t0 * rows + i]))
            << "token " << t0 + i / rows;
    }
  }
}

TEST(PrefillGemm, ATokensSumsDoNotDependOnTheOtherTokensOfTheCall) {
  // On the host's kernel: AVX-512 register blocks of 1-4 vectors, AVX2, AMX tiles, the portable loops.
  check_token_independence();
}

TEST(PrefillGemm, AmxKernelWithEmulatedTilesMeetsTheSameChecks) {
  // The AMX kernel's code (2 x 2 tile blocks, partial ones at a panel's or a tile's edge, scaled
  // blocks of 32 and 128 columns, ragged rows and columns) with its tile instructions emulated:
  // CI hosts have no AMX, and this keeps the code they would not run tested.
  if (!gemm_emulate_amx(true)) GTEST_SKIP() << "this build has no AMX kernel (AVX-512 Linux builds have one)";
  struct Restore {
    ~Restore() { gemm_emulate_amx(false); }
  } restore;
  for (const Pair& pc : kPairs) {
    check(pc, 96, 256, 64);
    check(pc, 53, 160, 37);
  }
  check({"fp8-e4m3/block128x128", "fp8-e4m3/group1x128", true}, 50, 200, 130);
  check({"int4/group32", "bf16", true}, 50, 200, 130);
  check({"bf16", "bf16", true}, 49, 99, 130);
  check({"nvfp4", "nvfp4", true}, 50, 208, 2);
  check_token_independence();
}

TEST(PrefillGemm, DecodedOperandsAreExact) {
  for (const char* name : {"bf16", "fp8-e4m3/block128x128", "mxfp8", "int4/group32", "nvfp4"}) {
    SCOPED_TRACE(name);
    const std::int64_t rows = 37, cols = 96;
    const PackedWeight p(quantize(parse_format(name), rows, cols,
                                  std::span<const float>(normal(static_cast<std::size_t>(rows * cols), 7, 0.05f))));
    ASSERT_TRUE(p.codes_in_bf16());
    const std::int64_t ld = 128, nb = p.scale_blocks();
    std::vector<std::uint16_t> codes(static_cast<std::size_t>(rows * ld), 0xFFFF);
    std::vector<float> scales(static_cast<std::size_t>(rows * nb));
    std::vector<float> values(static_cast<std::size_t>(rows * ld), -1.0f);
    p.decode_rows_bf16(0, rows, codes.data(), ld);
    p.block_scales(0, rows, scales.data());
    p.decode_rows_f32(0, rows, values.data(), ld);
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < ld; ++c) {
        const auto i = static_cast<std::size_t>(r * ld + c);
        if (c >= cols) {
          ASSERT_EQ(codes[i], 0) << "padding";
          ASSERT_EQ(values[i], 0.0f) << "padding";
          continue;
        }
        const float code = std::bit_cast<float>(static_cast<std::uint32_t>(codes[i]) << 16);
        const float scale = scales[static_cast<std::size_t>(r * nb + c / p.scale_block_cols())];
        // The code times its scale is the dequantised value (one FP32 rounding at most).
        ASSERT_FLOAT_EQ(code * scale, p.at(r, c)) << r << "," << c;
        ASSERT_EQ(values[i], p.at(r, c)) << r << "," << c;
      }
    }
  }
}

// Every E4M3 code but the two NaNs (normals, the 7 subnormal magnitudes, both zeros), in whole
// 16-code chunks (the SIMD decode) and a ragged tail (the scalar one): its BF16 code is its exact
// value, in both the row-major and the k-major layout (an odd column count: the k-major layout's
// last column stands alone, outside the column pairs).
TEST(PrefillGemm, EveryE4M3CodeDecodesToItsValue) {
  for (const char* name : {"fp8-e4m3", "mxfp8"}) {
    SCOPED_TRACE(name);
    QuantizedTensor q;
    q.format = parse_format(name);
    const std::int64_t cols = 101;
    q.rows = 3, q.cols = cols;  // 303 codes: the 254 non-NaN ones, then the first 49 again
    q.block_cols = q.format.scaling.kind == ScaleKind::kNone ? 1 : 32;
    for (std::uint32_t c = 0; q.codes.size() < static_cast<std::size_t>(3 * cols); c = (c + 1) % 256) {
      if ((c & 0x7Fu) != 0x7Fu) q.codes.push_back(c);
    }
    if (q.block_cols > 1) {
      const std::size_t blocks = 3 * 4;  // ceil(101 / 32) per row
      q.scales.assign(blocks, 1.0);
      q.scale_codes.assign(blocks, 127);  // E8M0 2^0
    } else {
      q.scales.assign(1, 1.0);
      q.scale_codes.assign(1, 0x3F800000u);
    }
    const PackedWeight p(q);
    ASSERT_TRUE(p.codes_in_bf16());
    const std::int64_t ld = 128;
    std::vector<std::uint16_t> codes(static_cast<std::size_t>(3 * ld));
    p.decode_rows_bf16(0, 3, codes.data(), ld);
    for (std::int64_t r = 0; r < 3; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::uint32_t code = q.codes[static_cast<std::size_t>(r * cols + c)];
        const float got = std::bit_cast<float>(static_cast<std::uint32_t>(codes[static_cast<std::size_t>(r * ld + c)]) << 16);
        const auto want = static_cast<float>(decode(Element::kFp8E4M3, code));
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want)) << "code 0x" << std::hex << code;
      }
    }
  }
}

TEST(PrefillGemm, Nvfp4TensorScaleIgnoresInfAndNaN) {
  // NVFP4's tensor scale is amax / (448 x 6) over the call's finite values: an infinity or a NaN,
  // in the vector body or the scalar tail of a thread's share (33 x 40 values), is not counted.
  const std::int64_t tokens = 33, cols = 40;
  std::vector<float> x = normal(static_cast<std::size_t>(tokens * cols), 9, 1.0f);
  x[100] = -60.0f;
  x[5] = std::numeric_limits<float>::infinity();
  x[700] = -std::numeric_limits<float>::infinity();
  x[x.size() - 1] = std::numeric_limits<float>::quiet_NaN();
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    const GemmActivations a(x.data(), tokens, cols, parse_format("nvfp4"), true);
    for (std::int64_t t : {0, 17, 32})
      EXPECT_EQ(a.scales[a.scale_index(t, 0)], static_cast<float>(60.0 / (448.0 * 6.0))) << threads;
  }
  omp_set_num_threads(saved);
}

TEST(PrefillGemm, RejectsActivationsWithoutBf16Codes) {
  const std::vector<float> x(64, 1.0f);
  EXPECT_THROW(GemmActivations(x.data(), 4, 16, parse_format("fp32"), true), std::invalid_argument);
  EXPECT_THROW(GemmActivations(x.data(), 4, 16, parse_format("hif8/token"), true), std::invalid_argument);
  EXPECT_THROW(GemmActivations(x.data(), 0, 16, parse_format("bf16"), true), std::invalid_argument);
  EXPECT_FALSE(activation_codes_in_bf16(parse_format("fp16")));
  EXPECT_TRUE(activation_codes_in_bf16(parse_format("nvfp4")));
}

}  // namespace
}  // namespace rlsim::models
