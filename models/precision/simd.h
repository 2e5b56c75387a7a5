// SIMD intrinsics for the kernels that have vector paths (quantize.cc, runtime/kernels.cc,
// runtime/gemm.cc): include this header instead of <immintrin.h>. simd_target.h says which
// paths a build compiles (RLSIM_AVX512, RLSIM_AVX2, ...). For AVX2 builds it defines V16: the 16
// FP32 lanes of the AVX-512 kernels as two 8-lane registers, so that an AVX2 kernel does each
// lane's arithmetic exactly as its AVX-512 twin and gives the same bits.
#pragma once

#include <bit>
#include <cstdint>

#include "models/precision/simd_target.h"

namespace rlsim::models::simd {
/// An E4M3 code in FP32 bits without a table: its byte sign-extended, shifted left by
/// kE4M3Fp32Shift and masked with kE4M3Fp32Mask puts the sign at bit 31 and exponent and mantissa
/// at bits 26..20, which read as an FP32 are 2^-120 (1 / kE4M3Fix) times the code's value,
/// subnormals included (E4M3's bias 7 against FP32's 127: OCP 8-bit Floating Point Specification
/// (OFP8) rev. 1.0). In 16-bit lanes (the upper half of those bits) the shift is 4 and the mask
/// 0x87F0. Every E4M3 decode of the kernels (scalar, AVX-512 and AVX2) uses these.
inline constexpr int kE4M3Fp32Shift = 20;
inline constexpr std::uint32_t kE4M3Fp32Mask = 0x87F00000u;
inline constexpr int kE4M3Fp16Shift = kE4M3Fp32Shift - 16;
inline constexpr std::uint16_t kE4M3Fp16Mask = kE4M3Fp32Mask >> 16;
inline constexpr float kE4M3Fix = 0x1p120f;

/// 2^k as an FP32 value for k in [-149, 127] (subnormal below -126), from its bits (IEEE 754
/// binary32: biased exponent k + 127, or for a subnormal the bit k + 149 of the significand):
/// exact, and no libm call as std::ldexp makes.
inline float pow2f(int k) {
  return k >= -126 ? std::bit_cast<float>(static_cast<std::uint32_t>(k + 127) << 23) : std::bit_cast<float>(1u << (k + 149));
}
}  // namespace rlsim::models::simd

#ifdef RLSIM_AVX512
// GCC 12's AVX-512 intrinsics initialise results with _mm512_undefined_*(), which -Wuninitialized
// reports wherever they inline (GCC bug 105593, a false positive fixed in GCC 13). The pragma stays
// in effect for the rest of the including translation unit, where the intrinsics are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

namespace rlsim::models::simd {
/// acc plus, in each 32-bit lane, the products of the lane's two BF16 elements of a and b:
/// VDPBF16PS, or where the build lacks AVX512-BF16 two FP32 FMAs (BF16 -> FP32 is a shift) in the
/// instruction's order: the odd (upper) element's product first, then the even one's, each
/// rounded to FP32 (Intel SDM vol. 2C, VDPBF16PS; on a Zen 4 VM, 2026-11-29, VDPBF16PS equalled
/// that order in all of 3.2 M random lanes and the other order in 92 %). So the builds give the
/// same bits, except where VDPBF16PS flushes a BF16 denormal input or an FP32 denormal sum to zero.
inline __m512 bf16_pair_dot(__m512 acc, __m512i a, __m512i b) {
#ifdef RLSIM_AVX512_BF16
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
#else
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(a, hi)), _mm512_castsi512_ps(_mm512_and_si512(b, hi)), acc);
  return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(a, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(b, 16)), acc);
#endif
}
}  // namespace rlsim::models::simd
#elif defined(RLSIM_AVX2)
#include <immintrin.h>

