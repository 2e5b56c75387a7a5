// Element codecs against the specs (ggml style: exhaustive code round trips, spec table values,
// ties-to-even, saturation, NaN / Inf behaviour).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "models/precision/quantize.h"

namespace rlsim::models {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();

// Every code decodes to a value that encodes back to the same code (NaNs to the canonical NaN,
// -0 stays -0), and the finite values are strictly increasing in code order per sign.
void exhaustive_round_trip(Element e, int bits) {
  std::set<double> values;
  for (std::uint32_t c = 0; c < (1u << bits); ++c) {
    const double v = decode(e, c);
    bool sat = false;
    const std::uint32_t back = encode(e, v, &sat);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(decode(e, back))) << "code " << c;
      continue;
    }
    if (std::isinf(v)) {  // saturating conversion: an infinity becomes the largest finite value
      EXPECT_TRUE(sat);
      EXPECT_EQ(decode(e, back), std::copysign(max_finite(e), v));
      continue;
    }
    EXPECT_FALSE(sat) << traits(e).name << " code " << c << " value " << v;
    EXPECT_EQ(back, c) << traits(e).name << " code " << c << " value " << v;
    if (!(v == 0 && std::signbit(v))) {
      EXPECT_TRUE(values.insert(v).second) << "duplicate value " << v;
    }
  }
}

TEST(Codec, Fp8E4M3AllCodesRoundTrip) { exhaustive_round_trip(Element::kFp8E4M3, 8); }
TEST(Codec, Fp8E5M2AllCodesRoundTrip) { exhaustive_round_trip(Element::kFp8E5M2, 8); }
TEST(Codec, Fp4E2M1AllCodesRoundTrip) { exhaustive_round_trip(Element::kFp4E2M1, 4); }
TEST(Codec, Fp16AllCodesRoundTrip) { exhaustive_round_trip(Element::kFp16, 16); }
TEST(Codec, Bf16AllCodesRoundTrip) { exhaustive_round_trip(Element::kBf16, 16); }
TEST(Codec, Int8AndInt4AllCodesRoundTrip) {
  for (std::uint32_t c = 0; c < 256; ++c) {
    if (c == 0x80) continue;  // -128: outside the symmetric range
    EXPECT_EQ(encode(Element::kInt8, decode(Element::kInt8, c)), c);
  }
  for (std::uint32_t c = 0; c < 16; ++c) {
    if (c == 0x8) continue;  // -8
    EXPECT_EQ(encode(Element::kInt4, decode(Element::kInt4, c)), c);
  }
  EXPECT_EQ(encode(Element::kInt4, -8.0, nullptr, CodecOptions{true}), 0x8u);
}

// OFP8 v1.0 table 1 and MX v1.0 sec. 5.3.3 / 5.4.1.
TEST(Codec, SpecTableValues) {
  EXPECT_EQ(decode(Element::kFp8E4M3, 0x7E), 448.0);    // S.1111.110
  EXPECT_TRUE(std::isnan(decode(Element::kFp8E4M3, 0x7F)));  // S.1111.111
  EXPECT_TRUE(std::isnan(decode(Element::kFp8E4M3, 0xFF)));
  EXPECT_EQ(decode(Element::kFp8E4M3, 0x01), std::ldexp(1.0, -9));  // smallest subnormal
  EXPECT_EQ(decode(Element::kFp8E4M3, 0x08), std::ldexp(1.0, -6));  // smallest normal
  EXPECT_EQ(decode(Element::kFp8E5M2, 0x7B), 57344.0);
  EXPECT_EQ(decode(Element::kFp8E5M2, 0x7C), kInf);
  EXPECT_TRUE(std::isnan(decode(Element::kFp8E5M2, 0x7D)));
  EXPECT_EQ(decode(Element::kFp8E5M2, 0x01), std::ldexp(1.0, -16));
  const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (std::uint32_t c = 0; c < 8; ++c) {
    EXPECT_EQ(decode(Element::kFp4E2M1, c), e2m1[c]);
    EXPECT_EQ(decode(Element::kFp4E2M1, c | 8u), -e2m1[c]);
  }
  EXPECT_TRUE(std::isnan(decode(Element::kE8M0, 0xFF)));
  EXPECT_EQ(decode(Element::kE8M0, 127), 1.0);
  EXPECT_EQ(decode(Element::kE8M0, 0), std::ldexp(1.0, -127));
  EXPECT_EQ(decode(Element::kE8M0, 254), std::ldexp(1.0, 127));
  EXPECT_EQ(decode(Element::kFp16, 0x7BFF), 65504.0);
  EXPECT_EQ(decode(Element::kBf16, 0x7F7F), max_finite(Element::kBf16));
  for (Element e : {Element::kFp8E4M3, Element::kFp8E5M2, Element::kFp4E2M1, Element::kFp16, Element::kBf16}) {
    bool sat = false;
    EXPECT_EQ(round_to(e, 1e300, &sat), max_finite(e)) << traits(e).name;
    EXPECT_TRUE(sat);
  }
}

