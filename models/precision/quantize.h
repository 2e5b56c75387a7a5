// Element codecs: bit-exact encode / decode of one value in each element format of the trait table
// (format.h), round-to-nearest-even with saturation. The scaled quantisers (tensor, channel,
// group, block, MX, NVFP4) are built on these.
//
// Sources, per format:
//  - FP8 E4M3 / E5M2: OCP 8-bit Floating Point Specification (OFP8) v1.0, sec. 5.1 (encodings,
//    table 1: E4M3 bias 7, max 448, NaN = S.1111.111, no infinities; E5M2 bias 15, max 57344, IEEE
//    infinities and NaNs) and sec. 5.2 (conversion: round to nearest even; saturating mode clamps
//    finite overflow and infinities to the largest normal, NaN stays NaN).
//  - FP4 E2M1: OCP Microscaling Formats (MX) v1.0, sec. 5.3.3 (bias 1, values +-{0, 0.5, 1, 1.5, 2,
//    3, 4, 6}, no infinities or NaN; conversion of NaN is implementation-defined: here NaN -> +0 and
//    reported as saturated, since the MX scale carries NaN for its block, sec. 6.3).
//  - E8M0: MX v1.0 sec. 5.4.1 (2^(code - 127), code 0xFF = NaN, no zero, no sign).
//  - BF16 / FP16: IEEE 754-2019 binary16 and the bfloat16 truncation of binary32; with saturation
//    (the rule of every conversion here) finite overflow clamps to the largest finite value.
//  - INT8 / INT4: symmetric integer levels [-127, 127] and [-7, 7] (slime / Kimi-K2 W4A16, see
//    ANCHORS.md), optionally the full two's-complement range [-128, 127] / [-8, 7].
//  - HiF8: HiFloat8, arXiv 2409.16626 sec. 2 (dot-coded exponent width, table 2; sign-magnitude
//    exponent with implicit leading bit; denormals 2^-22..2^-16; specials of sec. 2.3: one zero
//    0x00, NaN 0x80, +-Inf 0x6F / 0xEF; largest finite 2^15). The paper's default rounding is
//    ties-away (TA, sec. 3); rlsim rounds ties to even like every other element here. Where a
//    binade has no mantissa bit (the denormals) a tie goes to the larger power of two; half the
//    smallest denormal (2^-23) rounds to 0.
//  - HiF4: HiFloat4, arXiv 2602.11287, format definition: 64-element units of S1E1M2 elements (bias 1, values
//    +-{0, .25, .5, .75, 1, 1.25, 1.5, 1.75}, no NaN / Inf) with 32 bits of metadata: an E6M2
//    level-1 scale and one-bit micro-exponents per 8 and per 4 elements (see quantize()).
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include "models/precision/format.h"

