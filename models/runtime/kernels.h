// Packed weights and the batch-1 GEMV kernels of the decode (rollout) path.
//
// A rollout engine at batch 1 is bound by reading the weights: the linears of SmolLM2-135M are
// 212 MB in BF16, 106 MB in FP8 and 60 MB in INT4 g32, plus a 57 MB BF16 lm_head. These kernels read
// each weight in its storage format once per token and dequantise in registers:
//  - element to FP32 (bf16: shift; fp16: F16C; fp8-e4m3: its bits moved into an FP32 whose
//    exponent is off by 2^120, folded into the block scale; 4-bit codes: a 16-entry table),
//  - times the block scale (FP32, BF16, E8M0 or E4M3 as stored),
//  - FMA with the activation into FP32 accumulators.
// The products are the dequantised weight values of models/precision/quantize.h times the
// activation, so a kernel differs from the Eigen GEMM of the prefill path only in FP32
// summation order. The fp8-e4m3 kernels instead sum each scale block's code values times the
// activation and multiply that sum by the block scale (one FMA per weight, as block-scaled FP8
// GEMMs promote partial sums), which differs from the dequantised products by FP32 rounding.
//
// Kernels are AVX-512 (F, BW, VL, DQ) when the build targets a host that has it (RLSIM_NATIVE on
// such a host), or AVX2 + FMA + F16C on hosts without it (the same 16 lanes as two 8-lane
// registers: the same bits as the AVX-512 kernels; simd_target.h); otherwise, and for shapes the
// SIMD loops do not cover, a scalar loop with the same products and a sequential sum. Rows are
// split among the OpenMP threads.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "models/precision/quantize.h"
#include "models/precision/simd_target.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace rlsim::models {

/// How a PackedWeight stores its elements.
enum class WeightLayout : std::uint8_t {
  kF32,         // FP32 values: fp32 weights, and formats without a kernel of their own (decoded values)
  kBf16,        // bf16 bits, 2 bytes per element
  kF16,         // IEEE binary16 bits, 2 bytes per element
  kE4M3,        // fp8-e4m3 codes, 1 byte per element, one scale per block (FP32 / BF16 / E8M0 / E4M3)
  kNibble,      // 4-bit codes (INT4 two's complement or FP4 E2M1), 2 per byte, one scale per block,
                // optional FP32 tensor scale (NVFP4); 1 x N blocks: scales tile-permuted (Marlin-style)
  kE4M3KMajor,  // MXFP8 in the Ascend 950 NPU layout: fp8-e4m3 codes transposed to [in, out], E8M0
                // scales [out, in/32] reshaped to [in/64, out, 2] (vllm-ascend AscendW8A8MXFP8,
                // process_weights_after_loading; vllm-ascend #7631); the codes in panels of 16
                // out rows (PackedWeight)
};

/// "f32", "bf16", "f16", "e4m3", "nibble", "e4m3-kmajor".
std::string_view layout_name(WeightLayout l);

/// True when the 16-lane SIMD kernels (AVX-512, or AVX2 + FMA + F16C) were compiled in.
bool simd_kernels_available();
/// The instruction set of the GEMV and GEMM kernels this build runs: "AVX-512", "AVX2" or "scalar"
/// (simd_target.h).
std::string_view simd_kernels_name();
/// How the decode GEMVs prefetch their weight streams on this host: "8 KB ahead into L2"
/// (Intel: the CPUID vendor, read once), or on AMD and others "2 KB ahead into L1; FP32/BF16/FP16
/// weights none; MXFP8 k-major 8 KB ahead into L2" (the tiled kernels that decode codes, those
/// that load values as they are, and the k-major panel kernel); the measurements behind the
/// choice are at kStreamPrefetch in kernels.cc. "none" in scalar builds. Prefetching changes no
/// result.
std::string gemv_prefetch_name();

struct GemvJob;  // below: one GEMV of gemv()

/// Activations in NVFP4 (fp4-e2m1 with nv16 scaling) held as their codes, the operand of the W4A4
/// integer GEMV (PackedWeight::gemm_rows_e2m1). Each token (row of x) is quantised on its own, as
/// the runtime rounds a single token and the batch-invariant kernels round every row
/// (quantize() of one row: its FP32 tensor scale from the row's amax, an E4M3 scale per 16
/// columns). Per token n, with ld = cols rounded up to 32 (padding: code 0, scale 0):
///  - codes[n * ld + c]: twice the E2M1 value of element c, an integer in [-12, 12] (OCP MX v1.0
///    sec. 5.3.3: E2M1 values are multiples of 1/2 up to 6);
///  - bias[n * ld / 4 + q]: -kOffset times the sum of codes 4q..4q+3, which cancels the offset
///    the kernel adds to the weight codes to make them unsigned (VPDPBUSD multiplies unsigned by
///    signed bytes, Intel SDM vol. 2C);
///  - scales[n * ld / 16 + b]: block b's E4M3 scale / 4 (for the two doubled codes) times 2^120
///    (so that times an E4M3 weight scale's bits read as 2^-120 times its value, the product is the
///    two scales' product / 4, exactly);
///  - tensor[n]: the FP32 tensor scale.
/// Throws std::invalid_argument unless f is fp4-e2m1 with nv16 scaling and the shape is positive.
struct E2M1Activations {
  static constexpr int kOffset = 12;  // twice E2M1's largest value: weight code + kOffset is in [0, 24]

