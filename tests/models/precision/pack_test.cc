// Packing: hand-computed words in slime's INT4 order and in nibble order, and exact unpack of every
// format (codes, scale codes, scales) with storage sizes equal to the trait table's bytes.
#include "models/precision/pack.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "models/precision/recipe.h"
#include "sim/engine/random.h"

namespace rlsim::models {
namespace {

std::vector<std::uint32_t> int4_codes(std::initializer_list<int> levels) {
  std::vector<std::uint32_t> out;
  for (int l : levels) out.push_back(static_cast<std::uint32_t>(l) & 0xFu);
  return out;
}

TEST(Pack, Int4EightPerInt32InSlimesOrder) {
  // Levels 1, -1, 2, -2, 3, -3, 7, -7 -> nibbles level + 8 = 9, 7, 10, 6, 11, 5, 15, 1, element j
  // at bits 4j.. (slime tools/convert_hf_to_int4_direct.py pack_to_int32 with sym=True).
  const auto codes = int4_codes({1, -1, 2, -2, 3, -3, 7, -7});
  const auto w = pack_int4_to_int32(codes, 1, 8);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(w[0]), 0x1F5B6A79u);
  // A top nibble >= 8 makes the int32 negative, as torch's int32 sum does.
  const auto w2 = pack_int4_to_int32(int4_codes({0, 0, 0, 0, 0, 0, 0, 7}), 1, 8);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(w2[0]), 0xF8888888u);
  EXPECT_LT(w2[0], 0);
  EXPECT_EQ(unpack_int32_to_int4(w, 1, 8), codes);
  // Ragged row of 11: two words per row, the second padded with nibble 0 (level -8 after offset).
  const auto codes11 = int4_codes({1, 2, 3, 4, 5, 6, 7, -7, -6, -5, -4});
  const auto w11 = pack_int4_to_int32(codes11, 1, 11);
  ASSERT_EQ(w11.size(), 2u);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(w11[1]), 0x00000432u);  // -6, -5, -4 -> nibbles 2, 3, 4; then five 0s
  EXPECT_EQ(unpack_int32_to_int4(w11, 1, 11), codes11);
  // Every level of the full range [-8, 7] survives.
  std::vector<std::uint32_t> all;
  for (int l = -8; l <= 7; ++l) all.push_back(static_cast<std::uint32_t>(l) & 0xFu);
  EXPECT_EQ(unpack_int32_to_int4(pack_int4_to_int32(all, 2, 8), 2, 8), all);
  EXPECT_THROW(pack_int4_to_int32(all, 3, 8), std::invalid_argument);
}

TEST(Pack, NibblesLowFirst) {
  const auto b = pack_nibbles(int4_codes({1, -1, 7, 0, 3}), 1, 5);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], 0xF1);  // 1 low, -1 (0xF) high
  EXPECT_EQ(b[1], 0x07);
  EXPECT_EQ(b[2], 0x03);  // odd row: high nibble padded with 0
  EXPECT_EQ(unpack_nibbles(b, 1, 5), int4_codes({1, -1, 7, 0, 3}));
  // Two rows of 3: each row starts on a byte.
  const auto b2 = pack_nibbles({1, 2, 3, 4, 5, 6}, 2, 3);
  EXPECT_EQ(b2, (std::vector<std::uint8_t>{0x21, 0x03, 0x54, 0x06}));
}

std::vector<double> gaussian(std::int64_t n, std::uint64_t seed) {
  std::vector<double> x(static_cast<std::size_t>(n));
  sim::Rng rng(seed);
  for (auto& v : x) v = rng.normal() * 0.05;
  return x;
}

const char* const kFormats[] = {"bf16",
                                "fp16",
                                "fp8-e4m3/tensor",
                                "fp8-e5m2/channel",
                                "fp8-e4m3/token",
                                "fp8-e4m3/group1x128",
                                "fp8-e4m3/block128x128",
                                "int8/channel",
                                "int4/group32",
                                "int4/group128",
                                "mxfp8",
                                "fp8-e5m2/mx32",
                                "mxfp4",
                                "nvfp4",
                                "hif8",
                                "hif8/tensor",
                                "hif4",
                                "fp4-e2m1/group16"};

void expect_same(const QuantizedTensor& a, const QuantizedTensor& b, const std::string& what) {
  EXPECT_EQ(a.codes, b.codes) << what;
  EXPECT_EQ(a.scale_codes, b.scale_codes) << what;
  ASSERT_EQ(a.scales.size(), b.scales.size()) << what;
  for (std::size_t i = 0; i < a.scales.size(); ++i) {
    EXPECT_TRUE(a.scales[i] == b.scales[i] || (std::isnan(a.scales[i]) && std::isnan(b.scales[i]))) << what << " scale " << i;
  }
  EXPECT_EQ(a.tensor_scale, b.tensor_scale) << what;
  EXPECT_EQ(a.block_rows, b.block_rows) << what;
  EXPECT_EQ(a.block_cols, b.block_cols) << what;
}

