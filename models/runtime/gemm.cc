#include "models/runtime/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "models/precision/simd.h"
#include "models/runtime/transformer.h"

#if defined(RLSIM_AVX512) && defined(__x86_64__) && defined(__linux__)
// Intel AMX (Sapphire Rapids and later): the BF16 kernel's tile form, chosen at run time.
#define RLSIM_AMX 1
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#endif

namespace rlsim::models {
namespace {

constexpr std::int64_t kTokenVector = 16;  // tokens per vector (16 FP32 lanes)
constexpr std::int64_t kColumnPad = 32;    // activation and panel rows padded to this many columns
constexpr std::int64_t kPanelRows = 48;    // weight rows decoded at a time (a multiple of every kernel's R)
constexpr int kMaxVectors = static_cast<int>(GemmActivations::kTile / kTokenVector);  // token vectors per kernel call

std::int64_t round_up(std::int64_t n, std::int64_t m) { return (n + m - 1) / m * m; }

// Tokens' vectors in the tile starting at token t0 (at most kMaxVectors).
int tile_vectors(const GemmActivations& x, std::int64_t t0) {
  return static_cast<int>(std::min<std::int64_t>(kMaxVectors, (x.tokens - t0 + kTokenVector - 1) / kTokenVector));
}

// Whether the block scales of activations in format f fold exactly into their BF16 codes (E2M1 values
// times E4M3 scales, NVFP4: see PackedWeight::scales_fold_into_bf16), leaving one scale per row.
bool activation_scales_fold(const Format& f) { return f.scaling.kind == ScaleKind::kNv16 && f.element == Element::kFp4E2M1; }

// Columns per activation scale block of format f on rows of `cols` (cols when one spans the row or
// the block scales fold into the codes).
std::int64_t activation_block_cols(const Format& f, std::int64_t cols) {
  if (activation_scales_fold(f)) return cols;
  switch (f.scaling.kind) {
    case ScaleKind::kGroup1xN:
    case ScaleKind::kMx32:
    case ScaleKind::kNv16:
      return std::min<std::int64_t>(f.scaling.cols, cols);  // N, 32, 16 (format.h's Scaling)
    default:
      return cols;
  }
}

// The largest |x[i]| over the finite values of x[0, n) (0 when none), on the OpenMP threads:
// NVFP4's tensor amax, 16 lanes at a time where AVX-512 is compiled in (max is exact, so the
// order does not matter).
float parallel_finite_amax(const float* x, std::int64_t n) {
  float amax = 0.0f;
#pragma omp parallel reduction(max : amax)
  {
#ifdef _OPENMP
    const std::int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
#else
    const std::int64_t nt = 1, t = 0;
#endif
    std::int64_t i = n * t / nt;
    const std::int64_t end = n * (t + 1) / nt;
#ifdef RLSIM_AVX512
    __m512 m = _mm512_setzero_ps();
    const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
    for (; i + 16 <= end; i += 16) {
      const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x + i));
      m = _mm512_mask_max_ps(m, _mm512_cmp_ps_mask(a, big, _CMP_LE_OQ), m, a);  // NaN and inf fail the test
    }
    amax = _mm512_reduce_max_ps(m);
#endif
    for (; i < end; ++i) {
      const float a = std::fabs(x[i]);
      if (a <= std::numeric_limits<float>::max()) amax = std::max(amax, a);  // finite values (NaN fails the test)
    }
  }
  return amax;
}

// Codes (as the BF16 bits of their values) and per-block scales of x [rows, cols] in format f,
// into codes[r * cols + c] and scales[r * blocks + b], blocks of activation_block_cols(f, cols).
// tensor_amax: NVFP4's whole-tensor amax when x is a slice of the call's rows (quantize_slice).
void quantize_rows(const float* x, std::int64_t rows, std::int64_t cols, const Format& f, float tensor_amax, std::uint16_t* codes,
                   float* scales) {
  const auto n = static_cast<std::size_t>(rows * cols);
  if (f.scaling.kind == ScaleKind::kNone && f.element == Element::kBf16) {
    for (std::size_t i = 0; i < n; ++i) codes[i] = bf16_bits(round_bf16(x[i]));
    for (std::int64_t r = 0; r < rows; ++r) scales[r] = 1.0f;
    return;
  }
  const QuantizedTensor q = quantize_slice(f, rows, cols, std::span<const float>(x, n), tensor_amax);
  float value[256];
  const int code_count = 1 << std::min(traits(f.element).bits, 8);
  for (int c = 0; c < code_count; ++c) value[c] = static_cast<float>(decode(f.element, static_cast<std::uint32_t>(c)));
  const auto code_mask = static_cast<std::uint32_t>(code_count - 1);
  const std::int64_t grid_cols = (cols + q.block_cols - 1) / q.block_cols;
  if (activation_scales_fold(f)) {  // value x block scale, exact in BF16; the tensor scale per row
    for (std::int64_t r = 0; r < rows; ++r) {
      const double* row_scales = q.scales.data() + (r / q.block_rows) * grid_cols;
      const std::uint32_t* in = q.codes.data() + r * cols;
      std::uint16_t* out = codes + r * cols;
      for (std::int64_t b = 0; b < grid_cols; ++b) {
        const auto s = static_cast<float>(row_scales[b]);
        std::int64_t c = b * q.block_cols;
        const std::int64_t c1 = std::min(cols, (b + 1) * q.block_cols);
#ifdef RLSIM_AVX512
        // 16 codes a step: the code's value from the 16-entry table, times the scale (exact), its
        // upper 16 bits stored (the same bits as bf16_bits of an exact BF16 value).
        static_assert(sizeof(value) / sizeof(value[0]) >= 16);
        const __m512 lut = _mm512_loadu_ps(value), vs = _mm512_set1_ps(s);
        for (; c < c1; c += 16) {
          const __mmask16 m = c1 - c >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (c1 - c)) - 1u);
          const __m512i idx = _mm512_maskz_loadu_epi32(m, in + c);  // E2M1: codes < 16, the table's index
          const __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(idx, lut), vs);
          _mm512_mask_cvtepi32_storeu_epi16(out + c, m, _mm512_srli_epi32(_mm512_castps_si512(v), 16));
        }
#endif
        for (; c < c1; ++c) out[c] = bf16_bits(value[in[c] & code_mask] * s);
      }
      scales[r] = static_cast<float>(q.tensor_scale);
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i) codes[i] = bf16_bits(value[q.codes[i] & code_mask]);
  const std::int64_t bc = activation_block_cols(f, cols), blocks = (cols + bc - 1) / bc;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const double s = q.scales[static_cast<std::size_t>((r / q.block_rows) * grid_cols + b)] * q.tensor_scale;
      scales[r * blocks + b] = static_cast<float>(s);
    }
  }
}

}  // namespace