  E2M1Activations(const float* x, std::int64_t tokens, std::int64_t cols, const Format& f);

  std::int64_t tokens = 0, cols = 0, ld = 0;
  std::vector<std::int8_t> codes;
  std::vector<std::int32_t> bias;
  std::vector<float> scales;
  std::vector<float> tensor;
};

/// The shares of a GEMV's work that the threads of a team take, learned from the calls before on
/// the same weight so that the threads finish together although they run at different speeds.
/// Each thread t of n holds fraction f_t of the work (even, 1/n, until a call has been timed).
/// After a call, f_t moves a quarter of the way towards r_t / sum r, where r_t is the thread's
/// work over its seconds from the call's start (so that the worker's later start counts against
/// it); each fraction stays in [1 / (2n), 3 / (2n)] and the fractions are renormalised. Threads of
/// the same team ran a decode's identical shares 10-15 % apart in speed on the 2-vCPU Zen 4 VM,
/// the faster or the slower one varying between processes (perf samples a thread, 2026-11-29).
/// With learned shares SmolLM2-135M decodes took less time, alternated token by token with the
/// even split in one process (mean ms a token over 6-12 rounds, two or three processes each,
/// the first with fractions bounded to [0.3, 0.7]): int4-w4a16-g32 0.9-7.9 %, fp8-block 2.6-7.2
/// %, mxfp8 (its BF16 lm_head and other calls off the k-major kernel, whose two column segments,
/// before its 16-row panels, stayed even) 0.3-4.5 %, bf16 0.8-2.6 %; nvfp4 the same to 0.5 %
/// more. The split never changes a result: every row is summed alike whichever thread runs it
/// (gemv). The fractions are relaxed atomics, so concurrent calls on one weight race only over
/// which update lands; a copy starts even.
class LearnedSplit {
 public:
  /// Teams of more threads take the even split.
  static constexpr int kMaxThreads = 16;
  LearnedSplit() = default;
  // noexcept, so that PackedWeight stays nothrow-movable (a vector of weights moves them, not
  // copies them, when it grows).
  LearnedSplit(const LearnedSplit&) noexcept {}
  LearnedSplit& operator=(const LearnedSplit&) noexcept {
    threads_.store(0, std::memory_order_relaxed);
    return *this;
  }
  /// Boundaries b[0] = 0 <= b[1] <= ... <= b[n] = total of n threads' shares of `total` work
  /// units (b has n + 1 elements; 1 <= n).
  void boundaries(std::int64_t total, int n, std::int64_t* b) const;
  /// Learns from one call that split the work at boundaries b (as `boundaries` gave them) where
  /// thread t finished seconds[t] after the call started. A call with a thread of no work or no
  /// time, or with n outside [2, kMaxThreads], teaches nothing.
  void learn(int n, const std::int64_t* b, const double* seconds) const;
  /// The fraction of thread t of an n-thread team (t < n).
  float fraction(int t, int n) const;

 private:
  mutable std::atomic<int> threads_{0};  // the team size the fractions are for; 0: none learned
  mutable std::array<std::atomic<float>, kMaxThreads> fraction_{};
};

