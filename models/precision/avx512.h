// AVX-512 intrinsics for the kernels that have an AVX-512 path (quantize.cc, runtime/kernels.cc,
// runtime/gemm.cc): include this header instead of <immintrin.h>. It defines RLSIM_AVX512 when the
// compiler targets AVX-512 F + BW + VL + DQ (-march=native on Skylake-X, Ice Lake, Zen 4 and later),
// RLSIM_AVX512_BF16 when it also targets AVX512-BF16, and RLSIM_AVX512_VNNI when it also targets
// AVX512-VNNI and AVX512-VBMI (Ice Lake, Zen 4 and later); without them the callers compile their
// portable scalar loops.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
// GCC 12's AVX-512 intrinsics initialise results with _mm512_undefined_*(), which -Wuninitialized
// reports wherever they inline (GCC bug 105593, a false positive fixed in GCC 13). The pragma stays
// in effect for the rest of the including translation unit, where the intrinsics are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define RLSIM_AVX512 1
#if defined(__AVX512BF16__)
#define RLSIM_AVX512_BF16 1
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
#define RLSIM_AVX512_VNNI 1
#endif
#endif