bool activation_codes_in_bf16(const Format& f) {
  switch (f.scaling.kind) {
    case ScaleKind::kNone:
      break;
    case ScaleKind::kTensor:
    case ScaleKind::kToken:
    case ScaleKind::kGroup1xN:
    case ScaleKind::kMx32:
    case ScaleKind::kNv16:
      if (f.element == Element::kBf16) return false;  // a scaled BF16 value is not a BF16 code
      break;
    default:
      return false;
  }
  switch (f.element) {
    case Element::kBf16:
    case Element::kFp8E4M3:
    case Element::kFp8E5M2:
    case Element::kFp4E2M1:
    case Element::kInt4:
    case Element::kInt8:
      return true;
    default:
      return false;
  }
}

namespace {
// Columns per weight scale block as the GEMM applies them (cols when the scales fold into the codes).
std::int64_t weight_block_cols(const PackedWeight& w) { return w.scales_fold_into_bf16() ? w.cols() : w.scale_block_cols(); }
}  // namespace

bool gemm_bf16_applies(const PackedWeight& w, const Format& f) {
  if (!w.codes_in_bf16() || !activation_codes_in_bf16(f)) return false;
  const std::int64_t cols = w.cols(), wb = weight_block_cols(w), xb = activation_block_cols(f, cols);
  const std::int64_t kb = std::min(wb, xb);
  const bool nested = (wb >= cols || wb % kb == 0) && (xb >= cols || xb % kb == 0);
  return nested && (kb >= cols || kb % 2 == 0);
}

GemmActivations::GemmActivations(const float* x, std::int64_t t, std::int64_t c, const Format& f, bool use_bf16)
    : bf16(use_bf16), tokens(t), cols(c), tpad(round_up(t, kTile)), kpad(round_up(c, kColumnPad)) {
  if (t <= 0 || c <= 0) throw std::invalid_argument(fmt::format("GemmActivations: shape [{}, {}] must be positive", t, c));
  if (use_bf16 && !activation_codes_in_bf16(f)) {
    throw std::invalid_argument(fmt::format("GemmActivations: {} has no BF16 codes", f.str()));
  }
  if (!use_bf16) {
    std::vector<float> rounded(x, x + t * c);
    round_to_format(rounded.data(), t, c, f);
    block_cols = c, blocks = 1;
    values.assign(static_cast<std::size_t>(kpad * tpad), 0.0f);
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < t; ++r) {
      for (std::int64_t k = 0; k < c; ++k) values[value_index(r, k)] = rounded[static_cast<std::size_t>(r * c + k)];
    }
    return;
  }
  // Row chunks: a row-local rounding is split among the threads, and so is NVFP4's (its tensor
  // scale from the whole call's amax, computed first); a per-tensor scale is one chunk.
  float amax = 0.0f;
  if (f.scaling.kind == ScaleKind::kNv16) amax = parallel_finite_amax(x, t * c);
  const bool split = (rows_round_independently(f) || f.scaling.kind == ScaleKind::kNv16) && t >= 32;
  const std::int64_t chunk = split ? 16 : t, chunks = (t + chunk - 1) / chunk;
  block_cols = activation_block_cols(f, c);
  blocks = (c + block_cols - 1) / block_cols;
  pairs.assign(static_cast<std::size_t>(kpad / 2 * tpad), 0u);
  scales.assign(static_cast<std::size_t>(blocks * tpad), 0.0f);
  // Each chunk's codes and scales in a per-thread buffer, then into the tile layout.
  parallel_for_if(chunks, split, [&](std::int64_t k) {
    thread_local std::vector<std::uint16_t> codes;
    thread_local std::vector<float> row_scales;  // [rows of the chunk][blocks]
    const std::int64_t r0 = k * chunk, nr = std::min(chunk, t - r0);
    codes.resize(static_cast<std::size_t>(nr * c));
    row_scales.resize(static_cast<std::size_t>(nr * blocks));
    quantize_rows(x + r0 * c, nr, c, f, amax, codes.data(), row_scales.data());
    for (std::int64_t i = 0; i < nr; ++i) {
      for (std::int64_t b = 0; b < blocks; ++b)
        scales[scale_index(r0 + i, b)] = row_scales[static_cast<std::size_t>(i * blocks + b)];
      const std::uint16_t* row = codes.data() + i * c;
      for (std::int64_t kp = 0; kp < (c + 1) / 2; ++kp) {
        const std::uint32_t hi = 2 * kp + 1 < c ? row[2 * kp + 1] : 0u;
        pairs[pair_index(r0 + i, kp)] = row[2 * kp] | hi << 16;
      }
    }
  });
}