TEST(Codec, TiesToEven) {
  // E4M3 between 1 (mantissa 000) and 1.125 (001): the midpoint goes to the even mantissa, 1.
  EXPECT_EQ(round_to(Element::kFp8E4M3, 1.0625), 1.0);
  EXPECT_EQ(round_to(Element::kFp8E4M3, 1.1875), 1.25);      // 1.125 | 1.25 midpoint -> 010
  EXPECT_EQ(round_to(Element::kFp8E4M3, 1.0625000001), 1.125);
  // E2M1: 2.5 lies between 2 (even) and 3 -> 2; 3.5 between 3 and 4 (even) -> 4; 5 between 4 and 6 -> 4.
  EXPECT_EQ(round_to(Element::kFp4E2M1, 2.5), 2.0);
  EXPECT_EQ(round_to(Element::kFp4E2M1, 3.5), 4.0);
  EXPECT_EQ(round_to(Element::kFp4E2M1, 5.0), 4.0);
  EXPECT_EQ(round_to(Element::kFp4E2M1, 0.25), 0.0);   // subnormal tie to even (0)
  EXPECT_EQ(round_to(Element::kFp4E2M1, 0.75), 1.0);   // tie between 0.5 (odd) and 1 (even)
  EXPECT_EQ(round_to(Element::kInt4, 2.5), 2.0);
  EXPECT_EQ(round_to(Element::kInt4, -3.5), -4.0);
  EXPECT_EQ(round_to(Element::kBf16, 1.0 + std::ldexp(1.0, -8)), 1.0);  // half an ulp of bf16 at 1
  // Rounding just above the largest value stays finite (E4M3: 464 is the midpoint to the NaN code).
  bool sat = true;
  EXPECT_EQ(round_to(Element::kFp8E4M3, 450, &sat), 448.0);
  EXPECT_FALSE(sat);
  EXPECT_EQ(round_to(Element::kFp8E4M3, 470, &sat), 448.0);
  EXPECT_TRUE(sat);
}

TEST(Codec, NanAndInfinityPerFormat) {
  bool sat = false;
  EXPECT_EQ(encode(Element::kFp8E4M3, kNan), 0x7Fu);
  EXPECT_EQ(round_to(Element::kFp8E4M3, kInf, &sat), 448.0);  // no infinities: saturate
  EXPECT_TRUE(sat);
  EXPECT_EQ(round_to(Element::kFp8E4M3, -kInf), -448.0);
  EXPECT_TRUE(std::isnan(round_to(Element::kFp8E5M2, kNan)));
  EXPECT_EQ(round_to(Element::kFp8E5M2, kInf, &sat), 57344.0);  // saturating conversion (OFP8 sec. 5.2)
  EXPECT_TRUE(sat);
  EXPECT_EQ(round_to(Element::kFp4E2M1, kNan, &sat), 0.0);  // no NaN encoding
  EXPECT_TRUE(sat);
  EXPECT_EQ(round_to(Element::kInt8, kNan, &sat), 0.0);
  EXPECT_TRUE(sat);
  EXPECT_EQ(encode(Element::kE8M0, kNan), 0xFFu);
  EXPECT_EQ(encode(Element::kE8M0, 3.0), 128u);  // floor(log2 3) = 1
  EXPECT_THROW(encode(Element::kE8M0, 0.0), std::invalid_argument);
  EXPECT_EQ(round_to(Element::kFp32, kInf), kInf);
  EXPECT_TRUE(std::signbit(round_to(Element::kFp8E4M3, -0.0)));
  EXPECT_THROW(encode(Element::kHif8, 1.0), std::invalid_argument);
}

// Relative error of round-to-nearest is at most half an ulp: 2^-(m+1) for normal values.
TEST(Codec, NormalRangeErrorBound) {
  for (Element e : {Element::kFp8E4M3, Element::kFp8E5M2, Element::kFp4E2M1, Element::kFp16, Element::kBf16}) {
    const auto l = float_layout(e);
    const double min_normal = std::ldexp(1.0, 1 - l.bias);
    const double bound = std::ldexp(1.0, -(l.man_bits + 1));
    for (double x = min_normal; x < max_finite(e); x *= 1.0137) {
      EXPECT_LE(std::fabs(round_to(e, x) - x) / x, bound * (1 + 1e-12)) << traits(e).name << " x " << x;
    }
  }
}

}  // namespace
}  // namespace rlsim::models