/// A weight matrix [rows = out_features, cols = in_features] in its storage format.
///
/// Kernel layout (what the GEMV kernels read):
///  - tiled (every layout but kE4M3KMajor): tiles of 4 rows; a tile is stored chunk by chunk, each
///    chunk holding 16 columns (32 for kNibble) of its 4 rows one after the other, so a GEMV reads
///    every tile as one sequential stream. kNibble chunks are 16 bytes per row, byte j holding
///    element j in its low nibble and element j + 16 in its high nibble (the SIMD unpack then needs
///    no shuffle): packed and tile-permuted as Marlin's INT4 layout is for its tensor-core tiles
///    (Frantar et al. 2024, "MARLIN", sec. 3). Rows and columns are padded to whole tiles and
///    chunks with code 0 (+0). Scales are in their storage element, one per block of block_rows x
///    block_cols; the grid is row-major, except kNibble with 1 x N blocks, whose scales are
///    permuted with the tiles ([tile][block column][4 rows], Marlin's scale permutation).
///  - kE4M3KMajor (MXFP8, the Ascend 950 layout): codes k-major ([in, out], as vllm-ascend
///    transposes them) in panels of 16 rows: panel p holds rows [16 p, 16 p + 16) two columns
///    after two, 32 bytes a column pair: rows 0-3 of column 2j, rows 0-3 of 2j + 1, rows 4-7 of
///    2j, ... (element (r, c), i = r % 16, at (r / 16) 16 cols + 16 (c - c % 2) + 8 (i / 4) +
///    4 (c % 2) + i % 4; an odd last column alone, rows in order, at (r / 16) 16 cols + 16 c + i;
///    rows padded to whole panels with code 0), so that a panel is one sequential stream and one
///    VPMOVSXBW + VPUNPCKLWD / VPUNPCKHWD widens a pair's 32 codes into its two columns' 16 rows
///    in row order, as the row-major E4M3 kernel widens a tile's two rows. E8M0 scales as
///    vllm-ascend stores them, [ceil(kb / 2), rows, 2] for kb = ceil(cols / 32) 32-column blocks
///    (block b of row r at ((b / 2) * rows + r) * 2 + b % 2). Its kernel reads a panel at a time,
///    16 rows a vector: each block's sum in column order, times the block scale, into one of two
///    fixed segment partials (the order of kmajor_segment_begin), all in registers.
///
/// Loader layout (the checkpoint's tensors, what a weight loader writes; see the reload lifecycle
/// of weight_lifecycle.h): codes [rows, cols] row-major, one byte per 8-bit code, two bytes per
/// 16-bit code, FP32 values for kF32, and for kNibble two codes per byte (element 2j in the low
/// nibble, INT4 offset-binary: code + 8, the compressed-tensors pack-quantized bytes); scales
/// [grid rows, grid cols] row-major in their storage element; NVFP4's tensor scale is a field.
/// The storage is allocated once for the larger of the two layouts; loader_to_kernel() and
/// kernel_to_loader() convert in place (through a scratch copy), so the buffers never move.
class PackedWeight {
 public:
  PackedWeight() = default;

  /// Packs a quantised tensor. bf16 / fp16 unscaled -> kBf16 / kF16; fp8-e4m3 with tensor scale 1
  /// -> kE4M3; int4 or fp4-e2m1 -> kNibble; every other format (fp32, fp8-e5m2, int8, hif8, hif4,
  /// ...) and any tensor holding a NaN code or scale, or an E4M3 tensor with a scale >= 2^8 (beyond its bit trick),
  /// -> kF32 with the dequantised values. at() equals the float of dequantize(q) for every element.
  explicit PackedWeight(const QuantizedTensor& q);

  /// FP32 values [rows, cols] row-major as they are (the fp32 reference: kF32). Throws
  /// std::invalid_argument for a non-positive shape.
  static PackedWeight from_values(const float* v, std::int64_t rows, std::int64_t cols);

  /// The layout a format's tensors take when they are reloaded in place: chosen from the format
  /// alone (fp32 -> kF32; unscaled bf16 / fp16 -> kBf16 / kF16; fp8-e4m3 with an MX scale ->
  /// kE4M3KMajor, with any other scaling -> kE4M3; int4 / fp4-e2m1 -> kNibble; formats without a
  /// kernel of their own -> kF32 holding the dequantised values).
  static WeightLayout layout_for(const Format& f);

  /// An empty weight of format `f`, shape [rows, cols] and blocks block_rows x block_cols (as
  /// quantize() makes them), in layout_for(f), for the reload lifecycle: storage for the larger of
  /// the loader and kernel layouts, zeroed, allocated here and never again. It holds the loader
  /// layout (all codes 0) until store_loader() and loader_to_kernel(). Throws
  /// std::invalid_argument for non-positive sizes.
  static PackedWeight reloadable(const Format& f, std::int64_t rows, std::int64_t cols, std::int64_t block_rows,
                                 std::int64_t block_cols);

  /// Writes `q` in the loader layout into the storage (the weight loader's copy). The layout does
  /// not change: throws std::invalid_argument when q's format, shape or blocks differ from this
  /// weight's, or its values do not fit the layout's kernel (a NaN code or scale, an E4M3 block
  /// scale >= 2^8, a tensor scale other than 1 for E4M3, a non-finite NVFP4 tensor scale).
  /// Returns the bytes written.
  std::size_t store_loader(const QuantizedTensor& q);
  /// Loader layout -> kernel layout in place. Returns the bytes read and written.
  std::size_t loader_to_kernel();
  /// Kernel layout -> loader layout in place (the inverse: kernel_to_loader(loader_to_kernel(x))
  /// leaves the loader bytes as they were). Returns the bytes read and written.
  std::size_t kernel_to_loader();
  /// Bytes of the loader layout: codes then scales (the checkpoint tensors' sizes).
  std::size_t loader_bytes() const { return loader_code_bytes() + loader_scale_bytes(); }
  /// A copy of the loader-layout bytes (codes then scales); meaningful while the storage holds
  /// the loader layout.
  std::vector<std::uint8_t> loader_image() const;
  /// Addresses of the code and scale storage (stable for the life of the object).
  const void* code_storage() const { return data_.data(); }
  const void* scale_storage() const { return scale_data_.data(); }

  std::int64_t rows() const { return rows_; }
  /// The thread shares gemv() learns for calls whose first job is this weight.
  const LearnedSplit& split() const { return split_; }
  std::int64_t cols() const { return cols_; }
  WeightLayout layout() const { return layout_; }