bool gemm_uses_avx512_bf16() {
#ifdef RLSIM_AVX512_BF16
  return true;
#else
  return false;
#endif
}

namespace {

// How a weight's and an activation's scale blocks combine along the reduction dimension.
struct BlockPlan {
  std::int64_t kb = 0;           // joint block width: an even number of columns
  std::int64_t wb = 0, nwb = 0;  // weight block width and blocks per row
  std::int64_t xb = 0;           // activation block width
  std::int64_t kc = 0;           // columns per kernel call: a multiple of kb, its codes held in L1
  bool one_block = true;         // a single block spans the row: its scales are applied at the end
  bool x_at_end = true;          // one activation block spans the row: its scale is applied at the end
};

// The kernels: R panel rows (row i at w + i * ldw) by V vectors of 16 tokens of one token tile,
// columns [k0, k1) (k0 and k1 multiples of kb, or k1 the padded row end), added to out[i * 64 +
// j] (row i, token j of the tile). Activation codes of the tile: xt[(k / 2) * 64 + j] (BF16
// pairs) or xt[k * 64 + j] (FP32), its scales xs[b * 64 + j].
#ifdef RLSIM_AVX512

// acc[i][v] += the pair products of columns [k0, k1).
template <int R, int V>
inline void bf16_sums(__m512 (&acc)[R][V], const std::uint16_t* w, std::int64_t ldw, const std::uint32_t* xt, std::int64_t k0,
                      std::int64_t k1) {
  for (std::int64_t kp = k0 / 2; kp < k1 / 2; ++kp) {
    __m512i xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_si512(xt + kp * GemmActivations::kTile + 16 * v);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      std::uint32_t pair;
      std::memcpy(&pair, w + i * ldw + 2 * kp, sizeof pair);
      const __m512i wv = _mm512_set1_epi32(static_cast<int>(pair));
      for (int v = 0; v < V; ++v) acc[i][v] = simd::bf16_pair_dot(acc[i][v], xv[v], wv);
    }
  }
}

// Running totals of R rows x V token vectors, in `out` (row i, token j at out[i * 64 + j]).
template <int R, int V>
inline void load_totals(__m512 (&tot)[R][V], const float* out) {
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) tot[i][v] = _mm512_loadu_ps(out + i * 64 + 16 * v);
  }
}
template <int R, int V>
inline void store_totals(const __m512 (&tot)[R][V], float* out) {
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + i * 64 + 16 * v, tot[i][v]);
  }
}

// Each scale block of [k0, k1): its pair sums in registers, then add(i, v, sums, scale) with the
// block's scale for row i and token vector v (the row's weight scale, times the token's unless one
// activation block spans the row).
template <int R, int V, class Add>
inline void scaled_blocks(const std::uint16_t* w, std::int64_t ldw, const float* ws, const BlockPlan& p, const std::uint32_t* xt,
                          const float* xs, std::int64_t k0, std::int64_t k1, Add&& add) {
  for (std::int64_t b0 = k0; b0 < k1; b0 += p.kb) {
    __m512 acc[R][V];
    for (int i = 0; i < R; ++i) {
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_setzero_ps();
    }
    bf16_sums<R, V>(acc, w, ldw, xt, b0, std::min(k1, b0 + p.kb));
    const std::int64_t wbi = b0 / p.wb, xbi = b0 / p.xb;
    for (int v = 0; v < V; ++v) {
      const __m512 sx = _mm512_loadu_ps(xs + xbi * 64 + 16 * v);
      for (int i = 0; i < R; ++i) {
        const __m512 sw = _mm512_set1_ps(ws[i * p.nwb + wbi]);
        add(i, v, acc[i][v], p.x_at_end ? sw : _mm512_mul_ps(sx, sw));
      }
    }
  }
}