TEST(Pack, UnpackIsExactForEveryFormatRaggedShapes) {
  const std::int64_t rows = 131, cols = 203;  // ragged against 128x128, 1x128, 32, 16, 64, 8 and 2
  auto x = gaussian(rows * cols, 3);
  x[17] = 40.0;  // an outlier
  for (const char* name : kFormats) {
    const Format f = parse_format(name);
    const auto q = quantize(f, rows, cols, x);
    for (Int4Layout layout : {Int4Layout::kInt32x8, Int4Layout::kBytes}) {
      const auto back = unpack(pack(q, layout));
      expect_same(q, back, name);
      EXPECT_EQ(dequantize(q), dequantize(back)) << name;
    }
  }
}

// On an aligned shape the packed bytes are exactly what the trait table (Format::bytes) charges, so
// the simulator's memory and transfer figures are those of real storage.
TEST(Pack, StorageBytesEqualTheTraitTable) {
  const std::int64_t rows = 256, cols = 512;
  const auto x = gaussian(rows * cols, 4);
  for (const char* name : kFormats) {
    const Format f = parse_format(name);
    const auto p = pack(quantize(f, rows, cols, x));
    EXPECT_EQ(static_cast<double>(p.storage_bytes()), f.bytes(rows, cols)) << name;
  }
  // INT4 8 per int32 and 2 per byte hold the same bytes.
  const auto q = quantize(parse_format("int4/group32"), rows, cols, x);
  EXPECT_EQ(pack(q, Int4Layout::kInt32x8).data.size(), pack(q, Int4Layout::kBytes).data.size());
}

TEST(Pack, ScalesInTheirStorageType) {
  const auto x = gaussian(2 * 64, 5);
  // MXFP8: one E8M0 byte per 32; the byte is the scale code.
  const auto q = quantize(parse_format("mxfp8"), 2, 64, x);
  const auto p = pack(q);
  ASSERT_EQ(p.scales.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(p.scales[i], q.scale_codes[i]);
  // INT4 g32: BF16 scales, 2 bytes each, little-endian.
  const auto q4 = quantize(parse_format("int4/group32"), 2, 64, x);
  const auto p4 = pack(q4);
  ASSERT_EQ(p4.scales.size(), 8u);
  EXPECT_EQ(static_cast<std::uint32_t>(p4.scales[0] | (p4.scales[1] << 8)), q4.scale_codes[0]);
  // NVFP4: E4M3 bytes plus the FP32 tensor scale's bits.
  const auto qn = quantize(parse_format("nvfp4"), 2, 64, x);
  const auto pn = pack(qn);
  EXPECT_EQ(pn.scales.size(), 8u);
  EXPECT_EQ(static_cast<double>(std::bit_cast<float>(pn.tensor_scale_bits)), qn.tensor_scale);
  // A truncated scale tensor is refused, not read past its end.
  auto bad = pn;
  bad.scales.pop_back();
  EXPECT_THROW(unpack(bad), std::invalid_argument);
  bad = pn;
  bad.data.pop_back();
  EXPECT_THROW(unpack(bad), std::invalid_argument);
}

// Recipes: for every format a built-in recipe names, fake quantisation (the QAT forward, no codes)
// and real quantisation (codes packed to storage, unpacked, dequantised) give identical values.
TEST(Recipes, FakeAndRealQuantisationAgreeForEveryBuiltin) {
  const std::int64_t rows = 67, cols = 300;  // ragged against every block size in use
  auto x = gaussian(rows * cols, 6);
  x[11] = 3.0;  // outliers, positive and negative, and a value past E4M3 range after scaling
  x[400] = -9.5;
  ASSERT_GE(builtin_recipes().size(), 12u);
  for (const Recipe& r : builtin_recipes()) {
    for (const Format& f : {r.linear.weight, r.linear.activation, r.lm_head.weight, r.kv_cache, r.embedding}) {
      std::int64_t fake_sat = -1;
      const auto fake = fake_quantize(f, rows, cols, x, &fake_sat);
      const auto q = quantize(f, rows, cols, x);
      const auto real = dequantize(unpack(pack(q)));
      EXPECT_EQ(fake, real) << r.name << " " << f.str();
      EXPECT_EQ(fake_sat, q.saturated) << r.name << " " << f.str();
    }
  }
  // QAT consistency (slime): the fake-quantised forward of int4-qat-g32 sees exactly the weights the
  // real INT4 W4A16 engine dequantises.
  const Recipe& qat = builtin_recipe("int4-qat-g32");
  const Recipe& w4a16 = builtin_recipe("int4-w4a16-g32");
  EXPECT_EQ(qat.mode, QuantMode::kFake);
  EXPECT_EQ(qat.linear.weight, w4a16.linear.weight);
  EXPECT_EQ(fake_quantize(qat.linear.weight, rows, cols, x), dequantize(quantize(w4a16.linear.weight, rows, cols, x)));
}

}  // namespace
}  // namespace rlsim::models