  /// Bytes a GEMV reads: elements (with tile and chunk padding) and scales, in their storage types.
  std::size_t bytes() const { return kernel_code_bytes() + kernel_scale_bytes(); }

  /// Dequantised value of element (r, c), as FP32.
  float at(std::int64_t r, std::int64_t c) const;

  /// y[r - r0] = sum_c at(r, c) * x[c] for r in [r0, r1): FP32 products, FP32 accumulation.
  /// `x` holds cols() values. Uses the SIMD kernel where available and the shape allows it; the
  /// SIMD NVFP4 kernel multiplies each row's sum of (code x block scale) x[c] products by the
  /// tensor scale once, rather than each weight (one rounding fewer per product; within the same
  /// FP32 summation bound); the SIMD E4M3 kernels (tiled and k-major) multiply each scale block's
  /// sum of code x x[c] products by the block scale, with x lifted by 2^60 inside the kernel; a
  /// token with a finite |x[c]| >= 2^68, which the lift would overflow, takes the scalar kernel.
  /// INT4 with BF16 group scales (SIMD builds, scales 0 or of magnitude in [2^-40, 2^40)) takes
  /// an integer kernel: each 32-column chunk of x as 24-bit fixed point below its largest
  /// magnitude (exact for BF16 activations within 2^-15 of it, any other x rounded by at most
  /// 2^-23 of it), each chunk's products summed exactly in integers and added per 8 columns into
  /// FP32 (one rounding per 8 columns and chunk instead of one per product; the test bound is the
  /// same FP32 summation bound); a token with a non-finite x or a chunk's largest |x| outside
  /// [2^-64, 2^64) takes the FP32 kernel.
  void gemv_rows(const float* x, float* y, std::int64_t r0, std::int64_t r1) const;

  /// The batched GEMV: y[n * ldy + r - r0] = sum_c at(r, c) * x[n * cols() + c] for `tokens`
  /// activation rows n and r in [r0, r1). Every (n, r) is summed in exactly the order of
  /// gemv_rows (same accumulator lanes, same chunk order, same final reduction), so the result
  /// of a token does not depend on how many tokens share the call: the batch-invariant linear
  /// (He et al., "Defeating Nondeterminism in LLM Inference", Thinking Machines 2025).
  /// `x_bf16`: every x value is a BF16 value (the activation format is BF16), so a BF16 weight
  /// takes the BF16 dot-product kernel on SIMD builds (VDPBF16PS with AVX512-BF16, its FMA form in
  /// the same order on other AVX-512 and AVX2 hosts, the same bits: products exact, pairs summed
  /// into FP32 lanes in another order than gemv_rows, within the same FP32 summation bound);
  /// with it too, a token's result does not depend on the batch.
  void gemm_rows(const float* x, std::int64_t tokens, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1,
                 bool x_bf16 = false) const;

  /// The scalar kernel: the same products, summed in column order.
  void gemv_rows_scalar(const float* x, float* y, std::int64_t r0, std::int64_t r1) const;

  // --- The W4A4 integer GEMV (NVFP4 weights times NVFP4 activations) ---------------------------
  /// Whether gemm_rows_e2m1 applies to this weight and activations in format f: fp4-e2m1
  /// weights with nv16 scaling (16-column E4M3 block scales, tile-permuted, none negative), cols
  /// a multiple of 32, f fp4-e2m1 with nv16 scaling, and a build with AVX512-VNNI and VBMI
  /// (VPDPBUSD) or with AVX2 (AVX-VNNI's VPDPBUSD, or VPMADDUBSW + VPMADDWD: the same integer
  /// sums).
  bool e2m1_dot_applies(const Format& f) const;
  /// y[n * ldy + r - r0] = sum_c at(r, c) * xq(n, c) for the x.tokens tokens of x and r in [r0,
  /// r1), xq the value x's codes stand for. Each 16-column block's sum of code products is an
  /// exact integer (VPDPBUSD, 4 columns per lane); times the two block scales (an exact product)
  /// it is added into 4 FP32 partials per row (partial m: columns 4m..4m+3 of every block, block
  /// after block), which are added as (p0 + p1) + (p2 + p3) and multiplied by (weight tensor
  /// scale x token tensor scale). The products and block sums are exact, unlike gemm_rows' on
  /// rounded activations: the two differ by FP32 rounding. A token's result does not depend on
  /// the batch or the thread count. Requires e2m1_dot_applies(x's format) and x.cols == cols()
  /// (std::logic_error / std::invalid_argument otherwise).
  void gemm_rows_e2m1(const E2M1Activations& x, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1) const;
  /// The same sums, in the same order, one row and token at a time (the SIMD kernel's reference).
  void gemm_rows_e2m1_scalar(const E2M1Activations& x, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1) const;