namespace rlsim::models::simd {

/// 16 FP32 lanes as two AVX2 registers: lanes 0-7 in `lo`, 8-15 in `hi` (the lane order of an
/// AVX-512 register). Every operation is lane-wise except reduce_add.
struct V16 {
  __m256 lo, hi;
};

inline V16 zero16() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V16 set1(float v) { return {_mm256_set1_ps(v), _mm256_set1_ps(v)}; }
inline V16 load16(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline void store16(float* p, V16 v) {
  _mm256_storeu_ps(p, v.lo);
  _mm256_storeu_ps(p + 8, v.hi);
}
/// a * b + c, one rounding per lane (VFMADD231PS, as _mm512_fmadd_ps).
inline V16 fmadd(V16 a, V16 b, V16 c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
inline V16 mul(V16 a, V16 b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline V16 add(V16 a, V16 b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
/// bf16_pair_dot (the AVX-512 section) on pairs already split into FP32 values: acc plus a_odd
/// b_odd, then plus a_even b_even, VDPBF16PS's order in every lane.
inline V16 bf16_pair_fmadd(V16 acc, V16 a_odd, V16 b_odd, V16 a_even, V16 b_even) {
  return fmadd(a_even, b_even, fmadd(a_odd, b_odd, acc));
}

/// The first n (0..16) of 16 floats from p, the other lanes 0; reads nothing past p + n.
inline V16 load16_first(const float* p, std::int64_t n) {
  if (n >= 16) return load16(p);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i m_lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lane);
  const __m256i m_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n) - 8), lane);
  return {_mm256_maskload_ps(p, m_lo), _mm256_maskload_ps(p + 8, m_hi)};
}

/// The sum of the 16 lanes in the order of GCC's _mm512_reduce_add_ps (avx512fintrin.h,
/// __MM512_REDUCE_OP): (lanes 8-15 + lanes 0-7), then the upper 4 of those plus the lower 4, then
/// lanes {2, 3} added to {0, 1}, then lane 0 + lane 1. The AVX-512 kernels' results are therefore
/// reproduced bit for bit.
inline float reduce_add(V16 v) {
  const __m256 t3 = _mm256_add_ps(v.hi, v.lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, _MM_SHUFFLE(1, 1, 1, 1)));
}

/// The BF16 value in the low 16 bits of each 32-bit lane of v as FP32 (moved up: exact).
inline __m256 bf16_low_halves(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
/// The BF16 value in the high 16 bits of each 32-bit lane of v as FP32 (the low bits cleared: exact).
inline __m256 bf16_high_halves(__m256i v) {
  return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

/// 16 FP32 values from 16 BF16 bits at p (a shift: exact).
inline V16 load16_bf16(const void* p) {
  const __m128i a = _mm_loadu_si128(static_cast<const __m128i*>(p));
  const __m128i b = _mm_loadu_si128(static_cast<const __m128i*>(p) + 1);
  return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16)),
          _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16))};
}
/// 16 FP32 values from 16 IEEE binary16 values at p (F16C VCVTPH2PS: exact).
inline V16 load16_f16(const void* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p))),
          _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p) + 1))};
}
/// The E4M3 codes of 16 bytes as the kernels read them (kE4M3Fp32Mask above: 2^-120 times each
/// code's value); lanes 0-7 from bytes 0-7.
inline V16 e4m3_scaled_down16(__m128i bytes) {
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(kE4M3Fp32Mask));
  auto half = [mask](__m128i b8) {
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(_mm256_cvtepi8_epi32(b8), kE4M3Fp32Shift), mask));
  };
  return {half(bytes), half(_mm_unpackhi_epi64(bytes, bytes))};
}

/// table[idx & 15] per lane for a 16-entry FP32 table held as {table[0..7], table[8..15]}
/// (_mm512_permutexvar_ps of a 16-entry table): VPERMPS on the low 3 index bits, bit 3 choosing
/// the half (VBLENDVPS on the sign bit of idx << 28).
inline __m256 lookup16(__m256i idx, V16 table) {
  const __m256 from_lo = _mm256_permutevar8x32_ps(table.lo, idx);
  const __m256 from_hi = _mm256_permutevar8x32_ps(table.hi, idx);
  return _mm256_blendv_ps(from_lo, from_hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

}  // namespace rlsim::models::simd
#endif
