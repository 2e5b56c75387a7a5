// The multi-token linear of the prefill (trainer) path, read straight from the packed weights.
//
// A prefill multiplies T tokens' activations [T, K] by a weight [N, K] held in its storage format
// (kernels.h). The weight is decoded one panel of rows at a time into a per-thread buffer, and the
// panel is reused across every token of the call, so decoding costs O(N K) against the O(T N K)
// products and no FP32 copy of the weights is kept. Two kernels:
//  - BF16 dot products, when the weight's codes and the activation format's codes are exactly
//    BF16 values (BF16, E4M3, E5M2, E2M1, INT4, INT8): codes are multiplied in pairs into FP32
//    (VDPBF16PS where the build targets AVX512-BF16, Intel SDM vol. 2 "VDPBF16PS"; AMX tiles where
//    the CPU has them, gemm_uses_amx(); else the same products in FP32 FMAs, on AVX-512 or AVX2),
//    each joint scale block's sum is multiplied by its weight block scale times its activation
//    block scale and added in FP32. Where a block scale times a code is
//    itself exactly a BF16 value (NVFP4's E4M3 scales on E2M1 codes), the scale is folded into the
//    codes instead and only the tensor scales multiply each row's sum. W8A8 recipes quantise the
//    activations per block as their rollout engine does (DeepSeek-V3 sec. 3.3: 1x128 groups; OCP
//    MX v1.0: 32-element blocks); W4A16 keeps them in BF16.
//  - FP32 FMAs on the dequantised weights (PackedWeight::decode_rows_f32) and the activations
//    rounded to their format, for every other pair (fp32, fp16, hif8, scaled bf16, ...).
// Both compute the products of the dequantised weights and activations that the GEMV kernels and
// the reference quantisers define; they differ from them only in FP32 rounding (summation order,
// and for the BF16 kernel where the scales are applied).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "models/precision/quantize.h"
#include "models/runtime/kernels.h"

namespace rlsim::models {

/// Whether a linear's activation format has elements that are exactly BF16 values and scales the
/// BF16 kernel applies per block along the reduction dimension: unscaled bf16, or fp8-e4m3,
/// fp8-e5m2, fp4-e2m1, int4 or int8 unscaled or scaled per tensor, token, group1xN, mx32 or nv16.
bool activation_codes_in_bf16(const Format& f);

/// Activations [tokens, cols] of one linear call, rounded to the linear's activation format and
/// laid out in tiles of kTile tokens, so that the GEMM reads 16 tokens of one column as one vector
/// and a tile's columns as one sequential stream:
///  - BF16 kernel (bf16 == true): pairs[pair_index(t, k / 2)] holds the BF16 codes of columns k
///    and k + 1 of token t (k even, k in the low half); scales[scale_index(t, b)] the FP32 scale
///    of activation block b (block_cols columns; 1 when unscaled). NVFP4 codes are E2M1 value x
///    E4M3 block scale (exact in BF16) in one block per token whose scale is the tensor scale.
///  - FP32 kernel: values[value_index(t, k)], the rounded value.
/// tpad = tokens rounded up to kTile, kpad = cols rounded up to 32; padding is zero.
struct GemmActivations {
  static constexpr std::int64_t kTile = 64;  // tokens per tile (4 vectors of 16 FP32 lanes)

  /// Rounds x [tokens, cols] (row-major FP32) to `f` as the rest of the runtime rounds a
  /// multi-token tensor (per-tensor scales over the whole call) and lays it out for the BF16
  /// kernel (requires activation_codes_in_bf16(f); std::invalid_argument otherwise) or the FP32
  /// kernel. Rows are split among the OpenMP threads.
  GemmActivations(const float* x, std::int64_t tokens, std::int64_t cols, const Format& f, bool bf16);

  std::size_t pair_index(std::int64_t t, std::int64_t kp) const {
    return static_cast<std::size_t>(((t / kTile) * (kpad / 2) + kp) * kTile + t % kTile);
  }
  std::size_t value_index(std::int64_t t, std::int64_t k) const {
    return static_cast<std::size_t>(((t / kTile) * kpad + k) * kTile + t % kTile);
  }
  std::size_t scale_index(std::int64_t t, std::int64_t b) const {
    return static_cast<std::size_t>(((t / kTile) * blocks + b) * kTile + t % kTile);
  }

  bool bf16 = false;
  std::int64_t tokens = 0, cols = 0, tpad = 0, kpad = 0;
  std::int64_t block_cols = 0;  // columns per activation scale block (cols when one per token)
  std::int64_t blocks = 1;      // scale blocks per token
  std::vector<std::uint32_t> pairs;
  std::vector<float> scales;
  std::vector<float> values;
};

/// Whether the BF16 kernel can multiply weight `w` by activations in format `f`: both have BF16
/// codes and the two scale block widths nest (one divides the other, or spans the row).
bool gemm_bf16_applies(const PackedWeight& w, const Format& f);

/// One multi-token linear: y[t * ldy + r] = sum_k w(r, k) x(t, k) for t < x->tokens, r < w->rows().
/// x must be laid out for the kernel gemm_bf16_applies() chooses (x->bf16 equal to it) and have
/// x->cols == w->cols(); std::invalid_argument otherwise.
struct GemmJob {
  const PackedWeight* w = nullptr;
  const GemmActivations* x = nullptr;
  float* y = nullptr;
  std::int64_t ldy = 0;
};

/// Runs the jobs (q/k/v of a layer, gate and up, ...) in one OpenMP parallel region, panels of
/// weight rows split among the threads in contiguous ranges of equal work.
void gemm(std::span<const GemmJob> jobs);

/// Whether the BF16 kernel uses the AVX512-BF16 dot-product instruction in this build.
bool gemm_uses_avx512_bf16();

/// Whether the BF16 kernel runs on Intel AMX tiles (TDPBF16PS, Intel Architecture Instruction Set
/// Extensions Programming Reference ch. 3): AVX-512 builds on a CPU with AMX-TILE and AMX-BF16
/// whose kernel grants the process the tile state, unless gemm_allow_amx(false). Chosen at run
/// time, for joint scale blocks of a multiple of 32 columns (every built-in recipe) or one block
/// per row. The products are the same; the FP32 sums round differently from the AVX-512 kernel's
/// (the tile unit adds in its own order and flushes denormal inputs and results to zero), within
/// the same bound, and a token's sums still do not depend on the other tokens of the call.
bool gemm_uses_amx();

/// Allows (the default) or forbids the AMX kernel, for all threads (benchmarks compare the two).
void gemm_allow_amx(bool allow);

/// For tests: with `on`, the BF16 kernel runs the AMX kernel's code with each tile instruction
/// replaced by its scalar definition (gemm_amx_tiles.inc), on any AVX-512 Linux build, so that
/// the kernel's tiling and scaling are tested on hosts without AMX (scalar code: for tests only).
/// Returns false, changing nothing, where the build has no AMX kernel and `on`.
bool gemm_emulate_amx(bool on);

}  // namespace rlsim::models