template <int R, int V, bool kScaled>
void bf16_kernel(const std::uint16_t* w, std::int64_t ldw, const float* ws, const BlockPlan& p, const std::uint32_t* xt,
                 const float* xs, std::int64_t k0, std::int64_t k1, float* out) {
  if constexpr (!kScaled) {
    __m512 tot[R][V];
    load_totals<R, V>(tot, out);
    bf16_sums<R, V>(tot, w, ldw, xt, k0, k1);
    store_totals<R, V>(tot, out);
  } else if constexpr (2 * R * V <= 24) {
    // Each block's sums and the running totals both in registers (at most 24 of the 32): a
    // block's sums scaled into the totals with one FMA, the totals read from and written to `out`
    // once per call. For narrow blocks (32 columns) this beats keeping the totals in `out`, which
    // costs a store per block and lane (store-bound on Zen 4: int4 g32 512 x 576 x 1536 at 145
    // against 158 GMAC/s on one core).
    __m512 tot[R][V];
    load_totals<R, V>(tot, out);
    scaled_blocks<R, V>(w, ldw, ws, p, xt, xs, k0, k1,
                        [&tot](int i, int v, __m512 sums, __m512 scale) { tot[i][v] = _mm512_fmadd_ps(sums, scale, tot[i][v]); });
    store_totals<R, V>(tot, out);
  } else {
    // The running totals in `out` (L1), scaled and added per block: the same FMA per lane as
    // above, so either form gives the same bits.
    scaled_blocks<R, V>(w, ldw, ws, p, xt, xs, k0, k1, [out](int i, int v, __m512 sums, __m512 scale) {
      float* o = out + i * 64 + 16 * v;
      _mm512_storeu_ps(o, _mm512_fmadd_ps(sums, scale, _mm512_loadu_ps(o)));
    });
  }
}

template <int R, int V>
void f32_kernel(const float* w, std::int64_t ldw, const float* xt, std::int64_t k0, std::int64_t k1, float* out) {
  __m512 acc[R][V];
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) acc[i][v] = _mm512_loadu_ps(out + i * 64 + 16 * v);
  }
  for (std::int64_t k = k0; k < k1; ++k) {
    __m512 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_ps(xt + k * GemmActivations::kTile + 16 * v);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 wv = _mm512_set1_ps(w[i * ldw + k]);
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(xv[v], wv, acc[i][v]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(out + i * 64 + 16 * v, acc[i][v]);
  }
}
#endif

#ifdef RLSIM_AMX
// The BF16 kernel on Intel AMX tiles (Intel Architecture Instruction Set Extensions Programming
// Reference, ch. 3, "Intel AMX": palette 1, eight tile registers of 16 rows x 64 bytes; TDPBF16PS
// C[m][n] += A[m][2k] B[k][2n] + A[m][2k+1] B[k][2n+1] in FP32, round to nearest even, BF16
// denormal inputs and FP32 denormal results flushed to zero). A tile row of weights holds 32
// columns of one panel row's BF16 codes (A: 16 rows), a tile row of activations 16 tokens' pairs
// of one pair index (B: 16 pair indices, which GemmActivations' tile layout already is), and
// a C tile 16 rows x 16 tokens of FP32 sums.
namespace amx {
constexpr int kTileRows = 16;                                                      // rows of every tile used here
constexpr int kTileRowBytes = 64;                                                  // bytes per tile row
constexpr std::int64_t kTileColumns = kTileRowBytes / sizeof(std::uint16_t);       // BF16 columns per A row: 32
constexpr std::int64_t kXStride = GemmActivations::kTile * sizeof(std::uint32_t);  // bytes between B rows
constexpr std::int64_t kSumStride = GemmActivations::kTile * sizeof(float);        // bytes between C rows
constexpr std::int64_t kTile = GemmActivations::kTile;                             // tokens per tile (out's row length)
constexpr int kTiles = 8;                                                          // tile registers of palette 1
constexpr int kSumTiles = 4;                                                       // C tiles of a 2 x 2 block (tile_sums)
static_assert(kTileRows == kTokenVector && kColumnPad % kTileColumns == 0 && kPanelRows % kTileRows == 0);

// The LDTILECFG operand (the reference's "TILECFG"): palette 1, every tile 16 rows x 64 bytes.
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t bytes_per_row[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Whether the CPU has AMX-TILE and AMX-BF16 (CPUID.(EAX=7, ECX=0):EDX bits 24 and 22) and Linux
// gives this process the tile state, which it does only on request (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, Linux 5.16 and later: Documentation/arch/x86/xstate.rst).
bool host_supports() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
  if ((d & kAmxBf16) == 0 || (d & kAmxTile) == 0) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

std::atomic<bool> allowed{true};
std::atomic<bool> emulate{false};  // gemm_emulate_amx: amx::emulated's panel_tile, on any host

bool active() {
  static const bool supported = host_supports();
  return supported && allowed.load(std::memory_order_relaxed);
}

#include "models/runtime/gemm_amx_tiles.inc"

// The tile instructions in scalar code, as the reference defines them (ch. 3, "TDPBF16PS",
// "TILELOADD", "TILESTORED", "TILEZERO"): per thread, 8 tiles of 16 rows x 64 bytes; TDPBF16PS
// adds, row by row and pair index by pair index, the even pair's product, then the odd's, each
// rounded to FP32 (nearest even), BF16 denormal inputs and FP32 denormal results as zero. The
// products of two BF16 values are exact in FP32, so only the additions round.
namespace emulated {
thread_local std::uint8_t tile[kTiles][kTileRows][kTileRowBytes];

inline void load(int t, const void* base, std::int64_t stride) {
  for (int r = 0; r < kTileRows; ++r) std::memcpy(tile[t][r], static_cast<const std::uint8_t*>(base) + r * stride, kTileRowBytes);
}
inline void store(int t, void* base, std::int64_t stride) {
  for (int r = 0; r < kTileRows; ++r) std::memcpy(static_cast<std::uint8_t*>(base) + r * stride, tile[t][r], kTileRowBytes);
}
inline float flush_denormal(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }
inline float bf16_at(int t, int r, int i) {  // BF16 element i of row r, denormals as zero
  std::uint16_t h;
  std::memcpy(&h, &tile[t][r][2 * i], sizeof h);
  return flush_denormal(std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16));
}
inline void dpbf16ps(int c, int a, int b) {
  constexpr int kPairs = kTileColumns / 2, kSums = kTileRowBytes / sizeof(float);  // B's rows, C's columns
  for (int m = 0; m < kTileRows; ++m) {
    for (int k = 0; k < kPairs; ++k) {
      for (int n = 0; n < kSums; ++n) {
        float acc;
        std::memcpy(&acc, &tile[c][m][4 * n], sizeof acc);
        const float even = bf16_at(a, m, 2 * k) * bf16_at(b, k, 2 * n);
        acc = flush_denormal(acc + even);
        const float odd = bf16_at(a, m, 2 * k + 1) * bf16_at(b, k, 2 * n + 1);
        acc = flush_denormal(acc + odd);
        std::memcpy(&tile[c][m][4 * n], &acc, sizeof acc);
      }
    }
  }
}

#pragma push_macro("_tile_loadd")
#pragma push_macro("_tile_stored")
#pragma push_macro("_tile_zero")
#pragma push_macro("_tile_dpbf16ps")
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#define _tile_loadd(t, base, stride) load(t, base, static_cast<std::int64_t>(stride))
#define _tile_stored(t, base, stride) store(t, base, static_cast<std::int64_t>(stride))
#define _tile_zero(t) std::memset(tile[t], 0, sizeof tile[t])
#define _tile_dpbf16ps(c, a, b) dpbf16ps(c, a, b)
#define _tile_loadconfig(config) static_cast<void>(config)
#define _tile_release() static_cast<void>(0)
#include "models/runtime/gemm_amx_tiles.inc"
#undef _tile_loadconfig
#undef _tile_release
#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbf16ps
#pragma pop_macro("_tile_loadd")
#pragma pop_macro("_tile_stored")
#pragma pop_macro("_tile_zero")
#pragma pop_macro("_tile_dpbf16ps")
}  // namespace emulated
}  // namespace amx
#endif

