// Which SIMD kernels a translation unit compiles, from the compiler's target macros alone (no
// intrinsics: public headers include this; kernels include simd.h, which includes it):
//  - RLSIM_AVX512: AVX-512 F + BW + VL + DQ (-march=native on Skylake-X, Ice Lake, Zen 4 and
//    later); with RLSIM_AVX512_BF16 when the target also has AVX512-BF16, and RLSIM_AVX512_VNNI
//    when it also has AVX512-VNNI and AVX512-VBMI (Ice Lake, Zen 4 and later), and RLSIM_GFNI
//    when it also has GFNI (Ice Lake, Zen 4 and later: GF2P8AFFINEQB unpacks 4-bit codes);
//  - otherwise RLSIM_AVX2: AVX2 + FMA + F16C (Haswell, Zen 1-3 and later); with RLSIM_AVX_VNNI
//    when the target also has AVX-VNNI (Alder Lake, Sierra Forest: VEX-encoded VPDPBUSD on
//    256-bit registers, without AVX-512);
//  - RLSIM_SIMD16 with either: the 16-lane GEMV and GEMM kernels (one AVX-512 register, or two
//    AVX2 registers per 16 lanes).
// Without any, the callers compile their portable scalar loops (RLSIM_NATIVE off, the sanitizer
// build).
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
#define RLSIM_AVX512 1
#if defined(__AVX512BF16__)
#define RLSIM_AVX512_BF16 1
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
#define RLSIM_AVX512_VNNI 1
#endif
#if defined(__GFNI__)
#define RLSIM_GFNI 1
#endif
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define RLSIM_AVX2 1
#if defined(__AVXVNNI__)
#define RLSIM_AVX_VNNI 1
#endif
#endif

#if defined(RLSIM_AVX512) || defined(RLSIM_AVX2)
#define RLSIM_SIMD16 1
#endif