  // --- Operands of the multi-token (prefill) GEMM of gemm.h ------------------------------------
  /// Whether every element's value before its scales is exactly a BF16 value: kBf16, kE4M3,
  /// kE4M3KMajor and kNibble (E4M3 and E2M1 values and INT4 levels have at most 4 significant
  /// bits and exponents well inside BF16's). The BF16 dot-product GEMM then multiplies codes and
  /// applies scale_block_cols()-column block scales to each block's sum.
  bool codes_in_bf16() const;
  /// Columns per weight scale block along the reduction dimension: block_cols of a scaled
  /// layout, cols() when one scale (or none) spans a row.
  std::int64_t scale_block_cols() const;
  /// Scale blocks per row: ceil(cols() / scale_block_cols()).
  std::int64_t scale_blocks() const { return (cols_ + scale_block_cols() - 1) / scale_block_cols(); }
  /// Rows [r0, r1) (r1 <= rows()) of element values before scaling, as BF16 bits: row r at
  /// out + (r - r0) * ld, columns [cols(), ld) zero. Requires codes_in_bf16() (std::logic_error
  /// otherwise) and ld >= cols().
  void decode_rows_bf16(std::int64_t r0, std::int64_t r1, std::uint16_t* out, std::int64_t ld) const;
  /// Whether every block scale times every element value is exactly a normal BF16 value, so the
  /// GEMM can multiply decode_rows_bf16_scaled()'s values and apply only the tensor scale: E2M1
  /// elements (at most 2 significant bits, |v| in [0.5, 6]) with E4M3 block scales (at most 4
  /// significant bits, [2^-9, 448]), i.e. NVFP4 (OCP MX v1.0 sec. 5.3.3 for E2M1; NVIDIA's NVFP4
  /// for the E4M3 scale): products of at most 6 significant bits in [2^-10, 2688].
  bool scales_fold_into_bf16() const;
  /// decode_rows_bf16() with each value multiplied by its block scale (not the tensor scale), as
  /// BF16 bits. Requires scales_fold_into_bf16() (std::logic_error otherwise).
  void decode_rows_bf16_scaled(std::int64_t r0, std::int64_t r1, std::uint16_t* out, std::int64_t ld) const;
  /// The FP32 tensor scale (NVFP4's second-level scale; 1 for the other formats).
  float tensor_scale() const { return tensor_scale_; }
  /// Scales of rows [r0, r1): out[(r - r0) * scale_blocks() + b] = block scale x tensor scale of
  /// block b of row r (1 where unscaled), the factor decode_rows_bf16's codes are multiplied by.
  void block_scales(std::int64_t r0, std::int64_t r1, float* out) const;
  /// Rows [r0, r1) of dequantised values, at(r, c) for every element: row r at out + (r - r0) *
  /// ld, columns [cols(), ld) zero. Any layout; ld >= cols().
  void decode_rows_f32(std::int64_t r0, std::int64_t r1, float* out, std::int64_t ld) const;
  /// Bytes this weight keeps resident: its code and scale storage as allocated (the larger of
  /// the loader and kernel layouts, with tile padding).
  std::size_t resident_bytes() const { return data_.size() + scale_data_.size(); }
  /// Bytes of the tensor in its format: loader_bytes() (codes at their width, scales in their
  /// storage element).
  std::size_t packed_bytes() const { return loader_bytes(); }
  /// kE4M3KMajor: rows per panel of the kernel layout, and rows per group of a column pair.
  static constexpr std::int64_t kKMajorPanelRows = 16;
  static constexpr std::int64_t kKMajorRowGroup = 4;

 private:
  static constexpr std::int64_t kTileRows = 4;  // rows per tile (one accumulator each)