#ifdef RLSIM_AVX2
// The same kernels on AVX2 + FMA (simd.h's V16: a 16-token vector as two 8-lane registers), with
// every lane's arithmetic as in the AVX-512 kernels without AVX512-BF16: a pair's two products as
// two FMAs in VDPBF16PS's order (simd::bf16_pair_fmadd), a block's sums times its scale added by one FMA, so
// they give the same bits. With 16 registers they take 3 rows and one token vector a call (6 sums,
// 4 activation halves, 2 weight halves); a lane's result does not depend on how its rows and
// tokens are grouped.
namespace avx2 {
using simd::V16;

// The activation pair codes of 16 tokens at p as FP32: lo = the even column's values, hi = the odd's.
inline void load_pairs(const std::uint32_t* p, V16& lo, V16& hi) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8));
  lo = {simd::bf16_low_halves(a), simd::bf16_low_halves(b)};
  hi = {simd::bf16_high_halves(a), simd::bf16_high_halves(b)};
}

// acc[i] += the pair products of columns [k0, k1) for R rows and one token vector.
template <int R>
inline void bf16_sums(V16 (&acc)[R], const std::uint16_t* w, std::int64_t ldw, const std::uint32_t* xt, std::int64_t k0,
                      std::int64_t k1) {
  for (std::int64_t kp = k0 / 2; kp < k1 / 2; ++kp) {
    V16 xl, xh;
    load_pairs(xt + kp * GemmActivations::kTile, xl, xh);
    for (int i = 0; i < R; ++i) {
      std::uint32_t pair;
      std::memcpy(&pair, w + i * ldw + 2 * kp, sizeof pair);
      // Broadcast the pair (one VPBROADCASTD from memory), then split it in the vector unit.
      const __m256i wv = _mm256_set1_epi32(static_cast<int>(pair));
      const __m256 wl = simd::bf16_low_halves(wv), wh = simd::bf16_high_halves(wv);
      acc[i] = simd::bf16_pair_fmadd(acc[i], V16{wh, wh}, xh, V16{wl, wl}, xl);
    }
  }
}