namespace rlsim::models {

/// Layout of a float element (bf16, fp16, fp8-e4m3, fp8-e5m2, fp4-e2m1, hif4): its trait table
/// entry. Throws std::invalid_argument for other elements.
FloatLayout float_layout(Element e);

/// Options of a conversion.
struct CodecOptions {
  bool full_int_range = false;  // int elements: [-2^(b-1), 2^(b-1)-1] instead of symmetric +-(2^(b-1)-1)
};

/// Encodes `x` into the element's bit pattern (low `bits` bits of the result). Round to nearest,
/// ties to even; finite overflow and infinities saturate to the largest finite magnitude (except
/// in fp32, which is exact or overflows to Inf as IEEE); NaN becomes the format's canonical NaN
/// (positive, all-ones payload) or +0 where the format has none. For int elements the result is
/// the two's-complement level. `*saturated`, when given, is set when the value was clamped or had
/// no encoding. E8M0 rounds a positive value down to a power of two (floor(log2 x), the MX v1.0
/// sec. 6.3 scale rule) and clamps the exponent to [-127, 127]; it throws std::invalid_argument for
/// a value <= 0 (a scale is a positive power of two). hif8: -0 encodes as 0x00 (one zero); hif4 is
/// the bare S1E1M2 element (its block scale is applied by quantize()).
std::uint32_t encode(Element e, double x, bool* saturated = nullptr, const CodecOptions& opt = {});

/// Decodes a bit pattern (only the low `bits` bits are read) into its value; NaN patterns decode
/// to a quiet NaN, E5M2 / IEEE infinities to +-Inf. int elements decode two's complement.
double decode(Element e, std::uint32_t code);

/// decode(encode(x)): the value `x` becomes in format `e`.
double round_to(Element e, double x, bool* saturated = nullptr, const CodecOptions& opt = {});

/// Largest finite magnitude of `e` (the trait table's max_finite; for int elements with
/// full_int_range the negative end is one further).
double max_finite(Element e);

/// A [rows, cols] tensor quantised to a Format (cols = the inner, reduction dimension). Scales
/// are per block of block_rows x block_cols elements, the block grid row-major and ceil-divided
/// (a ragged edge block gets its own scale over the elements it has).
struct QuantizedTensor {
  Format format;
  std::int64_t rows = 0, cols = 0;
  std::int64_t block_rows = 1, block_cols = 1;
  std::vector<std::uint32_t> codes;        // rows x cols element codes (low bits)
  std::vector<double> scales;              // decoded scale of each block (1 for unscaled; HiF4: the level-1 scale)
  std::vector<std::uint32_t> scale_codes;  // each scale in its storage element (fp32 bits, bf16, e8m0, e4m3;
                                           // HiF4: the 32-bit metadata word)
  double tensor_scale = 1.0;               // NVFP4 second-level FP32 scale, else 1
  std::int64_t saturated = 0;              // elements clamped or without an encoding
};

/// Round to nearest even BF16 of an FP32 value, Inf and NaN unchanged (a value that rounds past
/// the largest BF16 becomes Inf, where encode() saturates); branch-free so that loops over it
/// vectorise. The runtime's hidden-state rounding.
inline float round_bf16(float x) {
  const auto u = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  return std::bit_cast<float>((u & 0x7F800000u) == 0x7F800000u ? u : r);
}

/// The BF16 bits of an FP32 value that is exactly a BF16 value (its high 16 bits).
inline std::uint16_t bf16_bits(float v) { return static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(v) >> 16); }

/// Quantises `x` (row-major, rows x cols values). Scale rules:
///  - tensor / channel / token / group1xN / blockMxN: FP32 scale = amax / max_finite(element)
///    (DeepSeek-V3 sec. 3.3: amax / 448 for E4M3); groupN: the same, stored in BF16 (slime W4A16:
///    max|w| / 7 for symmetric INT4); a block of zeros gets scale 1.
///  - mx32 (OCP MX v1.0 sec. 6.3): shared exponent floor(log2 amax) - emax(element), emax the
///    exponent of the element's largest normal (E4M3 8, E5M2 15, E2M1 2), stored as E8M0 and
///    clamped to [-127, 127]; elements beyond the element's range saturate; a block holding a
///    NaN gets the NaN scale 0xFF.
///  - nv16 (NVIDIA NVFP4): FP32 tensor scale = amax(tensor) / (448 x 6); per 16 elements an E4M3
///    scale = round_e4m3(amax(block) / 6 / tensor scale); elements = E2M1(x / (scale x tensor scale)).
///  - hif8 with any FP32 / BF16 scaling: a power-of-two scale 2^(floor(log2 amax) - 3), which puts
///    the block's amax in [8, 16), the top of HiF8's 3-mantissa-bit region (tapered precision: mapping
///    the amax to 2^15 would leave one mantissa bit everywhere).
///  - hif4 (no scaling of its own; arXiv 2602.11287, format definition): per 64 elements of a row, level-1
///    scale s = E6M2(amax64 / 7) (bias 48, range [2^-48, 49152], 0xFF NaN); per 8 elements
///    e8 = [amax8 / s >= 4]; per 4 elements e4 = [amax4 / (s 2^e8) >= 2]; element S1E1M2(x / (s
///    2^(e8 + e4))). scale_codes holds the metadata word: bits 31..24 E6M2, 23..16 the e8 bits
///    (bit 16 + j for elements 8j..8j+7), 15..0 the e4 bits (bit k for elements 4k..4k+3).
/// Unscaled e8m0 rounds each value down to a power of two (encode()). Throws std::invalid_argument
/// when x.size() != rows x cols, for non-positive shapes, for e8m0 or hif4 with a scaling, and (from
/// encode()) for e8m0 of a value <= 0.
QuantizedTensor quantize(const Format& f, std::int64_t rows, std::int64_t cols, const std::vector<double>& x);