  void configure(const Format& f, std::int64_t rows, std::int64_t cols, std::int64_t block_rows, std::int64_t block_cols,
                 WeightLayout layout);  // shape, blocks and chunk geometry of a layout
  void allocate();                      // zeroed storage for both layouts
  std::size_t kernel_code_bytes() const;
  std::size_t kernel_scale_bytes() const;
  // Tiled kernel layouts: bytes of one tile's codes (chunks_ chunks of kTileRows rows), and tile
  // t's first byte.
  std::int64_t tile_bytes() const { return chunks_ * kTileRows * chunk_bytes_; }
  const std::uint8_t* tile_codes(std::int64_t t) const { return data_.data() + t * tile_bytes(); }
  std::size_t loader_code_bytes() const;
  std::size_t loader_scale_bytes() const;
  int scale_size() const;                                         // bytes per stored scale
  std::size_t block_index(std::int64_t r, std::int64_t b) const;  // kernel scale slot of row r, block column b
  void check_fits(const QuantizedTensor& q) const;                // throws when q cannot be stored (store_loader)
  // The scale index of the first block of each of tile t's kTileRows rows (a row past the last
  // counting as the last), as block_index(row, 0) gives it: one division a tile, not one a row.
  void tile_row_scale_bases(std::int64_t t, std::size_t* out) const;
  // A SIMD build, INT4 codes, tile-ordered BF16 group scales whose blocks are whole 32-column
  // chunks, each scale 0 or of magnitude in [2^-40, 2^40), no tensor scale: the INT4 integer
  // kernel (gemm_rows_int4_dot) applies.
  bool int4_dot_applies() const;
  // kNibble: 32-column chunks per scale block (all of a row's when one scale spans it).
  std::int64_t nibble_chunks_per_block() const { return grid_cols_ == 1 ? chunks_ : block_cols_ / chunk_cols_; }
  std::size_t relayout(bool to_kernel);                                    // loader_to_kernel / kernel_to_loader
  std::size_t offset(std::int64_t r, std::int64_t c) const;                // byte offset of (r, c)'s chunk row
  float scale(std::int64_t r, std::int64_t c) const;                       // decoded scale of the block holding (r, c)
  float scale_at(std::size_t block) const;                                 // decoded scale of a block (grid index)
  float code_value(std::int64_t r, std::int64_t c) const;                  // element value before scaling
  float chunk_value(const std::uint8_t* chunk_row, std::int64_t k) const;  // element k of a chunk row
#ifdef RLSIM_SIMD16
  // What the E4M3 kernels multiply a scale block's sum by: its decoded scale (1 unscaled) times
  // kE4M3ScaleFix (kernels.cc: the code trick's 2^120 less x's lift).
  float e4m3_block_scale(std::size_t block) const;
  // NS tiles (tiles[0..NS), read side by side: NS sequential streams) for NT activation rows (row
  // n at x + n * ldx): y[n * 4 NS + 4 s + i] for row i of tiles[s]. Each row is summed as with
  // NS = 1, so the bits do not depend on NS.
  template <WeightLayout L, int NT, int NS>
  void simd16(const float* x, std::int64_t ldx, float* y, const std::int64_t* tiles) const;
  // simd16 of kE4M3 on AVX-512: a tile's rows in pairs, block sums times the block scales. With
  // `pairs` (NT = 1 only), the token's x as e4m3_pair_activations laid it out, read instead of x.
  // On AVX2 (NT = NS = 1 only): one tile's block sums in registers, x read from `pairs` as
  // e4m3_interleaved_activations laid it out (required there).
  template <int NT, int NS>
  void simd16_e4m3(const float* x, std::int64_t ldx, float* y, const std::int64_t* tiles, const float* pairs = nullptr) const;
  template <int NT>
  void simd_nibble(const float* x, std::int64_t ldx, float* y, std::int64_t tile) const;
  // Dispatch on the layout: NS tiles side by side (simd16; NS > 1 with NT = 1 only), y as
  // simd16 writes it.
  template <int NT, int NS>
  void simd_tile(const float* x, float* y, const std::int64_t* tiles) const;
  // gemm_rows on the tiled kernels (simd_tile), 4 tokens at a time and the rest one by one.
  void simd_tiles(const float* x, std::int64_t tokens, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1) const;
  // gemm_rows on the INT4 integer kernel (int4_dot_ok_; kernels.cc, int4_dot_tile): each token's
  // activations as fixed-point digits, a token they cannot hold on simd_tiles.
  void gemm_rows_int4_dot(const float* x, std::int64_t tokens, float* y, std::int64_t ldy, std::int64_t r0,
                          std::int64_t r1) const;
  // kE4M3KMajor: rows [r0, r1) of NT tokens (x [NT, cols()]), y[n * ldy + r - r0]: every
  // 16-row panel the rows touch, its sums in registers from its first code to its last.
  template <int NT>
  void simd_kmajor(const float* x, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1) const;
#endif
  friend void gemv(std::span<const GemvJob> jobs);
#ifdef RLSIM_SIMD16
  // kBf16 with BF16 activations: NS tiles (as simd16) for NT rows of BF16 pairs (row n at xb + n *
  // ldxb, 32 columns per dot-product instruction, or its FMA form in the same order without
  // AVX512-BF16), y[n * 4 NS + 4 s + i] for row i of tiles[s].
  template <int NT, int NS>
  void simd_bf16_dot(const std::uint16_t* xb, std::int64_t ldxb, float* y, const std::int64_t* tiles) const;
#endif
  void kmajor_scalar(const float* x, float* y, std::int64_t r0, std::int64_t r1) const;
  // kE4M3KMajor sums a row in kKMajorSegments fixed segments of its 32-column blocks (blocks
  // [kmajor_segment_begin(g), kmajor_segment_begin(g + 1)) for segment g), each block's sum in
  // column order (one FMA chain from 0) times its scale added to the segment's partial in block
  // order; the row's result is its partials added in segment order. The order depends only on
  // the weight's shape (the two segments are those two threads once read as two streams of the
  // [cols, rows] layout; kept so that MXFP8's logits stay what they were, bit for bit).
  static constexpr int kKMajorSegments = 2;
  std::int64_t kmajor_segment_begin(int g) const { return scale_blocks() * g / kKMajorSegments; }
  // kE4M3KMajor: the byte of element (r, c) in the codes (the layout of the class comment).
  std::size_t kmajor_offset(std::int64_t r, std::int64_t c) const {
    const std::int64_t i = r % kKMajorPanelRows, panel = (r / kKMajorPanelRows) * cols_ * kKMajorPanelRows;
    if (c >= cols_ - cols_ % 2) return static_cast<std::size_t>(panel + c * kKMajorPanelRows + i);  // an odd last column
    constexpr std::int64_t G = kKMajorRowGroup;
    return static_cast<std::size_t>(panel + (c - c % 2) * kKMajorPanelRows + (i / G) * 2 * G + (c % 2) * G + i % G);
  }
  std::int64_t kmajor_panels() const { return (rows_ + kKMajorPanelRows - 1) / kKMajorPanelRows; }
  // Rows a thread's share of a GEMV starts on: a kE4M3KMajor panel, else a tile.
  std::int64_t split_rows() const { return layout_ == WeightLayout::kE4M3KMajor ? kKMajorPanelRows : kTileRows; }