template <int R>
void bf16_kernel(const std::uint16_t* w, std::int64_t ldw, const float* ws, const BlockPlan& p, const std::uint32_t* xt,
                 const float* xs, std::int64_t k0, std::int64_t k1, float* out, bool scaled) {
  if (!scaled) {
    V16 tot[R];
    for (int i = 0; i < R; ++i) tot[i] = simd::load16(out + i * 64);
    bf16_sums<R>(tot, w, ldw, xt, k0, k1);
    for (int i = 0; i < R; ++i) simd::store16(out + i * 64, tot[i]);
    return;
  }
  for (std::int64_t b0 = k0; b0 < k1; b0 += p.kb) {
    V16 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = simd::zero16();
    bf16_sums<R>(acc, w, ldw, xt, b0, std::min(k1, b0 + p.kb));
    const std::int64_t wbi = b0 / p.wb, xbi = b0 / p.xb;
    const V16 sx = simd::load16(xs + xbi * 64);
    for (int i = 0; i < R; ++i) {
      const V16 sw = simd::set1(ws[i * p.nwb + wbi]);
      float* o = out + i * 64;
      simd::store16(o, simd::fmadd(acc[i], p.x_at_end ? sw : simd::mul(sx, sw), simd::load16(o)));
    }
  }
}

template <int R>
void f32_kernel(const float* w, std::int64_t ldw, const float* xt, std::int64_t k0, std::int64_t k1, float* out) {
  V16 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = simd::load16(out + i * 64);
  for (std::int64_t k = k0; k < k1; ++k) {
    const V16 xv = simd::load16(xt + k * GemmActivations::kTile);
    for (int i = 0; i < R; ++i) acc[i] = simd::fmadd(xv, simd::set1(w[i * ldw + k]), acc[i]);
  }
  for (int i = 0; i < R; ++i) simd::store16(out + i * 64, acc[i]);
}
}  // namespace avx2
#endif

// Portable kernels (builds without AVX-512 or AVX2: RLSIM_NATIVE off, the sanitizer build): the same
// products and block order, one lane at a time.
[[maybe_unused]] void bf16_kernel_scalar(int rows, int vectors, const std::uint16_t* w, std::int64_t ldw, const float* ws,
                                         const BlockPlan& p, const std::uint32_t* xt, const float* xs, std::int64_t k0,
                                         std::int64_t k1, float* out) {
  const auto f = [](std::uint32_t h) { return std::bit_cast<float>(h << 16); };
  for (int i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < 16 * vectors; ++j) {
      float tot = out[i * 64 + j];
      const std::int64_t step = p.one_block ? k1 - k0 : p.kb;
      for (std::int64_t b0 = k0; b0 < k1; b0 += step) {
        float acc = 0.0f;
        for (std::int64_t kp = b0 / 2; kp < std::min(k1, b0 + step) / 2; ++kp) {
          const std::uint32_t xv = xt[kp * GemmActivations::kTile + j];
          acc += f(xv & 0xFFFFu) * f(w[i * ldw + 2 * kp]);
          acc += f(xv >> 16) * f(w[i * ldw + 2 * kp + 1]);
        }
        if (p.one_block) {
          tot += acc;  // the scales are applied when the sums are written out
        } else {
          const float sw = ws[i * p.nwb + b0 / p.wb];
          tot += acc * (p.x_at_end ? sw : xs[(b0 / p.xb) * 64 + j] * sw);
        }
      }
      out[i * 64 + j] = tot;
    }
  }
}

[[maybe_unused]] void f32_kernel_scalar(int rows, int vectors, const float* w, std::int64_t ldw, const float* xt, std::int64_t k0,
                                        std::int64_t k1, float* out) {
  for (int i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < 16 * vectors; ++j) {
      float acc = out[i * 64 + j];
      for (std::int64_t k = k0; k < k1; ++k) acc += xt[k * GemmActivations::kTile + j] * w[i * ldw + k];
      out[i * 64 + j] = acc;
    }
  }
}

// Rows per kernel call. AVX-512: R x V sums in registers (24 of the 32 vector registers). AVX2
// (and the portable loops): 4 rows x 16 tokens, 8 registers of sums beside 4 of activations and 2
// of weights in the 16 (8 independent FMA chains; 3 rows gave 6).
#ifdef RLSIM_AVX512
constexpr int kRows = 6;
#else
constexpr int kRows = 4;
#endif
static_assert(kPanelRows % kRows == 0);

template <int R, bool kScaled>
void run_bf16(int vectors, const std::uint16_t* w, std::int64_t ldw, const float* ws, const BlockPlan& p, const std::uint32_t* xt,
              const float* xs, std::int64_t k0, std::int64_t k1, float* out) {
#ifdef RLSIM_AVX512
  // Blocks narrower than this many columns: two token vectors at a time, with the totals in
  // registers (wider blocks amortise the stores and keep four vectors' reuse of each weight pair:
  // block128 FP8 ran 176-182 GMAC/s that way against 165-170 in pairs). Every lane's arithmetic
  // is the same whichever call it falls in.
  constexpr std::int64_t kNarrowBlock = 64;
  if (kScaled && p.kb < kNarrowBlock) {
    for (int v0 = 0; v0 < vectors; v0 += 2) {
      const int off = 16 * v0;
      if (vectors - v0 >= 2) {
        bf16_kernel<R, 2, true>(w, ldw, ws, p, xt + off, xs + off, k0, k1, out + off);
      } else {
        bf16_kernel<R, 1, true>(w, ldw, ws, p, xt + off, xs + off, k0, k1, out + off);
      }
    }
    return;
  }
  switch (vectors) {
    case 1:
      return bf16_kernel<R, 1, kScaled>(w, ldw, ws, p, xt, xs, k0, k1, out);
    case 2:
      return bf16_kernel<R, 2, kScaled>(w, ldw, ws, p, xt, xs, k0, k1, out);
    case 3:
      return bf16_kernel<R, 3, kScaled>(w, ldw, ws, p, xt, xs, k0, k1, out);
    default:
      return bf16_kernel<R, 4, kScaled>(w, ldw, ws, p, xt, xs, k0, k1, out);
  }
#elif defined(RLSIM_AVX2)
  for (int v = 0; v < vectors; ++v) avx2::bf16_kernel<R>(w, ldw, ws, p, xt + 16 * v, xs + 16 * v, k0, k1, out + 16 * v, kScaled);
#else
  bf16_kernel_scalar(R, vectors, w, ldw, ws, p, xt, xs, k0, k1, out);
#endif
}