/// Fast path of quantize() for FP32 input (BF16 weights widened, the runtime's FP32 tensors): the
/// same codes, scales, scale codes, tensor scale and saturation count as the double version, bit
/// for bit (tested on every format with ragged shapes, outliers, NaN and Inf), computed with
/// integer round-to-nearest-even on the bits of x / scale instead of libm. `rlsim bench quantize`
/// measures it. Throws as the double version.
QuantizedTensor quantize(const Format& f, std::int64_t rows, std::int64_t cols, std::span<const float> x);

/// quantize() of rows that are a slice of a larger tensor, for NVFP4 (nv16): the FP32 tensor scale
/// comes from `tensor_amax`, the largest finite |value| of the whole tensor, instead of the
/// slice's, so that slices quantised apart (on several threads) give exactly the codes and scales
/// of quantising the whole tensor at once (nv16's block scales are row-local). Every other
/// scaling ignores tensor_amax. Throws as quantize().
QuantizedTensor quantize_slice(const Format& f, std::int64_t rows, std::int64_t cols, std::span<const float> x,
                               float tensor_amax);

/// dequantize(quantize(f, rows, cols, x)) rounded to FP32, in place: the values a tensor of FP32
/// activations stands for once quantised (the runtime's activation rounding). MX formats (mx32
/// scaling: a power-of-two E8M0 scale, OCP MX v1.0 sec. 5) of a binary float element of at most
/// 8 bits (E4M3, E5M2, E2M1) take a path that never leaves FP32: x times 2^-shared is exact in
/// FP32 wherever the element can tell it from 0, its rounding to the element's grid is an integer
/// round-to-nearest-even on the bits (normal) or an addition and subtraction of 2^(emin - m + 23)
/// (subnormal), and the product with 2^shared is exact; a tensor with a NaN takes the double path.
/// The same bits either way (tested on each of the three). Throws as quantize().
void fake_quantize(const Format& f, std::int64_t rows, std::int64_t cols, float* x);

/// One row of n = x.size() FP32 values in NVFP4 (f: fp4-e2m1 with nv16 scaling) as the runtime's
/// W4A4 GEMV takes it: doubled[c] = twice the E2M1 value of x[c]'s code (an integer in [-12, 12]),
/// scales[b] the decoded E4M3 scale of 16-column block b (ceil(n / 16) of them); returns the FP32
/// tensor scale. Bit for bit what quantize(f, 1, n, x) gives (tested), without its codes: the same
/// roundings as FastFloatEncoder, on values in double registers, 8 blocks' scales at a time; a row
/// with a NaN or whose tensor scale underflows FP32 takes quantize() itself. Throws
/// std::invalid_argument for another format or an empty row.
double quantize_nvfp4_doubled(const Format& f, std::span<const float> x, std::int8_t* doubled, double* scales);

/// The value of one block's scale code under format `f`: decode() of the scaling's storage element
/// (FP32, BF16, E8M0, E4M3), HiF4's E6M2 level-1 scale (bits 31..24 of the metadata word), 1 for an
/// unscaled format.
double decode_scale(const Format& f, std::uint32_t code);

/// The values a quantised tensor stands for: element value x block scale x tensor scale (HiF4:
/// x its micro-exponents), NaN where the scale is NaN. Exact in double (every product of an
/// element and its scales has at most 53 significant bits).
std::vector<double> dequantize(const QuantizedTensor& q);

/// Fake quantisation (the QAT forward: quantise-dequantise in place, no codes stored). Computes
/// each block's scale with the same rule as quantize(), then round_to(element, x / scale) x scale
/// per value; it must equal dequantize(quantize(...)) value for value (tested on every built-in
/// recipe's formats, through packing). `saturated`, when given, receives the count of clamped
/// values. Throws as quantize().
std::vector<double> fake_quantize(const Format& f, std::int64_t rows, std::int64_t cols, const std::vector<double>& x,
                                  std::int64_t* saturated = nullptr);

/// Signal-to-quantisation-noise ratio in dB: 10 log10(sum x^2 / sum (x - y)^2); +Inf when exact.
double sqnr_db(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace rlsim::models