  WeightLayout layout_ = WeightLayout::kF32;
  Format format_{Element::kFp32, {}};
  Element element_ = Element::kFp32;
  Element scale_element_ = Element::kFp32;  // storage of the block scales (kFp32 also when unscaled)
  std::int64_t rows_ = 0, cols_ = 0;
  std::int64_t chunk_cols_ = 16, chunk_bytes_ = 64, chunks_ = 0;  // per row of a tile
  std::int64_t block_rows_ = 1, block_cols_ = 1, grid_cols_ = 1;
  std::int64_t grid_rows_ = 1;
  bool scaled_ = false;
  bool tile_scales_ = false;  // kNibble with 1 x N blocks: scales in tile order
  bool simd_ok_ = false;      // block shape fits the SIMD loops
  bool e2m1_dot_ok_ = false;  // the weight side of e2m1_dot_applies (set when the kernel layout is written)
  bool int4_dot_ok_ = false;  // int4_dot_applies() (set when the kernel layout is written)
  float tensor_scale_ = 1.0f;
  float lut_[16] = {};                // kNibble: value of each 4-bit code
  const float* e4m3_luts_ = nullptr;  // kNibble with E4M3 scales: lut_ times every E4M3 scale (shared)
  std::vector<std::uint8_t> data_;
  std::vector<std::uint8_t> scale_data_;
  LearnedSplit split_;  // gemv's shares of this weight's work when it is a call's first job
};
static_assert(std::is_nothrow_move_constructible_v<PackedWeight> && std::is_nothrow_move_assignable_v<PackedWeight>);

/// One GEMV, or a batch of them on the same weight: y[n, 0..w.rows()) = W x[n] for n < tokens, x
/// [tokens, w.cols()] and y [tokens, w.rows()] row-major. With x_e2m1 set (its tokens equal to
/// `tokens`, w.e2m1_dot_applies() of its format) the integer kernel gemm_rows_e2m1 reads it instead.
struct GemvJob {
  const PackedWeight* w = nullptr;
  const float* x = nullptr;
  float* y = nullptr;
  std::int64_t tokens = 1;
  bool x_bf16 = false;                      // x holds BF16 values (PackedWeight::gemm_rows)
  const E2M1Activations* x_e2m1 = nullptr;  // set: the integer kernel on these codes (x unused)
};

/// Calls run(w0, w1) once per OpenMP thread with the thread's contiguous share [w0, w1) of
/// [0, total) work units (share t: [total t / n, total (t + 1) / n)), or once with [0, total) on
/// the calling thread when `parallel` is false or one thread is available. The GEMV and GEMM
/// drivers split rows by work with it.
template <typename F>
void split_work(std::int64_t total, bool parallel, F&& run) {
#ifdef _OPENMP
  if (parallel && omp_get_max_threads() > 1) {
#pragma omp parallel
    {
      const std::int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      run(total * t / nt, total * (t + 1) / nt);
    }
    return;
  }
#endif
  run(std::int64_t{0}, total);
}

/// Calls body(i) for every i in [0, n): split among the OpenMP threads (static schedule) when
/// `parallel`, else on the calling thread without entering an OpenMP region. An `if (false)`
/// clause still enters one (libgomp sets up a team of one): 0.4 us a call on a Zen 4 VM
/// (2026-11-29), 151 calls and 0.06 ms a decoded SmolLM2-135M token through rmsnorm, rope and
/// the SwiGLU product, which split only a prefill's rows.
template <typename F>
void parallel_for_if(std::int64_t n, bool parallel, F&& body) {
  if (parallel) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) body(i);
}

/// Softmax of one row in place: s[j] = e^(s[j] - max) / sum, for n >= 1 finite scores
/// (attention rows, router logits). With AVX-512 or AVX2, e^x is computed 16 lanes at a time
/// (Cody-Waite reduction and Cephes' expf polynomial, within 2 ulp of std::exp) and summed as 16
/// partial sums (both builds give the same bits); the portable path calls std::exp and sums left to right. Either way an
/// element's result depends only on its row, never on the batch or position the row came from.
void softmax_row(float* s, std::int64_t n);