void run_f32(int vectors, const float* w, std::int64_t ldw, const float* xt, std::int64_t k0, std::int64_t k1, float* out) {
#ifdef RLSIM_AVX512
  switch (vectors) {
    case 1:
      return f32_kernel<kRows, 1>(w, ldw, xt, k0, k1, out);
    case 2:
      return f32_kernel<kRows, 2>(w, ldw, xt, k0, k1, out);
    case 3:
      return f32_kernel<kRows, 3>(w, ldw, xt, k0, k1, out);
    default:
      return f32_kernel<kRows, 4>(w, ldw, xt, k0, k1, out);
  }
#elif defined(RLSIM_AVX2)
  for (int v = 0; v < vectors; ++v) avx2::f32_kernel<kRows>(w, ldw, xt + 16 * v, k0, k1, out + 16 * v);
#else
  f32_kernel_scalar(kRows, vectors, w, ldw, xt, k0, k1, out);
#endif
}

// Per-thread buffers, grown as needed and kept between calls: the decoded panel, its scales, and
// the panel's sums for one token tile.
struct PanelBuffers {
  std::vector<std::uint16_t> codes;
  std::vector<float> scales, values;
  std::vector<float> sums;
};

BlockPlan block_plan(const PackedWeight& w, const GemmActivations& x) {
  BlockPlan p;
  p.wb = weight_block_cols(w), p.nwb = (x.cols + p.wb - 1) / p.wb, p.xb = x.block_cols;
  const std::int64_t kb = std::min(p.wb, p.xb);
  p.one_block = kb >= x.cols;
  p.x_at_end = p.xb >= x.cols;
  if (!p.one_block && ((p.wb < x.cols && p.wb % kb != 0) || (p.xb < x.cols && p.xb % kb != 0) || kb % 2 != 0)) {
    throw std::invalid_argument(
        fmt::format("gemm: weight blocks of {} and activation blocks of {} columns do not nest", p.wb, p.xb));
  }
  constexpr std::int64_t kL1Columns = 128;  // 64 tokens x 128 columns of BF16 codes: 16 KB
  p.kb = p.one_block ? x.kpad : kb;
  p.kc = p.one_block ? kL1Columns : (kb >= kL1Columns ? kb : kL1Columns / kb * kb);
  return p;
}

// Rows [r0, r0 + n) of one job: decode the panel, then every token tile against it.
void run_panel(const GemmJob& j, std::int64_t r0, std::int64_t n, PanelBuffers& buf) {
  const PackedWeight& w = *j.w;
  const GemmActivations& x = *j.x;
  const std::int64_t ld = x.kpad, kend = round_up(x.cols, 2);
  buf.sums.resize(static_cast<std::size_t>(kPanelRows * GemmActivations::kTile));
  // Writes the tile's sums into y: one block, times the row's and the token's scale; blocked
  // weights with one activation block, times the token's scale; FP32, as they are.
  enum class Scale { kNone, kToken, kRowAndToken };
  auto scatter = [&](std::int64_t t0, const float* ws, std::int64_t nwb, Scale scale) {
    for (std::int64_t t = t0; t < std::min(x.tokens, t0 + GemmActivations::kTile); ++t) {
      float* yt = j.y + t * j.ldy + r0;  // n consecutive outputs of token t
      const float st = scale != Scale::kNone ? x.scales[x.scale_index(t, 0)] : 1.0f;
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = buf.sums[static_cast<std::size_t>(i * 64 + (t - t0))];
        yt[i] = scale == Scale::kRowAndToken ? v * (ws[i * nwb] * st) : (scale == Scale::kToken ? v * st : v);
      }
    }
  };
  if (x.bf16) {
    const BlockPlan p = block_plan(w, x);
    buf.codes.assign(static_cast<std::size_t>(kPanelRows * ld), 0);
    buf.scales.assign(static_cast<std::size_t>(kPanelRows * p.nwb), 0.0f);
    if (w.scales_fold_into_bf16()) {
      w.decode_rows_bf16_scaled(r0, r0 + n, buf.codes.data(), ld);
      std::fill(buf.scales.begin(), buf.scales.end(), w.tensor_scale());  // p.nwb == 1
    } else {
      w.decode_rows_bf16(r0, r0 + n, buf.codes.data(), ld);
      w.block_scales(r0, r0 + n, buf.scales.data());
    }
    const Scale sums_scale = p.one_block ? Scale::kRowAndToken : (p.x_at_end ? Scale::kToken : Scale::kNone);
#ifdef RLSIM_AMX
    const bool emulate_amx = amx::emulate.load(std::memory_order_relaxed);
    const bool use_amx = (emulate_amx || amx::active()) && p.kb % amx::kTileColumns == 0;  // one block: p.kb is the padded row
    const int groups = static_cast<int>((n + amx::kTileRows - 1) / amx::kTileRows);
#endif
    for (std::int64_t t0 = 0; t0 < x.tokens; t0 += GemmActivations::kTile) {
      const int vectors = tile_vectors(x, t0);
      const std::uint32_t* xt = x.pairs.data() + x.pair_index(t0, 0);
      const float* xs = x.scales.data() + x.scale_index(t0, 0);
      std::fill(buf.sums.begin(), buf.sums.end(), 0.0f);
#ifdef RLSIM_AMX
      if (use_amx) {
        (emulate_amx ? amx::emulated::panel_tile : amx::panel_tile)(buf.codes.data(), ld, buf.scales.data(), p, xt, xs, x.kpad,
                                                                    groups, vectors, buf.sums.data());
        scatter(t0, buf.scales.data(), p.nwb, sums_scale);
        continue;
      }
#endif
      for (std::int64_t k0 = 0; k0 < kend; k0 += p.kc) {
        const std::int64_t k1 = std::min(kend, k0 + p.kc);
        if (p.one_block) {
          for (std::int64_t i0 = 0; i0 < n; i0 += kRows)
            run_bf16<kRows, false>(vectors, buf.codes.data() + i0 * ld, ld, nullptr, p, xt, xs, k0, k1,
                                   buf.sums.data() + i0 * 64);
        } else {
          for (std::int64_t i0 = 0; i0 < n; i0 += kRows)
            run_bf16<kRows, true>(vectors, buf.codes.data() + i0 * ld, ld, buf.scales.data() + i0 * p.nwb, p, xt, xs, k0, k1,
                                  buf.sums.data() + i0 * 64);
        }
      }
      scatter(t0, buf.scales.data(), p.nwb, sums_scale);
    }
    return;
  }
  constexpr std::int64_t kL1Columns = 64;  // 64 tokens x 64 columns of FP32: 16 KB
  buf.values.assign(static_cast<std::size_t>(kPanelRows * ld), 0.0f);
  w.decode_rows_f32(r0, r0 + n, buf.values.data(), ld);
  for (std::int64_t t0 = 0; t0 < x.tokens; t0 += GemmActivations::kTile) {
    const int vectors = tile_vectors(x, t0);
    const float* xt = x.values.data() + x.value_index(t0, 0);
    std::fill(buf.sums.begin(), buf.sums.end(), 0.0f);
    for (std::int64_t k0 = 0; k0 < x.cols; k0 += kL1Columns) {
      for (std::int64_t i0 = 0; i0 < n; i0 += kRows)
        run_f32(vectors, buf.values.data() + i0 * ld, ld, xt, k0, std::min(x.cols, k0 + kL1Columns), buf.sums.data() + i0 * 64);
    }
    scatter(t0, nullptr, 0, Scale::kNone);
  }
}

}  // namespace

bool gemm_uses_amx() {
#ifdef RLSIM_AMX
  return amx::active();
#else
  return false;
#endif
}

bool gemm_emulate_amx(bool on) {
#ifdef RLSIM_AMX
  amx::emulate.store(on, std::memory_order_relaxed);
  return true;
#else
  return !on;
#endif
}

void gemm_allow_amx(bool allow) {
#ifdef RLSIM_AMX
  amx::allowed.store(allow, std::memory_order_relaxed);
#else
  (void)allow;
#endif
}

void gemm(std::span<const GemmJob> jobs) {
  // Work units: panels of kPanelRows rows, each costing rows x cols x tokens multiply-adds.
  struct Unit {
    std::size_t job;
    std::int64_t r0, n, cost;
  };
  std::vector<Unit> units;
  std::int64_t total = 0;
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const GemmJob& j = jobs[k];
    if (j.w == nullptr || j.x == nullptr || j.y == nullptr || j.x->cols != j.w->cols() || (j.x->bf16 && !j.w->codes_in_bf16())) {
      throw std::invalid_argument("gemm: job without operands, or activations laid out for another kernel");
    }
    for (std::int64_t r0 = 0; r0 < j.w->rows(); r0 += kPanelRows) {
      const std::int64_t n = std::min(kPanelRows, j.w->rows() - r0), cost = n * j.w->cols() * j.x->tokens;
      units.push_back({k, r0, n, cost});
      total += cost;
    }
  }
  auto run = [&](std::int64_t w0, std::int64_t w1) {
    thread_local PanelBuffers buf;
    std::int64_t at = 0;
    for (const Unit& u : units) {
      if (at >= w0 && at < w1) run_panel(jobs[u.job], u.r0, u.n, buf);
      at += u.cost;
    }
  };
  split_work(total, units.size() > 1, run);
}

}  // namespace rlsim::models