/// One query's attention scores in one fixed order whatever the caller (the batch-invariant
/// kernels' attention, prefill and decode alike): s[j] = dot(q, k_j) scale for j < visible, q
/// hd values, k_j the cached key at k + j ldk. Each dot product is 16 lane sums over strides of
/// 16 (each product rounded, then added: -ffp-contract=off), the hd % 16 tail into lanes 0..,
/// then the lanes added pairwise from the smallest power of two >= hd (8 for hd >= 16) down. With
/// hd a multiple of 16 on a SIMD build, several keys at a time in registers: the same bits.
void attention_scores_fixed(const float* q, const float* k, std::int64_t ldk, std::int64_t visible, std::int64_t hd, float scale,
                            float* s);

/// Reads `bytes` bytes at p into the calling thread's caches, one load per 64-byte line in
/// address order (the values are discarded). Inside an OpenMP parallel region each thread reads
/// its contiguous share (share t of n: whole lines from bytes t / n to bytes (t + 1) / n), so the
/// team reads the block once; outside one, the calling thread reads all of it. For a block read
/// next in a strided order that the hardware prefetchers follow poorly (decode attention over the
/// KV cache: Transformer::attention_block), one sequential read brings it in at streaming rate.
void read_into_cache(const void* p, std::size_t bytes);

/// out[e] = sum over j < visible, in order, of p[j] v[j ldv + e] (each product rounded, then
/// added), for e < hd: one query's attention output from its probabilities p and the cached
/// values. On a SIMD build 16 outputs a register (the same operations per output: the same bits).
void attention_values_fixed(const float* p, const float* v, std::int64_t ldv, std::int64_t visible, std::int64_t hd, float* out);

/// SwiGLU's elementwise step: out[i] = silu(gate[i]) up[i], silu(a) = a sigma(a), for n >= 0
/// values (out may alias gate or up). With t = e^-|a| (the SIMD e^x of softmax_row on AVX-512 and
/// AVX2, within 2 ulp of std::exp; std::exp in portable builds), sigma(a) a = a / (1 + t) for
/// a >= 0 and a t / (1 + t) for a < 0, so e^x is only taken of x <= 0 and never overflows;
/// +-inf and NaN give what a / (1 + e^-a) gives. Each element is computed alone, the same bits on
/// AVX-512 and AVX2 hosts, whatever n or the element's place.
void silu_mul(const float* gate, const float* up, float* out, std::int64_t n);

/// Runs GEMVs (the q/k/v projections of a layer, gate and up, ...) in one OpenMP parallel region,
/// rows split among the threads in contiguous ranges of work (rows x cols x tokens) in the
/// shares the first job's weight has learned (PackedWeight::split; even until then), on whole
/// tiles (whole 16-row panels of kE4M3KMajor weights).
/// Each row's sum is the same whatever the thread count, the split and the number of tokens, so
/// results are deterministic and batch-invariant. Small totals (under 2^16 multiply-adds) run on
/// the calling thread; no jobs, nothing.
void gemv(std::span<const GemvJob> jobs);

/// Running sums of GEMV calls' weight bytes b and wall seconds t (Welford's online update, so that
/// equal sizes give a variance of exactly 0 rather than a cancellation's residue) and the
/// least-squares line t = fixed + b / rate through them: the fixed part is what a call costs
/// whatever its size (the fork and join of its OpenMP region, the threads' finish gap, the
/// activations' hand-over between the threads' caches, the DRAM latency before its stream
/// starts), the rate is the GB/s its stream reaches. Ordinary least squares (the normal equations
/// of t = a + s b, s = cov(b, t) / var(b), a = mean t - s mean b).
struct GemvCallStats {
  std::int64_t calls = 0;
  double mean_bytes = 0, mean_seconds = 0;
  double m2_bytes = 0;          // sum of (b - mean_bytes)^2
  double co_bytes_seconds = 0;  // sum of (b - mean_bytes)(t - mean_seconds)
  double seconds = 0;           // sum of t

  /// Adds one call of b weight bytes and t wall seconds.
  void add(double b, double t);
  /// The fit's fixed seconds a call and its rate in bytes per second; false (both 0) with fewer
  /// than 2 calls, calls all of one size (up to 1e-9 of the mean size: no slope to fit), or a slope
  /// that is not positive (the wall times fall with size: no rate).
  bool fit(double& fixed_seconds, double& bytes_per_second) const;
};

/// Starts recording every gemv() call made outside an OpenMP parallel region (the decode's; a
/// call nested in a region is part of its caller's time): its weight bytes (PackedWeight::bytes()
/// of each job) and wall time from entry to return, into sums that gemv_record_stop() returns and
/// clears. Recording off (the default), gemv() pays one relaxed atomic load. Calls from several
/// threads at once are added under a mutex.
void gemv_record_start();
/// Stops recording and returns what was recorded since gemv_record_start() (empty if it was not
/// started).
GemvCallStats gemv_record_stop();

}  // namespace rlsim::models
