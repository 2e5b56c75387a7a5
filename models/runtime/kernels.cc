#include "models/runtime/kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "models/precision/simd.h"

#ifdef RLSIM_SIMD16
#include <cpuid.h>  // the CPU vendor and family, for the GEMVs' prefetch (host_cpu, kStreamPrefetch)
#endif
#ifdef __F16C__
#include <immintrin.h>  // _cvtsh_ss; hosts with F16C but without AVX-512 (Zen 2/3, Haswell) get it only here
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace rlsim::models {
namespace {

using simd::kE4M3Fix;

// Bytes of a cache line (x86-64 and AArch64): the step of the GEMVs' prefetch loops and of
// read_into_cache.
constexpr std::int64_t kCacheLineBytes = 64;

// At least n elements of a thread's reused scratch vector: it only grows, so a call after a larger
// one neither shrinks nor value-initialises it (a decode step's GEMVs alternate between sizes, and
// resize zero-filled the difference every time). Callers write every element they then read.
template <typename T>
T* scratch(std::vector<T>& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// The value of an E4M3 code without NaN (0x7F / 0xFF are excluded at construction), exact.
inline float e4m3_value(std::uint32_t c) {
  const auto extended = static_cast<std::uint32_t>(static_cast<std::int32_t>(static_cast<std::int8_t>(c)));
  return std::bit_cast<float>((extended << simd::kE4M3Fp32Shift) & simd::kE4M3Fp32Mask) * kE4M3Fix;
}

// The value of an E8M0 code other than 0xFF (NaN, excluded at construction): 2^(c - 127), code 0
// the FP32 subnormal 2^-127.
inline float e8m0_value(std::uint32_t c) { return c == 0 ? 0x1p-127f : std::bit_cast<float>(c << 23); }

inline float bf16_value(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

// A block scale as stored in element S (FP32, BF16, E8M0 or E4M3; NaN codes are excluded at
// construction): one definition for the scalar lookup and the SIMD broadcast.
template <Element S>
inline float scale_value(const std::uint8_t* scales, std::size_t idx) {
  if constexpr (S == Element::kFp32) {
    float f;
    std::memcpy(&f, scales + 4 * idx, 4);
    return f;
  } else if constexpr (S == Element::kBf16) {
    std::uint16_t h;
    std::memcpy(&h, scales + 2 * idx, 2);
    return bf16_value(h);
  } else if constexpr (S == Element::kE8M0) {
    return e8m0_value(scales[idx]);
  } else {
    return e4m3_value(scales[idx]);
  }
}

// The INT4 integer kernel (int4_dot_tile) takes group scales 0 or of magnitude in [2^-40, 2^40)
// (else the weight takes the FP32 kernel), so that no scale product or sum leaves FP32's normal range.
constexpr int kInt4DotMaxScaleLog2 = 40;
constexpr std::uint32_t kBf16ExponentBias = 127;

// Bytes per row of a tile chunk: 16 elements (32 for 4-bit codes) in the layout's storage.
constexpr std::int64_t chunk_bytes(WeightLayout l) {
  return l == WeightLayout::kF32 ? 64 : (l == WeightLayout::kE4M3 || l == WeightLayout::kNibble ? 16 : 32);
}

float f16_value(std::uint16_t h) {
#ifdef __F16C__
  return _cvtsh_ss(h);
#else
  return static_cast<float>(decode(Element::kFp16, h));
#endif
}

}  // namespace

std::string_view layout_name(WeightLayout l) {
  switch (l) {
    case WeightLayout::kF32:
      return "f32";
    case WeightLayout::kBf16:
      return "bf16";
    case WeightLayout::kF16:
      return "f16";
    case WeightLayout::kE4M3:
      return "e4m3";
    case WeightLayout::kNibble:
      return "nibble";
    case WeightLayout::kE4M3KMajor:
      return "e4m3-kmajor";
  }
  return "?";
}

bool simd_kernels_available() {
#ifdef RLSIM_SIMD16
  return true;
#else
  return false;
#endif
}

std::string_view simd_kernels_name() {
#if defined(RLSIM_AVX512)
  return "AVX-512";
#elif defined(RLSIM_AVX2)
  return "AVX2";
#else
  return "scalar";
#endif
}

#ifndef RLSIM_SIMD16
std::string gemv_prefetch_name() { return "none"; }
#endif

WeightLayout PackedWeight::layout_for(const Format& f) {
  const bool scaled = f.scaling.kind != ScaleKind::kNone;
  switch (f.element) {
    case Element::kBf16:
      return scaled ? WeightLayout::kF32 : WeightLayout::kBf16;
    case Element::kFp16:
      return scaled ? WeightLayout::kF32 : WeightLayout::kF16;
    case Element::kFp8E4M3:
      return f.scaling.kind == ScaleKind::kMx32 ? WeightLayout::kE4M3KMajor : WeightLayout::kE4M3;
    case Element::kInt4:
    case Element::kFp4E2M1:
      return WeightLayout::kNibble;
    default:
      return WeightLayout::kF32;
  }
}

PackedWeight::PackedWeight(const QuantizedTensor& q) {
  // A kernel of its own where the values allow it (the E4M3 bit trick needs finite scales below
  // 2^8 and no NaN code), the decoded values otherwise.
  WeightLayout l = layout_for(q.format);
  bool nan_scale = false, big_scale = false;
  if (q.format.scaling.kind != ScaleKind::kNone) {
    for (double s : q.scales) nan_scale |= !std::isfinite(s), big_scale |= s >= 256.0;
  }
  if (l == WeightLayout::kE4M3 || l == WeightLayout::kE4M3KMajor) {
    const bool nan_code = std::any_of(q.codes.begin(), q.codes.end(), [](std::uint32_t c) { return (c & 0x7Fu) == 0x7Fu; });
    if (nan_scale || big_scale || nan_code || q.tensor_scale != 1.0) l = WeightLayout::kF32;
  } else if (l == WeightLayout::kNibble && (nan_scale || !std::isfinite(q.tensor_scale))) {
    l = WeightLayout::kF32;
  }
  configure(q.format, q.rows, q.cols, q.block_rows, q.block_cols, l);
  allocate();
  store_loader(q);
  loader_to_kernel();
}

PackedWeight PackedWeight::from_values(const float* v, std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) throw std::invalid_argument("PackedWeight::from_values: shape must be positive");
  PackedWeight p;
  p.configure(Format{Element::kFp32, {}}, rows, cols, rows, cols, WeightLayout::kF32);
  p.allocate();
  std::memcpy(p.data_.data(), v, static_cast<std::size_t>(rows * cols) * sizeof(float));
  p.loader_to_kernel();
  return p;
}

PackedWeight PackedWeight::reloadable(const Format& f, std::int64_t rows, std::int64_t cols, std::int64_t block_rows,
                                      std::int64_t block_cols) {
  if (rows <= 0 || cols <= 0 || block_rows <= 0 || block_cols <= 0) {
    throw std::invalid_argument(fmt::format("PackedWeight::reloadable: shape [{}, {}] and block {}x{} must be positive", rows,
                                            cols, block_rows, block_cols));
  }
  PackedWeight p;
  p.configure(f, rows, cols, block_rows, block_cols, layout_for(f));
  p.allocate();
  return p;
}

namespace {
// The 16 code values of a 4-bit element times each of the 256 E4M3 scale codes, 64-byte rows:
// row s is what the NVFP4 kernel would get multiplying the table by e4m3_value(s), read with one
// load instead (every product is exact: a 4-bit value has <= 3 significant bits and an E4M3
// scale <= 4). Null for any element other than INT4 and E2M1 (the nibble layout's). 16 KB per
// element, built on first use.
const float* e4m3_scaled_lut(Element e) {
  struct Table {
    alignas(64) std::array<float, 256 * 16> v;
  };
  auto build = [](Element el) {
    auto t = std::make_unique<Table>();
    for (std::uint32_t sc = 0; sc < 256; ++sc) {
      for (std::uint32_t c = 0; c < 16; ++c) t->v[sc * 16 + c] = static_cast<float>(decode(el, c)) * e4m3_value(sc);
    }
    return t;
  };
  static const std::unique_ptr<Table> fp4 = build(Element::kFp4E2M1), int4 = build(Element::kInt4);
  switch (e) {
    case Element::kFp4E2M1:
      return fp4->v.data();
    case Element::kInt4:
      return int4->v.data();
    default:
      return nullptr;
  }
}
}  // namespace

void PackedWeight::configure(const Format& f, std::int64_t rows, std::int64_t cols, std::int64_t block_rows,
                             std::int64_t block_cols, WeightLayout layout) {
  format_ = f;
  element_ = f.element;
  layout_ = layout;
  rows_ = rows, cols_ = cols;
  scaled_ = f.scaling.kind != ScaleKind::kNone && layout != WeightLayout::kF32;
  scale_element_ = scaled_ ? traits(f.scaling.kind).scale_element : Element::kFp32;
  block_rows_ = scaled_ ? block_rows : rows_;
  block_cols_ = scaled_ ? block_cols : cols_;
  grid_rows_ = (rows_ + block_rows_ - 1) / block_rows_;
  grid_cols_ = (cols_ + block_cols_ - 1) / block_cols_;
  tile_scales_ = layout == WeightLayout::kNibble && scaled_ && block_rows_ == 1;
  tensor_scale_ = 1.0f;
  chunk_cols_ = layout_ == WeightLayout::kNibble ? 32 : 16;
  chunk_bytes_ = chunk_bytes(layout_);
  chunks_ = (cols_ + chunk_cols_ - 1) / chunk_cols_;
  e4m3_luts_ = nullptr;
  if (layout_ == WeightLayout::kNibble) {
    for (std::uint32_t c = 0; c < 16; ++c) lut_[c] = static_cast<float>(decode(element_, c));
    if (scale_element_ == Element::kFp8E4M3) e4m3_luts_ = e4m3_scaled_lut(element_);
  }
  switch (layout_) {
    case WeightLayout::kE4M3:
      simd_ok_ = grid_cols_ == 1 || block_cols_ % 16 == 0;
      break;
    case WeightLayout::kNibble:
      simd_ok_ = grid_cols_ == 1 || block_cols_ % 32 == 0 || block_cols_ == 16;
      break;
    case WeightLayout::kE4M3KMajor:
      simd_ok_ = !scaled_ || block_cols_ == 32;
      break;
    default:
      simd_ok_ = true;
      break;
  }
}

int PackedWeight::scale_size() const { return traits(scale_element_).bits / 8; }  // FP32 4, BF16 2, E8M0 / E4M3 1

std::size_t PackedWeight::kernel_code_bytes() const {
  if (layout_ == WeightLayout::kE4M3KMajor) return static_cast<std::size_t>(kmajor_panels() * kKMajorPanelRows * cols_);
  const std::int64_t tiles = (rows_ + kTileRows - 1) / kTileRows;
  return static_cast<std::size_t>(tiles * tile_bytes());
}

std::size_t PackedWeight::kernel_scale_bytes() const {
  if (!scaled_) return 0;
  const auto sb = static_cast<std::size_t>(scale_size());
  if (layout_ == WeightLayout::kE4M3KMajor) return static_cast<std::size_t>((grid_cols_ + 1) / 2 * 2 * rows_) * sb;
  if (tile_scales_) return static_cast<std::size_t>((rows_ + kTileRows - 1) / kTileRows * kTileRows * grid_cols_) * sb;
  return static_cast<std::size_t>(grid_rows_ * grid_cols_) * sb;
}

std::size_t PackedWeight::loader_code_bytes() const {
  const auto n = static_cast<std::size_t>(rows_ * cols_);
  switch (layout_) {
    case WeightLayout::kF32:
      return 4 * n;
    case WeightLayout::kBf16:
    case WeightLayout::kF16:
      return 2 * n;
    case WeightLayout::kE4M3:
    case WeightLayout::kE4M3KMajor:
      return n;
    case WeightLayout::kNibble:
      return static_cast<std::size_t>(rows_ * ((cols_ + 1) / 2));
  }
  return 0;
}

std::size_t PackedWeight::loader_scale_bytes() const {
  return scaled_ ? static_cast<std::size_t>(grid_rows_ * grid_cols_) * static_cast<std::size_t>(scale_size()) : 0;
}

void PackedWeight::allocate() {
  data_.assign(std::max(kernel_code_bytes(), loader_code_bytes()), 0);  // padding: code 0 = +0
  scale_data_.assign(std::max(kernel_scale_bytes(), loader_scale_bytes()), 0);
}

std::size_t PackedWeight::offset(std::int64_t r, std::int64_t c) const {
  return static_cast<std::size_t>((((r / kTileRows) * chunks_ + c / chunk_cols_) * kTileRows + r % kTileRows) * chunk_bytes_);
}

std::size_t PackedWeight::block_index(std::int64_t r, std::int64_t b) const {
  if (layout_ == WeightLayout::kE4M3KMajor) return static_cast<std::size_t>(((b / 2) * rows_ + r) * 2 + b % 2);
  if (tile_scales_) return static_cast<std::size_t>(((r / kTileRows) * grid_cols_ + b) * kTileRows + r % kTileRows);
  return static_cast<std::size_t>((r / block_rows_) * grid_cols_ + b);
}

void PackedWeight::tile_row_scale_bases(std::int64_t t, std::size_t* out) const {
  const std::int64_t first = t * kTileRows;
  const std::int64_t r = std::min(first, rows_ - 1);
  std::int64_t q = r / block_rows_, at = r % block_rows_;  // the block row of row `first + i`, and its place in it
  for (int i = 0; i < kTileRows; ++i) {
    out[i] = static_cast<std::size_t>(q * grid_cols_);
    if (first + i + 1 < rows_ && ++at == block_rows_) at = 0, ++q;  // past the last row: the last row's
  }
}

void PackedWeight::check_fits(const QuantizedTensor& q) const {
  if (!(q.format == format_) || q.rows != rows_ || q.cols != cols_) {
    throw std::invalid_argument(fmt::format("weight [{}, {}] in {} cannot be stored into a weight [{}, {}] in {}", q.rows, q.cols,
                                            q.format.str(), rows_, cols_, format_.str()));
  }
  if (scaled_ && (q.block_rows != block_rows_ || q.block_cols != block_cols_ ||
                  q.scale_codes.size() != static_cast<std::size_t>(grid_rows_ * grid_cols_))) {
    throw std::invalid_argument(
        fmt::format("weight blocks {}x{} differ from the layout's {}x{}", q.block_rows, q.block_cols, block_rows_, block_cols_));
  }
  if (layout_ == WeightLayout::kE4M3 || layout_ == WeightLayout::kE4M3KMajor) {
    if (q.tensor_scale != 1.0)
      throw std::invalid_argument("fp8-e4m3 weight with a tensor scale other than 1 does not fit the e4m3 kernel layout");
    if (std::any_of(q.codes.begin(), q.codes.end(), [](std::uint32_t c) { return (c & 0x7Fu) == 0x7Fu; })) {
      throw std::invalid_argument("fp8-e4m3 weight holds a NaN code (a NaN in the master weights)");
    }
    if (scaled_) {
      for (double s : q.scales) {
        if (!std::isfinite(s) || s >= 256.0)
          throw std::invalid_argument(
              fmt::format("fp8-e4m3 block scale {} is NaN or >= 2^8 (outside the e4m3 kernel's range)", s));
      }
    }
  } else if (layout_ == WeightLayout::kNibble) {
    if (!std::isfinite(q.tensor_scale)) throw std::invalid_argument("4-bit weight with a non-finite tensor scale");
    if (scaled_) {
      for (double s : q.scales) {
        if (!std::isfinite(s)) throw std::invalid_argument("4-bit weight with a NaN block scale (a NaN in the master weights)");
      }
    }
  }
}

std::size_t PackedWeight::store_loader(const QuantizedTensor& q) {
  check_fits(q);
  const auto n = static_cast<std::size_t>(rows_ * cols_);
  std::uint8_t* d = data_.data();
  switch (layout_) {
    case WeightLayout::kF32: {
      if (format_.element == Element::kFp32) {
        for (std::size_t i = 0; i < n; ++i) std::memcpy(d + 4 * i, &q.codes[i], 4);
      } else {
        const std::vector<double> v = dequantize(q);
        for (std::size_t i = 0; i < n; ++i) {
          const auto f = static_cast<float>(v[i]);
          std::memcpy(d + 4 * i, &f, 4);
        }
      }
      break;
    }
    case WeightLayout::kBf16:
    case WeightLayout::kF16:
      for (std::size_t i = 0; i < n; ++i) {
        const auto h = static_cast<std::uint16_t>(q.codes[i]);
        std::memcpy(d + 2 * i, &h, 2);
      }
      break;
    case WeightLayout::kE4M3:
    case WeightLayout::kE4M3KMajor:
      for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<std::uint8_t>(q.codes[i]);
      break;
    case WeightLayout::kNibble: {
      // compressed-tensors pack-quantized: element 2j in the low nibble; INT4 offset-binary.
      const std::uint32_t bias = element_ == Element::kInt4 ? 8u : 0u;
      const auto row_bytes = static_cast<std::size_t>((cols_ + 1) / 2);
      std::fill(d, d + loader_code_bytes(), std::uint8_t{0});
      for (std::int64_t r = 0; r < rows_; ++r) {
        std::uint8_t* row = d + static_cast<std::size_t>(r) * row_bytes;
        const std::uint32_t* c = q.codes.data() + r * cols_;
        for (std::int64_t j = 0; j < cols_; ++j)
          row[j / 2] = static_cast<std::uint8_t>(row[j / 2] | (((c[j] ^ bias) & 0xFu) << (4 * (j & 1))));
      }
      break;
    }
  }
  if (scaled_) {
    const auto sb = static_cast<std::size_t>(scale_size());
    for (std::size_t i = 0; i < q.scale_codes.size(); ++i) {
      const std::uint32_t code = q.scale_codes[i];
      std::memcpy(scale_data_.data() + i * sb, &code, sb);  // little-endian low bytes
    }
  }
  tensor_scale_ = layout_ == WeightLayout::kNibble ? static_cast<float>(q.tensor_scale) : 1.0f;
  return loader_bytes();
}

std::vector<std::uint8_t> PackedWeight::loader_image() const {
  std::vector<std::uint8_t> out(data_.begin(), data_.begin() + static_cast<std::ptrdiff_t>(loader_code_bytes()));
  out.insert(out.end(), scale_data_.begin(), scale_data_.begin() + static_cast<std::ptrdiff_t>(loader_scale_bytes()));
  return out;
}

namespace {
// Scratch for the in-place conversions (one per thread: layers may be converted in parallel).
std::vector<std::uint8_t>& scratch_buffer() {
  thread_local std::vector<std::uint8_t> s;
  return s;
}
// Bytes per element in the loader layout of a tiled layout other than kNibble.
std::size_t element_bytes(WeightLayout l) {
  return l == WeightLayout::kF32 ? 4 : (l == WeightLayout::kBf16 || l == WeightLayout::kF16 ? 2 : 1);
}
}  // namespace

std::size_t PackedWeight::loader_to_kernel() {
  const std::size_t moved = relayout(true);
  // The integer W4A4 kernel reads E4M3 scale bits as FP32 bits without a sign (NVFP4's block
  // scales are amax / 6 / tensor scale, never negative; a checkpoint's negative code falls back).
  e2m1_dot_ok_ = layout_ == WeightLayout::kNibble && element_ == Element::kFp4E2M1 && tile_scales_ &&
                 scale_element_ == Element::kFp8E4M3 && block_cols_ == 16 && cols_ % 32 == 0 &&
                 std::none_of(scale_data_.begin(), scale_data_.begin() + static_cast<std::ptrdiff_t>(kernel_scale_bytes()),
                              [](std::uint8_t b) { return b >= 0x80; });
  int4_dot_ok_ = int4_dot_applies();
  return moved;
}

bool PackedWeight::int4_dot_applies() const {
#ifndef RLSIM_SIMD16
  return false;  // the portable build keeps the FP32 kernel
#else
  if (layout_ != WeightLayout::kNibble || element_ != Element::kInt4 || !scaled_ || !tile_scales_ ||
      scale_element_ != Element::kBf16 || tensor_scale_ != 1.0f || !(grid_cols_ == 1 || block_cols_ % chunk_cols_ == 0))
    return false;
  // Every scale 0 or of magnitude in [2^-40, 2^40): BF16 exponent field in [127 - 40, 127 + 40).
  const std::size_t n = kernel_scale_bytes() / sizeof(std::uint16_t);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, scale_data_.data() + i * sizeof h, sizeof h);
    const std::uint32_t exponent = (h >> 7) & 0xFFu;
    if ((h & 0x7FFFu) != 0 &&
        (exponent < kBf16ExponentBias - kInt4DotMaxScaleLog2 || exponent >= kBf16ExponentBias + kInt4DotMaxScaleLog2))
      return false;
  }
  return true;
#endif
}

std::size_t PackedWeight::kernel_to_loader() {
  e2m1_dot_ok_ = false;
  int4_dot_ok_ = false;
  return relayout(false);
}

std::size_t PackedWeight::relayout(bool to_kernel) {
  // The source layout goes to the scratch buffer, the storage is zeroed (padding: code 0 = +0),
  // then every element is placed: `place(loader offset, kernel offset, bytes)` copies in the
  // direction of the conversion.
  std::vector<std::uint8_t>& src = scratch_buffer();
  const std::size_t lc = loader_code_bytes(), kc = kernel_code_bytes();
  src.assign(data_.begin(), data_.begin() + static_cast<std::ptrdiff_t>(to_kernel ? lc : kc));
  std::fill(data_.begin(), data_.end(), std::uint8_t{0});
  std::uint8_t* d = data_.data();
  auto place = [&](std::size_t loader_at, std::size_t kernel_at, std::size_t n) {
    if (to_kernel) {
      std::memcpy(d + kernel_at, src.data() + loader_at, n);
    } else {
      std::memcpy(d + loader_at, src.data() + kernel_at, n);
    }
  };
  if (layout_ == WeightLayout::kE4M3KMajor) {
    // [rows, cols] <-> panels of 16 rows k-major, a row at a time (the panel, 16 bytes a column,
    // stays in L1 or L2 while its rows are placed)
    for (std::int64_t r = 0; r < rows_; ++r) {
      for (std::int64_t c = 0; c < cols_; ++c) place(static_cast<std::size_t>(r * cols_ + c), kmajor_offset(r, c), 1);
    }
  } else if (layout_ == WeightLayout::kNibble) {
    // Loader: element j of a row in byte j / 2, low nibble first, INT4 offset-binary. Kernel:
    // chunk byte k holds element k (low) and k + 16 (high), two's complement.
    const std::uint8_t bias = element_ == Element::kInt4 ? 8 : 0;
    const auto row_bytes = (cols_ + 1) / 2;
    for (std::int64_t r = 0; r < rows_; ++r) {
      std::uint8_t* lrow = (to_kernel ? src.data() : d) + r * row_bytes;
      auto get = [&](std::int64_t j) {
        return j < cols_ ? static_cast<std::uint8_t>(((lrow[j / 2] >> (4 * (j & 1))) ^ bias) & 0xF) : std::uint8_t{0};
      };
      auto put = [&](std::int64_t j, unsigned code) {
        if (j < cols_) lrow[j / 2] = static_cast<std::uint8_t>(lrow[j / 2] | ((code ^ bias) & 0xFu) << (4 * (j & 1)));
      };
      for (std::int64_t c0 = 0; c0 < cols_; c0 += 32) {
        std::uint8_t* chunk = (to_kernel ? d : src.data()) + offset(r, c0);
        if (to_kernel) {
          for (std::int64_t k = 0; k < 16; ++k) chunk[k] = static_cast<std::uint8_t>(get(c0 + k) | get(c0 + k + 16) << 4);
        } else {
          for (std::int64_t k = 0; k < 16; ++k) put(c0 + k, chunk[k]), put(c0 + k + 16, chunk[k] >> 4u);
        }
      }
    }
  } else {
    const std::size_t es = element_bytes(layout_);
    for (std::int64_t r = 0; r < rows_; ++r) {
      for (std::int64_t c0 = 0; c0 < cols_; c0 += chunk_cols_) {
        const auto n = static_cast<std::size_t>(std::min(chunk_cols_, cols_ - c0));
        place(static_cast<std::size_t>(r * cols_ + c0) * es, offset(r, c0), n * es);
      }
    }
  }
  // Bytes: the scratch copy (read + write of the source), the zero fill, the placement.
  const std::size_t from = to_kernel ? lc : kc, to = to_kernel ? kc : lc;
  std::size_t moved = 2 * from + kc + from + to;
  if (scaled_ && (tile_scales_ || layout_ == WeightLayout::kE4M3KMajor)) {
    const std::size_t ls = loader_scale_bytes(), ks = kernel_scale_bytes(), sb = static_cast<std::size_t>(scale_size());
    src.assign(scale_data_.begin(), scale_data_.begin() + static_cast<std::ptrdiff_t>(to_kernel ? ls : ks));
    std::fill(scale_data_.begin(), scale_data_.end(), std::uint8_t{0});
    for (std::int64_t r = 0; r < rows_; ++r) {
      for (std::int64_t b = 0; b < grid_cols_; ++b) {
        const std::size_t loader_at = static_cast<std::size_t>(r * grid_cols_ + b) * sb, kernel_at = block_index(r, b) * sb;
        std::memcpy(scale_data_.data() + (to_kernel ? kernel_at : loader_at), src.data() + (to_kernel ? loader_at : kernel_at),
                    sb);
      }
    }
    moved += 3 * (to_kernel ? ls : ks) + 2 * (to_kernel ? ks : ls);
  }
  return moved;
}

inline float PackedWeight::scale_at(std::size_t idx) const {
  switch (scale_element_) {
    case Element::kFp32:
      return scale_value<Element::kFp32>(scale_data_.data(), idx);
    case Element::kBf16:
      return scale_value<Element::kBf16>(scale_data_.data(), idx);
    case Element::kE8M0:
      return scale_value<Element::kE8M0>(scale_data_.data(), idx);
    default:
      return scale_value<Element::kFp8E4M3>(scale_data_.data(), idx);
  }
}

inline float PackedWeight::scale(std::int64_t r, std::int64_t c) const {
  if (!scaled_) return 1.0f;
  return scale_at(block_index(r, c / block_cols_));
}

inline float PackedWeight::chunk_value(const std::uint8_t* p, std::int64_t k) const {
  switch (layout_) {
    case WeightLayout::kF32: {
      float v;
      std::memcpy(&v, p + 4 * k, 4);
      return v;
    }
    case WeightLayout::kBf16: {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * k, 2);
      return bf16_value(h);
    }
    case WeightLayout::kF16: {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * k, 2);
      return f16_value(h);
    }
    case WeightLayout::kE4M3:
    case WeightLayout::kE4M3KMajor:
      return e4m3_value(p[k]);
    case WeightLayout::kNibble:
      return lut_[k < 16 ? p[k] & 0xFu : p[k % 16] >> 4];
  }
  return 0.0f;
}

float PackedWeight::code_value(std::int64_t r, std::int64_t c) const {
  if (layout_ == WeightLayout::kE4M3KMajor) return e4m3_value(data_[kmajor_offset(r, c)]);
  return chunk_value(data_.data() + offset(r, c), c % chunk_cols_);
}

float PackedWeight::at(std::int64_t r, std::int64_t c) const {
  if (r < 0 || r >= rows_ || c < 0 || c >= cols_) throw std::out_of_range("PackedWeight::at: index outside the matrix");
  float v = code_value(r, c);
  if (scaled_) v *= scale(r, c);  // exact for 4-bit codes; one rounding for E4M3 x FP32
  if (tensor_scale_ != 1.0f) v *= tensor_scale_;
  return v;
}

void PackedWeight::kmajor_scalar(const float* x, float* y, std::int64_t r0, std::int64_t r1) const {
  // The SIMD kernel's order, lane by lane: per 32-column block, the codes' values times x in
  // column order (one FMA chain), then that sum times the block scale added to its segment's
  // partial; the partials added in segment order.
  for (std::int64_t r = r0; r < r1; ++r) {
    float total = 0.0f;
    for (int g = 0; g < kKMajorSegments; ++g) {
      float partial = 0.0f;
      for (std::int64_t b = kmajor_segment_begin(g); b < kmajor_segment_begin(g + 1); ++b) {
        float acc = 0.0f;
        for (std::int64_t c = 32 * b; c < std::min(cols_, 32 * b + 32); ++c) {
          const float w = e4m3_value(data_[kmajor_offset(r, c)]);
#ifdef FP_FAST_FMAF
          acc = std::fma(w, x[c], acc);
#else
          acc += w * x[c];  // no FMA instruction in the target: libm's fma would be emulated
#endif
        }
        const float s = scaled_ ? scale(r, 32 * b) : 1.0f;
#ifdef FP_FAST_FMAF
        partial = std::fma(acc, s, partial);
#else
        partial += acc * s;
#endif
      }
      total += partial;
    }
    y[r - r0] = total;
  }
}

void PackedWeight::gemv_rows_scalar(const float* x, float* y, std::int64_t r0, std::int64_t r1) const {
  if (layout_ == WeightLayout::kE4M3KMajor) {
    kmajor_scalar(x, y, r0, r1);
    return;
  }
  for (std::int64_t r = r0; r < r1; ++r) {
    float acc = 0.0f, s = 1.0f;
    std::int64_t next_block = 0;  // first column of the next scale block
    for (std::int64_t c0 = 0; c0 < cols_; c0 += chunk_cols_) {
      const std::uint8_t* p = data_.data() + offset(r, c0);
      const std::int64_t n = std::min(chunk_cols_, cols_ - c0);
      for (std::int64_t k = 0; k < n; ++k) {
        if (scaled_ && c0 + k >= next_block) {
          s = scale(r, c0 + k);
          next_block = ((c0 + k) / block_cols_ + 1) * block_cols_;
        }
        float w = chunk_value(p, k);
        if (scaled_) w *= s;
        if (tensor_scale_ != 1.0f) w *= tensor_scale_;
#ifdef FP_FAST_FMAF
        acc = std::fma(w, x[c0 + k], acc);
#else
        acc += w * x[c0 + k];  // no FMA instruction in the target: libm's fma would be emulated
#endif
      }
    }
    y[r - r0] = acc;
  }
}

bool PackedWeight::codes_in_bf16() const {
  return layout_ == WeightLayout::kBf16 || layout_ == WeightLayout::kE4M3 || layout_ == WeightLayout::kE4M3KMajor ||
         layout_ == WeightLayout::kNibble;
}

std::int64_t PackedWeight::scale_block_cols() const { return scaled_ && grid_cols_ > 1 ? block_cols_ : cols_; }

namespace {
// BF16 bits of every E4M3 code (NaN codes are excluded from the kernel layouts; their entry is 0).
const std::array<std::uint16_t, 256>& e4m3_bf16_table() {
  static const std::array<std::uint16_t, 256> table = [] {
    std::array<std::uint16_t, 256> t{};
    for (std::uint32_t c = 0; c < 256; ++c) t[c] = (c & 0x7Fu) == 0x7Fu ? 0 : bf16_bits(e4m3_value(c));
    return t;
  }();
  return table;
}
}  // namespace

#ifdef RLSIM_SIMD16
namespace {
// The BF16 bits of a whole 4-bit chunk (16 bytes at p: element k in byte k's low nibble, k + 16
// in its high nibble) into out[0..31]: each nibble looks up the low and the high byte of its
// code's BF16 bits (PSHUFB on the 16-entry byte tables), and the two are interleaved into words.
inline void nibble_chunk_bf16(const std::uint8_t* p, __m128i table_lo, __m128i table_hi, std::uint16_t* out) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i idx[2] = {_mm_and_si128(bytes, low4), _mm_and_si128(_mm_srli_epi16(bytes, 4), low4)};
  for (int h = 0; h < 2; ++h) {
    const __m128i lo = _mm_shuffle_epi8(table_lo, idx[h]), hi = _mm_shuffle_epi8(table_hi, idx[h]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * h), _mm_unpacklo_epi8(lo, hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * h + 8), _mm_unpackhi_epi8(lo, hi));
  }
}

// The BF16 bits of 16 E4M3 codes at p into out[0..15], as e4m3_bf16_table() gives them. A normal
// code (exponent field 1..15) is its magnitude bits moved up 4 with the exponent bias 7 -> 127
// added (E4M3's 3 mantissa bits fit BF16's 7, OCP OFP8 rev. 1.0); a subnormal one (m x 2^-9,
// m = 1..7) is normalised, looked up by PSHUFB in byte tables; zero stays 0; the NaN magnitude 0x7F
// gives 0 as in the table; the sign goes to bit 15.
inline void e4m3_chunk_bf16(const std::uint8_t* p, std::uint16_t* out) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i mag8 = _mm_and_si128(bytes, _mm_set1_epi8(0x7F));
  // Subnormal magnitudes 0..7 (larger ones give lanes the blend below discards).
  const __m128i sub_lo =
      _mm_setr_epi8(0, 0, static_cast<char>(0x80), static_cast<char>(0xC0), 0, 0x20, 0x40, 0x60, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m128i sub_hi = _mm_setr_epi8(0, 0x3B, 0x3B, 0x3B, 0x3C, 0x3C, 0x3C, 0x3C, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m128i idx = _mm_and_si128(mag8, _mm_set1_epi8(0x0F));
  const __m128i slo = _mm_shuffle_epi8(sub_lo, idx), shi = _mm_shuffle_epi8(sub_hi, idx);
  const __m256i sub = _mm256_setr_m128i(_mm_unpacklo_epi8(slo, shi), _mm_unpackhi_epi8(slo, shi));
  const __m256i mag = _mm256_cvtepu8_epi16(mag8);
  const __m256i normal = _mm256_add_epi16(_mm256_slli_epi16(mag, 4), _mm256_set1_epi16(120 << 7));
  const __m256i is_sub = _mm256_cmpgt_epi16(_mm256_set1_epi16(8), mag);
  const __m256i is_nan = _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F));
  const __m256i value = _mm256_andnot_si256(is_nan, _mm256_blendv_epi8(normal, sub, is_sub));
  const __m256i sign = _mm256_slli_epi16(_mm256_and_si256(_mm256_cvtepu8_epi16(bytes), _mm256_set1_epi16(0x80)), 8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_or_si256(value, sign));
}
}  // namespace
#endif

void PackedWeight::decode_rows_bf16(std::int64_t r0, std::int64_t r1, std::uint16_t* out, std::int64_t ld) const {
  if (!codes_in_bf16()) throw std::logic_error("PackedWeight::decode_rows_bf16: layout has no BF16 codes");
  const auto& e4m3 = e4m3_bf16_table();
  for (std::int64_t r = r0; r < r1; ++r) std::fill(out + (r - r0) * ld + cols_, out + (r - r0) * ld + ld, std::uint16_t{0});
  if (layout_ == WeightLayout::kE4M3KMajor) {
    // Panels of 16 rows k-major: kKMajorDecodeColumns columns of a panel (1 KB, in L1) for each
    // of its rows in the range, then the next columns (one row at a time over all the columns of
    // the old [cols, rows] layout touched every line once per row: a 48-row panel of a 1536 x 576
    // weight took 1.34 ms a matrix that way, 0.39 ms by column blocks, on one Zen 3 core).
    constexpr std::int64_t kKMajorDecodeColumns = 64;
    for (std::int64_t p = r0 / kKMajorPanelRows; p * kKMajorPanelRows < r1; ++p) {
      const std::int64_t first = std::max(r0, p * kKMajorPanelRows), last = std::min(r1, (p + 1) * kKMajorPanelRows);
      for (std::int64_t c0 = 0; c0 < cols_; c0 += kKMajorDecodeColumns) {
        const std::int64_t c1 = std::min(cols_, c0 + kKMajorDecodeColumns);
        for (std::int64_t r = first; r < last; ++r) {
          std::uint16_t* o = out + (r - r0) * ld;
          // Row r's byte of column pair (c, c + 1) at q + 16 c, column c + 1's kKMajorRowGroup after.
          const std::uint8_t* q = data_.data() + kmajor_offset(r, 0);
          std::int64_t c = c0;
          for (; c + 1 < c1; c += 2) {
            o[c] = e4m3[q[c * kKMajorPanelRows]];
            o[c + 1] = e4m3[q[c * kKMajorPanelRows + kKMajorRowGroup]];
          }
          if (c < c1) o[c] = e4m3[data_[kmajor_offset(r, c)]];  // an odd last column
        }
      }
    }
    return;
  }
  std::uint16_t nib[16];
  for (int c = 0; c < 16; ++c) nib[c] = bf16_bits(lut_[c]);
#ifdef RLSIM_SIMD16
  alignas(16) std::uint8_t lo_bytes[16], hi_bytes[16];  // the low and high byte of each code's BF16 bits
  for (int c = 0; c < 16; ++c)
    lo_bytes[c] = static_cast<std::uint8_t>(nib[c] & 0xFFu), hi_bytes[c] = static_cast<std::uint8_t>(nib[c] >> 8);
  const __m128i nib_lo = _mm_load_si128(reinterpret_cast<const __m128i*>(lo_bytes));
  const __m128i nib_hi = _mm_load_si128(reinterpret_cast<const __m128i*>(hi_bytes));
#endif
  for (std::int64_t r = r0; r < r1; ++r) {
    std::uint16_t* o = out + (r - r0) * ld;
    for (std::int64_t c0 = 0; c0 < cols_; c0 += chunk_cols_) {
      const std::uint8_t* p = data_.data() + offset(r, c0);
      const std::int64_t n = std::min(chunk_cols_, cols_ - c0);
      std::uint16_t* oc = o + c0;
      switch (layout_) {
        case WeightLayout::kBf16:
          std::memcpy(oc, p, static_cast<std::size_t>(n) * sizeof(std::uint16_t));
          break;
        case WeightLayout::kE4M3:
#ifdef RLSIM_SIMD16
          if (n == 16) {
            e4m3_chunk_bf16(p, oc);
            break;
          }
#endif
          for (std::int64_t k = 0; k < n; ++k) oc[k] = e4m3[p[k]];
          break;
        default:  // kNibble: byte k holds element k (low nibble) and k + 16 (high nibble)
#ifdef RLSIM_SIMD16
          if (n == 32) {
            nibble_chunk_bf16(p, nib_lo, nib_hi, oc);
            break;
          }
#endif
          for (std::int64_t k = 0; k < n; ++k) oc[k] = nib[k < 16 ? p[k] & 0xFu : p[k - 16] >> 4u];
          break;
      }
    }
  }
}

bool PackedWeight::scales_fold_into_bf16() const {
  return layout_ == WeightLayout::kNibble && scaled_ && element_ == Element::kFp4E2M1 && scale_element_ == Element::kFp8E4M3;
}

void PackedWeight::decode_rows_bf16_scaled(std::int64_t r0, std::int64_t r1, std::uint16_t* out, std::int64_t ld) const {
  if (!scales_fold_into_bf16()) throw std::logic_error("PackedWeight::decode_rows_bf16_scaled: scales do not fold into BF16");
  decode_rows_bf16(r0, r1, out, ld);
  const auto value = [](std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); };
  for (std::int64_t r = r0; r < r1; ++r) {
    std::uint16_t* o = out + (r - r0) * ld;
    for (std::int64_t c0 = 0; c0 < cols_; c0 += block_cols_) {
      const float s = scale(r, c0);
      for (std::int64_t c = c0; c < std::min(cols_, c0 + block_cols_); ++c) o[c] = bf16_bits(value(o[c]) * s);  // exact
    }
  }
}

void PackedWeight::block_scales(std::int64_t r0, std::int64_t r1, float* out) const {
  const std::int64_t nb = scale_blocks(), bc = scale_block_cols();
  for (std::int64_t r = r0; r < r1; ++r) {
    for (std::int64_t b = 0; b < nb; ++b) out[(r - r0) * nb + b] = scale(r, b * bc) * tensor_scale_;
  }
}

void PackedWeight::decode_rows_f32(std::int64_t r0, std::int64_t r1, float* out, std::int64_t ld) const {
  for (std::int64_t r = r0; r < r1; ++r) {
    float* o = out + (r - r0) * ld;
    std::fill(o + cols_, o + ld, 0.0f);
    if (!scaled_ && tensor_scale_ == 1.0f && layout_ != WeightLayout::kE4M3KMajor) {
      // Unscaled and tiled (fp32, bf16, fp16 weights; the embedding table): the values as
      // stored, chunk by chunk, without at()'s per-element checks.
      for (std::int64_t c0 = 0; c0 < cols_; c0 += chunk_cols_) {
        const std::uint8_t* p = data_.data() + offset(r, c0);
        for (std::int64_t k = 0; k < std::min(chunk_cols_, cols_ - c0); ++k) o[c0 + k] = chunk_value(p, k);
      }
      continue;
    }
    for (std::int64_t c = 0; c < cols_; ++c) o[c] = at(r, c);
  }
}

#ifdef RLSIM_SIMD16
namespace {
inline void prefetch(const std::uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0); }

// The same into L2 only (the demand load then brings the line to L1): what Intel hosts take for
// every weight stream, and every host for the MXFP8 k-major kernel's codes and scales
// (kStreamPrefetch, kKMajorScalePrefetchPanels). The k-major passes that kernel replaced read
// their columns' lines while loading and storing the running sums of every row, and lines
// prefetched into L1 competed with those (mxfp8 decode, 2026-11-28, alternating runs, 16 KB ahead
// into L2 against 8 KB into L1: 69-74 -> 111-113 tok/s on one Zen 4 core, 118-123 -> 154-156 on
// two; 8 KB into L2 about the same as 16, 4 KB less).
inline void prefetch_l2(const std::uint8_t* p) { _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T1); }

// How the tiled GEMVs prefetch a tile's weights (one sequential stream per tile), chosen once per
// process from the CPU's vendor and family (host_cpu; later AMD families than Zen 5 take Zen 5's
// choice, unmeasured) and the kernel's kind (StreamKind). Prefetching
// far enough ahead keeps enough cache-line misses in flight for DRAM bandwidth from one core; where
// the lines go, and whether to prefetch at all, is what the hosts measured differently (bench
// runtime decode, 2 threads, alternating runs):
//  - Intel Xeon (family 6 model 207, a GPU machine's host, 2026-11-28): 8 KB ahead into L2 against
//    2 KB into L1, three rounds: bf16 63.6-72.8 -> 75.9-93.8 tok/s, fp8-block 83.1-106.9 ->
//    107.1-122.5; the 4-bit recipes, bound by their arithmetic, within the run-to-run spread
//    (int4 g32 111-163 against 119-141, nvfp4 142-224 against 147-167);
//  - AMD Zen 4 (EPYC VM), 2026-11-28: 2 KB into L1 3-8 % faster than 8 KB into L2 on one core
//    (bf16 80-81 against 78, nvfp4 151-153 against 143-150), about the same on two; the decoding
//    kernels without software prefetch, 2026-11-29: int4-w4a16-g32 and nvfp4 3-7 % slower;
//  - AMD Zen 4, plain kernels (2026-11-29, SmolLM2-135M shapes, medians of 8 rounds of 48 tokens,
//    the settings alternating in one process): without software prefetch bf16 decoded at 8.82 ms
//    a token against 9.94 with 2 KB into L1 and 10.13 with 8 KB into L2, fp32 at 17.80 against
//    19.14 (through the BF16 lm_head, fp8-block 5.59 against 5.73, int4-w4a16-g32 4.38 against
//    4.43); on one thread (6 rounds of 32 tokens) bf16 11.85 against 13.58 and 14.90, fp32 23.58
//    against 25.92 and 28.29. A GEMV-only loop over the bf16 layers (212 MB a pass) read at
//    0.71-0.84 of a plain read of the same bytes in the same order with 2 KB into L1, and at
//    0.90-0.93 without. These kernels have no arithmetic for the prefetches to hide; the
//    hardware prefetchers alone keep as many lines in flight, presumably more;
//  - AMD Zen 5 (EPYC VM, family 26 model 2, 2026-12-01), plain kernels: 4 KB ahead into L1 read
//    more than no software prefetch in all 10 comparisons of a GEMV-only loop over three 49,152 x
//    576 BF16 weights (170 MB; each the mean of 10 alternating rounds; both BF16 kernels, 1 and 2
//    threads): 1-8 % more, e.g. 33.9 -> 36.2 and 61.3 -> 61.9 GB/s. bf16 decodes (2 threads, 8-10
//    alternating rounds of 48 tokens) were 2.9-10 % faster in 4 of 5 series and 0.3 % slower in
//    the fifth; int4-w4a16-g32, through its BF16 lm_head, 0.1-8 % faster in all 4 (the table
//    switched in one process); alternated by process against the build before, within the
//    spread. The decoding kernels kept 2 KB into L1: without, int4-w4a16-g32 took 4.19 against
//    3.71 ms a token; 4 KB into L1 and 8 KB into L2 were within the spread.
struct StreamPrefetch {
  std::int64_t bytes;  // how far ahead of the line being read; kNone: no software prefetch
  bool to_l2;          // prefetch_l2 instead of prefetch
  static constexpr std::int64_t kNone = -1;
};

// The kernels' kinds, by the work between their weight loads and the order they read them:
// kDecoded turns codes into values (E4M3, 4-bit formats) in one or two sequential streams a call,
// kPlain multiplies FP32, BF16 or FP16 weights as loaded (simd16's plain layouts,
// simd_bf16_dot), kKMajor is the MXFP8 k-major panel kernel (simd_kmajor), which decodes codes
// too but takes a panel's 32-column blocks side by side (kKMajorAbreast), one line of each in
// turn (lines 512 bytes apart, then the next line of each).
enum class StreamKind { kDecoded, kPlain, kKMajor };

// The host's vendor (CPUID leaf 0) and family (leaf 1: the base family, plus the extended
// family where the base is 0xF, as Intel's SDM vol. 2A, CPUID, and AMD's APM vol. 3 define the
// displayed family: Zen 4 is 0x19, Zen 5 0x1A).
struct HostCpu {
  bool intel = false;  // "GenuineIntel"
  bool amd = false;    // "AuthenticAMD"
  unsigned family = 0;
};

HostCpu host_cpu() {
  HostCpu h;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return h;
  char vendor[3 * sizeof b];  // EBX, EDX, ECX: "GenuineIntel", "AuthenticAMD", ...
  std::memcpy(vendor, &b, sizeof b);
  std::memcpy(vendor + sizeof b, &d, sizeof d);
  std::memcpy(vendor + sizeof b + sizeof d, &c, sizeof c);
  h.intel = std::string_view(vendor, sizeof vendor) == "GenuineIntel";
  h.amd = std::string_view(vendor, sizeof vendor) == "AuthenticAMD";
  if (__get_cpuid(1, &a, &b, &c, &d) != 0) {
    const unsigned base = (a >> 8) & 0xF, extended = (a >> 20) & 0xFF;
    h.family = base == 0xF ? base + extended : base;
  }
  return h;
}

const HostCpu kHost = host_cpu();
const bool kHostIsZen5OrLater = kHost.amd && kHost.family >= 0x1A;  // 0x1A: Zen 5 (HostCpu)
const StreamPrefetch kStreamPrefetch[] = {
    kHost.intel ? StreamPrefetch{8192, true} : StreamPrefetch{2048, false},  // kDecoded
    kHost.intel          ? StreamPrefetch{8192, true}
    : kHostIsZen5OrLater ? StreamPrefetch{4096, false}
                         : StreamPrefetch{StreamPrefetch::kNone, false},  // kPlain
    // kKMajor: 8 KB into L2 on every host. On a Zen 4 VM (family 25 model 17, 2026-12-04) the
    // AMD choice for kDecoded, 2 KB into L1, left this kernel at half the E4M3 tiled kernel's
    // rate from DRAM: one thread, 30 copies of each SmolLM2-135M shape cycled, 10.0-11.5 GB/s
    // against fp8-block's 17.6-21.3; 4 to 16 KB into L2 gave 16.4-21.2 (8 KB 17.4-21.2); 30
    // layers' GEMVs in decode order, 2 threads, medians of 48 tokens, 6.5-7.8 ms a token against
    // 3.8-5.5 (4, 8, 12 and 16 KB into L2 within one another's spread) and fp8-block's 4.1-5.2;
    // bench runtime decode, 2 threads, alternating runs, 114-127 -> 145-181 tok/s. Intel hosts
    // already took 8 KB into L2 for it (kDecoded's choice there). Zen 5: unmeasured.
    StreamPrefetch{8192, true},
};

// Prefetches the line kStreamPrefetch[Kind].bytes past p, if any.
template <StreamKind Kind = StreamKind::kDecoded>
inline void prefetch_stream(const std::uint8_t* p) {
  const StreamPrefetch& f = kStreamPrefetch[static_cast<int>(Kind)];
  if (f.bytes == StreamPrefetch::kNone) return;
  if (f.to_l2) {
    prefetch_l2(p + f.bytes);
  } else {
    prefetch(p + f.bytes);
  }
}
}  // namespace

std::string gemv_prefetch_name() {
  auto name = [](StreamKind kind) {
    const StreamPrefetch& f = kStreamPrefetch[static_cast<int>(kind)];
    return f.bytes == StreamPrefetch::kNone ? std::string("none")
                                            : fmt::format("{} KB ahead into {}", f.bytes / 1024, f.to_l2 ? "L2" : "L1");
  };
  const std::string decoded = name(StreamKind::kDecoded), plain = name(StreamKind::kPlain), kmajor = name(StreamKind::kKMajor);
  std::string s = decoded;
  if (plain != decoded) s += fmt::format("; FP32/BF16/FP16 weights {}", plain);
  if (kmajor != decoded) s += fmt::format("; MXFP8 k-major {}", kmajor);
  return s;
}

namespace {

// The E4M3 kernels sum a block's products of codes and activations, then multiply the block sum by
// the block scale (as block-scaled FP8 GEMMs promote each K block's partial sum: DeepSeek-V3
// report, sec. 3.3.2; the row total is the sum of the blocks' FMAs): one FMA per weight, no
// multiply by the scale. The codes' values enter the sums as 2^-120 times themselves (the E4M3
// bit trick, simd::kE4M3Fp32Mask); x is lifted by 2^60 and the block scale carries the other
// 2^60, so a product stays a normal FP32 number (for |x| >= 2^-57, whatever the code) and powers
// of two scale exactly. A token with |x| >= 2^68, where x times the lift overflows, goes to the
// scalar kernel instead (gemm_rows, e4m3_lift_fits).
constexpr int kE4M3LiftLog2 = 60;
constexpr auto kE4M3Lift = static_cast<float>(std::uint64_t{1} << kE4M3LiftLog2);
// What a block scale is multiplied by: kE4M3Fix (2^120) / kE4M3Lift.
constexpr float kE4M3ScaleFix = kE4M3Fix / kE4M3Lift;
// The largest |x| the lift keeps finite: x * 2^60 < 2^128 (FP32's overflow).
constexpr float kE4M3MaxX = 0x1p68f;
static_assert(kE4M3LiftLog2 + 68 == 128);

// Whether n activations all stay inside the E4M3 kernels' range (|x| < kE4M3MaxX; NaN and
// infinities give NaN or infinity whatever the kernel, so they count as inside).
bool e4m3_lift_fits(const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i]) && std::fabs(x[i]) >= kE4M3MaxX) return false;
  }
  return true;
}

// The block scales of one 4-bit tile: `data` (null: unscaled), block b of row i at sbase[i] + b *
// stride; cpb chunks per scale block (the whole row when the grid has one column); the FP32
// tensor scale; and, for E4M3 scales, the code table times every E4M3 scale (e4m3_scaled_lut) or
// null.
struct NibbleScales {
  const std::uint8_t* data = nullptr;
  const std::size_t* sbase = nullptr;
  std::size_t stride = 1;
  std::int64_t cpb = 1;
  float tensor = 1.0f;
  const float* e4m3_luts = nullptr;
  bool int4_codes = false;  // INT4 (two's complement) codes rather than E2M1 ones
};
}  // namespace

inline float PackedWeight::e4m3_block_scale(std::size_t block) const {
  return (scaled_ ? scale_at(block) : 1.0f) * kE4M3ScaleFix;
}
#endif

#ifdef RLSIM_AVX512
namespace {

using Mask16 = __mmask16;  // lane l valid when bit l is set
inline __mmask16 tail_mask(std::int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u); }

// 16 elements of a 16-wide layout other than kE4M3 (e4m3_row_pair) from q, as FP32.
template <WeightLayout L>
inline __m512 load16(const std::uint8_t* q) {
  static_assert(L == WeightLayout::kF32 || L == WeightLayout::kBf16 || L == WeightLayout::kF16);
  if constexpr (L == WeightLayout::kF32) {
    return _mm512_loadu_ps(q);
  } else if constexpr (L == WeightLayout::kBf16) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))), 16));
  } else {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  }
}

// 16 x-values from c, lanes past the end of the row zero.
inline __m512 load_x(const float* x, std::int64_t c, std::int64_t cols) {
  return c + 16 <= cols ? _mm512_loadu_ps(x + c) : _mm512_maskz_loadu_ps(tail_mask(std::max<std::int64_t>(cols - c, 0)), x + c);
}

// The E4M3 tile's row-pair lane order (simd16_e4m3). The 32 codes of two consecutive rows of a tile
// chunk (row i's 16 columns, then row i + 1's) are widened once to 16-bit lanes (sign-extended,
// << 4, masked to sign and bits 10..4: the upper half of simd::kE4M3Fp32Mask's FP32 bits, 2^-120
// times the code's value) and moved to the upper halves of 32-bit lanes by VPUNPCKLWD /
// VPUNPCKHWD, which work within 128-bit quarters: `lo` then holds columns 0-3 and 8-11 of row i
// in lanes 0-7 and of row i + 1 in lanes 8-15, `hi` columns 4-7 and 12-15 likewise. 5 operations
// per 32 codes instead of 6, one VPMOVSXBW instead of two VPMOVSXBD. Every lane does the same
// products in the same order as with the rows one by one, so the same bits. With the block sums
// kept in registers (simd16_e4m3), a 1536 x 576 fp8-e4m3/block128x128 GEMV held in L2 went from
// 57.3 to 42.9 us on one Zen 4 core (2026-11-29, same outputs bit for bit).
inline void e4m3_row_pair(const std::uint8_t* q, __m512& lo, __m512& hi) {
  const __m512i w16 = _mm512_and_si512(
      _mm512_slli_epi16(_mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))), simd::kE4M3Fp16Shift),
      _mm512_set1_epi16(static_cast<short>(simd::kE4M3Fp16Mask)));
  const __m512i zero = _mm512_setzero_si512();
  lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w16));
  hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w16));
}
// x in e4m3_row_pair's lane order: the columns of `lo` (to_pair_lo) and of `hi` (to_pair_hi).
inline __m512 to_pair_lo(__m512 x) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11), x);
}
inline __m512 to_pair_hi(__m512 x) {
  return _mm512_permutexvar_ps(_mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 4, 5, 6, 7, 12, 13, 14, 15), x);
}
// The 16 x-values from column c (lanes past the row zero) lifted by kE4M3Lift (exact: a power of
// two), in to_pair_lo's order (lo) and to_pair_hi's (hi): what simd16_e4m3 multiplies a step by.
inline void e4m3_pair_x(const float* x, std::int64_t c, std::int64_t cols, __m512& lo, __m512& hi) {
  const __m512 xv = _mm512_mul_ps(load_x(x, c, cols), _mm512_set1_ps(kE4M3Lift));
  lo = to_pair_lo(xv);
  hi = to_pair_hi(xv);
}

// One token's x for simd16_e4m3, once per GEMV instead of once per tile pair: e4m3_pair_x of each
// 16-column step k (cols rounded up to 16) at out + 32 k (lo) and out + 32 k + 16 (hi).
inline void e4m3_pair_activations(const float* x, std::int64_t cols, float* out) {
  for (std::int64_t c = 0; c < cols; c += 16, out += 32) {
    __m512 lo, hi;
    e4m3_pair_x(x, c, cols, lo, hi);
    _mm512_storeu_ps(out, lo);
    _mm512_storeu_ps(out + 16, hi);
  }
}

// Row i's (first) and row i + 1's (second) 16 lanes in column order from a pair's lo and hi.
inline __m512 first_row_of_pair(__m512 lo, __m512 hi) {
  return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23), hi);
}
inline __m512 second_row_of_pair(__m512 lo, __m512 hi) {
  return _mm512_permutex2var_ps(lo, _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31), hi);
}

}  // namespace

template <WeightLayout L, int NT, int NS>
void PackedWeight::simd16(const float* x, std::int64_t ldx, float* y, const std::int64_t* tiles) const {
  if constexpr (L == WeightLayout::kE4M3) {
    simd16_e4m3<NT, NS>(x, ldx, y, tiles);
  } else {
    constexpr int R = kTileRows;
    constexpr int RS = R * NS;
    constexpr std::int64_t CB = chunk_bytes(L);
    __m512 acc[RS][NT];
    for (int i = 0; i < RS; ++i) {
      for (int n = 0; n < NT; ++n) acc[i][n] = _mm512_setzero_ps();
    }
    const std::uint8_t* ps[NS];
    for (int s = 0; s < NS; ++s) ps[s] = tile_codes(tiles[s]);
    for (std::int64_t c = 0; c < cols_; c += 16) {
      for (int s = 0; s < NS; ++s)
        for (std::int64_t b = 0; b < R * CB; b += kCacheLineBytes) prefetch_stream<StreamKind::kPlain>(ps[s] + b);
      __m512 xv[NT];
      for (int n = 0; n < NT; ++n) xv[n] = load_x(x + n * ldx, c, cols_);
      for (int s = 0; s < NS; ++s) {
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const __m512 w = load16<L>(ps[s] + i * CB);
          for (int n = 0; n < NT; ++n) acc[s * R + i][n] = _mm512_fmadd_ps(w, xv[n], acc[s * R + i][n]);
        }
        ps[s] += R * CB;
      }
    }
    for (int n = 0; n < NT; ++n) {
      for (int i = 0; i < RS; ++i) y[n * RS + i] = _mm512_reduce_add_ps(acc[i][n]);
    }
  }
}

template <int NT, int NS>
void PackedWeight::simd16_e4m3(const float* x, std::int64_t ldx, float* y, const std::int64_t* tiles, const float* pairs) const {
  constexpr int R = kTileRows;
  constexpr int RS = R * NS;
  constexpr std::int64_t CB = chunk_bytes(WeightLayout::kE4M3);
  static_assert(R % 2 == 0, "the E4M3 kernel takes a tile's rows in pairs");
  // acc[i] and acc[i + 1] (i even): rows i and i + 1 as e4m3_row_pair's lo and hi lanes.
  __m512 acc[RS][NT];
  for (int i = 0; i < RS; ++i) {
    for (int n = 0; n < NT; ++n) acc[i][n] = _mm512_setzero_ps();
  }
  const std::uint8_t* ps[NS];
  for (int s = 0; s < NS; ++s) ps[s] = tile_codes(tiles[s]);
  const std::int64_t seg = grid_cols_ > 1 ? block_cols_ : cols_;  // a scale block's columns
  std::size_t sbase[RS];  // scale index of each row's first block; segment k uses sbase + k
  for (int s = 0; s < NS; ++s) tile_row_scale_bases(tiles[s], sbase + s * R);
  std::int64_t off = 0;  // bytes of each tile read so far: one offset (GCC 12 kept ps[] in a vector register)
  for (std::int64_t c0 = 0, k = 0; c0 < cols_; c0 += seg, ++k) {
    const std::int64_t c1 = std::min(cols_, c0 + seg);
    // The segment's (scale block's) sums, added to acc times the block scale at its end.
    __m512 sb[RS][NT];
    for (int i = 0; i < RS; ++i) {
      for (int n = 0; n < NT; ++n) sb[i][n] = _mm512_setzero_ps();
    }
    for (std::int64_t c = c0; c < c1; c += 16) {
      for (int s = 0; s < NS; ++s)
        for (std::int64_t b = 0; b < R * CB; b += kCacheLineBytes) prefetch_stream(ps[s] + off + b);
      __m512 xl[NT], xh[NT];  // x lifted, in the pairs' lo and hi lane orders
      if (NT == 1 && pairs != nullptr) {
        xl[0] = _mm512_loadu_ps(pairs + 2 * c);
        xh[0] = _mm512_loadu_ps(pairs + 2 * c + 16);
      } else {
        for (int n = 0; n < NT; ++n) e4m3_pair_x(x + n * ldx, c, cols_, xl[n], xh[n]);
      }
      for (int s = 0; s < NS; ++s) {
        for (int i = 0; i < R; i += 2) {
          __m512 lo, hi;
          e4m3_row_pair(ps[s] + off + i * CB, lo, hi);
          for (int n = 0; n < NT; ++n) {
            sb[s * R + i][n] = _mm512_fmadd_ps(lo, xl[n], sb[s * R + i][n]);
            sb[s * R + i + 1][n] = _mm512_fmadd_ps(hi, xh[n], sb[s * R + i + 1][n]);
          }
        }
      }
      off += R * CB;
    }
    const auto block_scale = [&](int r) { return e4m3_block_scale(sbase[r] + static_cast<std::size_t>(k)); };
    // A tile whose rows share their block row (every tile of block128x128 and per-tensor scales)
    // reads its scale once, where each row had read its own: the same value, the same products.
    __m512 tile_sc[NS];
    for (int s = 0; s < NS; ++s) {
      tile_sc[s] = sbase[s * R] == sbase[s * R + R - 1] ? _mm512_set1_ps(block_scale(s * R)) : _mm512_setzero_ps();
    }
    // Lanes 0-7 of both of a pair's sums are row i's, lanes 8-15 row i + 1's. Unrolled so that
    // GCC 12 keeps sb in registers: otherwise it stored every block sum to the stack after each
    // FMA (8 stores a step of 16 columns).
#pragma GCC unroll 16
    for (int i = 0; i < RS; i += 2) {
      const int s = i / R;
      const __m512 sc =
          sbase[s * R] == sbase[s * R + R - 1]
              ? tile_sc[s]
              : _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(block_scale(i)), _mm512_set1_ps(block_scale(i + 1)));
#pragma GCC unroll 16
      for (int n = 0; n < NT; ++n) {
        acc[i][n] = _mm512_fmadd_ps(sb[i][n], sc, acc[i][n]);
        acc[i + 1][n] = _mm512_fmadd_ps(sb[i + 1][n], sc, acc[i + 1][n]);
      }
    }
  }
  for (int n = 0; n < NT; ++n) {
    for (int i = 0; i < RS; i += 2) {
      y[n * RS + i] = _mm512_reduce_add_ps(first_row_of_pair(acc[i][n], acc[i + 1][n]));
      y[n * RS + i + 1] = _mm512_reduce_add_ps(second_row_of_pair(acc[i][n], acc[i + 1][n]));
    }
  }
}

namespace {

// A block scale in its storage element S, broadcast to 16 lanes.
template <Element S>
inline __m512 broadcast_scale(const std::uint8_t* scales, std::size_t idx) {
  return _mm512_set1_ps(scale_value<S>(scales, idx));
}

// The scaled code tables of 4-bit chunk j's 4 rows: lut_lo for its first 16 columns, lut_hi for
// the other 16. kPerHalf (16-column blocks): both from block columns 2j and 2j + 1; otherwise
// from the block holding the chunk, reloaded when `left` (chunks before the next block) runs
// out, `blk` counting the blocks. Tile-permuted scales (stride 4) put the 4 rows' scales of a
// block next to each other and are read 8 bytes at once.
template <Element S, bool kPerHalf>
[[gnu::always_inline]] inline void nibble_chunk_tables(const NibbleScales& sc, __m512 lut, std::int64_t j, std::int64_t cols,
                                                       std::int64_t& left, std::size_t& blk, __m512* lut_lo, __m512* lut_hi) {
  constexpr int R = 4;
  const std::uint8_t* scales = sc.data;
  const std::size_t* sbase = sc.sbase;
  const std::size_t sstride = sc.stride;
  if constexpr (kPerHalf) {
    // Block columns 2j and 2j + 1 (the second absent past the end of a ragged row). E4M3
    // scales: each row's scaled table read from the table of every E4M3 scale, one load
    // (e4m3_scaled_lut); other scales: the table times the broadcast scale. Either way the
    // products are exact: a 4-bit code's value has <= 3 significant bits, an E4M3 / BF16 /
    // E8M0 scale <= 8 (an FP32 block scale may round here as the dequantised value does).
    const std::size_t lo = 2 * static_cast<std::size_t>(j) * sstride, hi = lo + sstride;
    const bool has_hi = 32 * j + 16 < cols;
    if (S == Element::kFp8E4M3 && sc.e4m3_luts != nullptr && sstride == R && has_hi) {
      // Tile-permuted scales: the 4 rows' scales of block column 2j, then of 2j + 1, are 8
      // consecutive bytes, read with one load.
      std::uint64_t b8;
      std::memcpy(&b8, scales + sbase[0] + lo, sizeof b8);
      for (int i = 0; i < R; ++i) {
        lut_lo[i] = _mm512_load_ps(sc.e4m3_luts + 16 * ((b8 >> (8 * i)) & 0xFF));
        lut_hi[i] = _mm512_load_ps(sc.e4m3_luts + 16 * ((b8 >> (8 * (R + i))) & 0xFF));
      }
    } else {
      for (int i = 0; i < R; ++i) {
        if (S == Element::kFp8E4M3 && sc.e4m3_luts != nullptr) {
          lut_lo[i] = _mm512_load_ps(sc.e4m3_luts + 16 * scales[sbase[i] + lo]);
          lut_hi[i] = has_hi ? _mm512_load_ps(sc.e4m3_luts + 16 * scales[sbase[i] + hi]) : lut_lo[i];
        } else {
          lut_lo[i] = _mm512_mul_ps(lut, broadcast_scale<S>(scales, sbase[i] + lo));
          lut_hi[i] = has_hi ? _mm512_mul_ps(lut, broadcast_scale<S>(scales, sbase[i] + hi)) : lut_lo[i];
        }
      }
    }
  } else if (left-- == 0) {
    if (S == Element::kBf16 && sstride == R) {
      // Tile-permuted BF16 scales: the 4 rows' scales of the block, 8 consecutive bytes.
      std::uint64_t b8;
      std::memcpy(&b8, scales + 2 * (sbase[0] + blk * sstride), sizeof b8);
      for (int i = 0; i < R; ++i)
        lut_lo[i] = lut_hi[i] = _mm512_mul_ps(lut, _mm512_set1_ps(bf16_value(static_cast<std::uint16_t>(b8 >> (16 * i)))));
    } else {
      for (int i = 0; i < R; ++i) {
        lut_lo[i] = lut_hi[i] = S == Element::kFp8E4M3 && sc.e4m3_luts != nullptr
                                    ? _mm512_load_ps(sc.e4m3_luts + 16 * scales[sbase[i] + blk * sstride])
                                    : _mm512_mul_ps(lut, broadcast_scale<S>(scales, sbase[i] + blk * sstride));
      }
    }
    ++blk;
    left = sc.cpb - 1;
  }
}

// The 4-bit GEMV of one tile: 4 rows, 32 columns a chunk. S: scale storage (kFp32 with no
// scale data: unscaled); per_half: 16-column blocks (NVFP4), a scale per half-chunk; TS: multiply
// each row's sum by the FP32 tensor scale (NVFP4's second level; once per row instead of once per
// table: a code times its E4M3 scale is exact, so only this last product rounds).
template <Element S, bool kPerHalf, bool kTensorScale, int NT>
void nibble_tile(const std::uint8_t* p, std::int64_t chunks, std::int64_t cols, const float* lut16, const NibbleScales& sc,
                 const float* x, std::int64_t ldx, float* y) {
  const bool scaled = sc.data != nullptr;
  constexpr int R = 4;
  constexpr std::int64_t CB = chunk_bytes(WeightLayout::kNibble);
  __m512 acc[R][NT];
  for (int i = 0; i < R; ++i) {
    for (int n = 0; n < NT; ++n) acc[i][n] = _mm512_setzero_ps();
  }
  const __m512 lut = _mm512_loadu_ps(lut16);
  __m512 lut_lo[R], lut_hi[R];
  // Unscaled: the table as is.
  for (int i = 0; i < R; ++i) lut_lo[i] = lut_hi[i] = lut;
  std::int64_t left = 0;  // chunks before the next scale block
  std::size_t blk = 0;    // scale block of the current chunk, relative to each row's sbase
  const std::int64_t full = cols / 32;
  for (std::int64_t j = 0; j < chunks; ++j, p += R * CB) {
    prefetch_stream(p);
    if (scaled) nibble_chunk_tables<S, kPerHalf>(sc, lut, j, cols, left, blk, lut_lo, lut_hi);
    __m512 x_lo[NT], x_hi[NT];
    for (int n = 0; n < NT; ++n) {
      const float* xn = x + n * ldx;
      if (j < full) {
        x_lo[n] = _mm512_loadu_ps(xn + 32 * j);
        x_hi[n] = _mm512_loadu_ps(xn + 32 * j + 16);
      } else {
        x_lo[n] = load_x(xn, 32 * j, cols);
        x_hi[n] = load_x(xn, 32 * j + 16, cols);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i * CB)));
      const __m512 w_lo = _mm512_permutexvar_ps(d, lut_lo[i]);  // the index is the low 4 bits of each lane
      const __m512 w_hi = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4), lut_hi[i]);
      for (int n = 0; n < NT; ++n) {
        acc[i][n] = _mm512_fmadd_ps(w_lo, x_lo[n], acc[i][n]);
        acc[i][n] = _mm512_fmadd_ps(w_hi, x_hi[n], acc[i][n]);
      }
    }
  }
  for (int n = 0; n < NT; ++n) {
    for (int i = 0; i < R; ++i) {
      const float sum = _mm512_reduce_add_ps(acc[i][n]);
      y[n * R + i] = kTensorScale ? sum * sc.tensor : sum;
    }
  }
}

}  // namespace
#elif defined(RLSIM_AVX2)
// The AVX2 twins of the kernels above (simd.h's V16: 16 lanes as two 8-lane registers). Each lane
// does the AVX-512 kernel's arithmetic in the same order and the lanes are added in
// _mm512_reduce_add_ps's order, so both builds give the same bits.
namespace {
using simd::V16;

using Mask16 = std::uint32_t;  // lane l valid when bit l is set (as the AVX-512 kernels' __mmask16)
inline Mask16 tail_mask(std::int64_t n) { return n >= 16 ? Mask16{0xFFFF} : (Mask16{1} << n) - 1u; }

// 16 elements of a 16-wide layout from q, as FP32 (E4M3: 2^-120 times the value).
template <WeightLayout L>
inline V16 load16(const std::uint8_t* q) {
  if constexpr (L == WeightLayout::kF32) {
    return simd::load16(reinterpret_cast<const float*>(q));
  } else if constexpr (L == WeightLayout::kBf16) {
    return simd::load16_bf16(q);
  } else if constexpr (L == WeightLayout::kF16) {
    return simd::load16_f16(q);
  } else {
    return simd::e4m3_scaled_down16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  }
}

// 16 x-values from c, lanes past the end of the row zero.
inline V16 load_x(const float* x, std::int64_t c, std::int64_t cols) {
  return simd::load16_first(x + c, std::max<std::int64_t>(cols - c, 0));
}

// The E4M3 tile's lane order. Its 16 codes are widened once to 16-bit lanes (sign-extended, << 4,
// masked to sign and bits 10..4: the upper half of e4m3_scaled_down16's FP32 bits) and moved to
// the upper halves of 32-bit lanes by VPUNPCKLWD / VPUNPCKHWD, which work within 128-bit halves:
// register lo then holds columns 0-3 and 8-11, hi 4-7 and 12-15. x is loaded in that order too and
// the sums put back in column order before the reduction, so every lane does the same products
// as in column order (5 operations per 16 codes instead of 7).
inline V16 e4m3_interleaved16(const std::uint8_t* q) {
  const __m256i w16 = _mm256_and_si256(
      _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))), simd::kE4M3Fp16Shift),
      _mm256_set1_epi16(static_cast<short>(simd::kE4M3Fp16Mask)));
  const __m256i zero = _mm256_setzero_si256();
  return {_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w16)), _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w16))};
}
// Column order to e4m3_interleaved16's lane order and back (the same exchange of 128-bit halves).
inline V16 swap_middle_quarters(V16 v) {
  return {_mm256_permute2f128_ps(v.lo, v.hi, 0x20), _mm256_permute2f128_ps(v.lo, v.hi, 0x31)};
}
}  // namespace

template <WeightLayout L, int NT, int NS>
void PackedWeight::simd16(const float* x, std::int64_t ldx, float* y, const std::int64_t* tiles) const {
  constexpr int R = kTileRows;
  constexpr int RS = R * NS;
  constexpr std::int64_t CB = chunk_bytes(L);
  V16 acc[RS][NT];
  for (int i = 0; i < RS; ++i) {
    for (int n = 0; n < NT; ++n) acc[i][n] = simd::zero16();
  }
  const std::uint8_t* ps[NS];
  for (int s = 0; s < NS; ++s) ps[s] = tile_codes(tiles[s]);
  const std::int64_t seg = L == WeightLayout::kE4M3 && grid_cols_ > 1 ? block_cols_ : cols_;
  std::size_t sbase[RS];  // scale index of each row's first block; segment k uses sbase + k
  for (int s = 0; s < NS; ++s) tile_row_scale_bases(tiles[s], sbase + s * R);
  constexpr bool kE4M3 = L == WeightLayout::kE4M3;
  for (std::int64_t c0 = 0, k = 0; c0 < cols_; c0 += seg, ++k) {
    const std::int64_t c1 = std::min(cols_, c0 + seg);
    // E4M3: the segment's (scale block's) sums, added to acc times the block scale at its end.
    V16 sb[RS][NT];
    for (int i = 0; i < RS; ++i) {
      for (int n = 0; n < NT; ++n) sb[i][n] = kE4M3 ? simd::zero16() : acc[i][n];
    }
    for (std::int64_t c = c0; c < c1; c += 16) {
      for (int s = 0; s < NS; ++s) {
        for (std::int64_t b = 0; b < R * CB; b += kCacheLineBytes)
          prefetch_stream<kE4M3 ? StreamKind::kDecoded : StreamKind::kPlain>(ps[s] + b);
      }
      V16 xv[NT];
      for (int n = 0; n < NT; ++n) {
        xv[n] = load_x(x + n * ldx, c, cols_);
        if constexpr (kE4M3) xv[n] = simd::mul(swap_middle_quarters(xv[n]), simd::set1(kE4M3Lift));
      }
      for (int s = 0; s < NS; ++s) {
        for (int i = 0; i < R; ++i) {
          V16 w;
          if constexpr (kE4M3) {
            w = e4m3_interleaved16(ps[s] + i * CB);
          } else {
            w = load16<L>(ps[s] + i * CB);
          }
          for (int n = 0; n < NT; ++n) sb[s * R + i][n] = simd::fmadd(w, xv[n], sb[s * R + i][n]);
        }
        ps[s] += R * CB;
      }
    }
    for (int i = 0; i < RS; ++i) {
      const V16 sc = simd::set1(e4m3_block_scale(sbase[i] + static_cast<std::size_t>(k)));
      for (int n = 0; n < NT; ++n) acc[i][n] = kE4M3 ? simd::fmadd(sb[i][n], sc, acc[i][n]) : sb[i][n];
    }
  }
  for (int n = 0; n < NT; ++n) {
    for (int i = 0; i < RS; ++i) {
      if constexpr (L == WeightLayout::kE4M3) acc[i][n] = swap_middle_quarters(acc[i][n]);
      y[n * RS + i] = simd::reduce_add(acc[i][n]);
    }
  }
}

namespace {
// One token's x for simd16_e4m3, once per GEMV: each 16-column step k (cols rounded up to 16,
// lanes past the row zero) lifted by kE4M3Lift (exact: a power of two) in e4m3_interleaved16's
// lane order, at out + 16 k.
inline void e4m3_interleaved_activations(const float* x, std::int64_t cols, float* out) {
  for (std::int64_t c = 0; c < cols; c += 16, out += 16)
    simd::store16(out, simd::mul(swap_middle_quarters(load_x(x, c, cols)), simd::set1(kE4M3Lift)));
}
}  // namespace

// One tile for one token. The 4 rows' block sums stay in registers (8 of AVX2's 16) from a scale
// block's first column to its last and the row sums in memory, touched once a block: simd16 keeps
// both in registers for two tiles, 32 registers' worth, and GCC spilled inside its FMA loop. A
// 1536 x 576 weight held in L2, one Zen 4 core of a 2-vCPU VM (-march=haswell, 2026-12-04):
// fp8-e4m3/block128x128 88 -> 45-50 us (10.1 -> 18-20 GB/s), per-tensor 77 -> 40-42 us; the same
// outputs.
template <int NT, int NS>
void PackedWeight::simd16_e4m3(const float*, std::int64_t, float* y, const std::int64_t* tiles, const float* lifted) const {
  static_assert(NT == 1 && NS == 1, "the AVX2 E4M3 kernel takes one tile of one token");
  constexpr int R = kTileRows;
  constexpr std::int64_t CB = chunk_bytes(WeightLayout::kE4M3);
  alignas(32) float acc[R][16] = {};
  const std::uint8_t* p = tile_codes(tiles[0]);
  const std::int64_t seg = grid_cols_ > 1 ? block_cols_ : cols_;  // a scale block's columns
  std::size_t sbase[R];
  tile_row_scale_bases(tiles[0], sbase);
  for (std::int64_t c0 = 0, k = 0; c0 < cols_; c0 += seg, ++k) {
    const std::int64_t c1 = std::min(cols_, c0 + seg);
    V16 sb[R];
    for (int i = 0; i < R; ++i) sb[i] = simd::zero16();
    for (std::int64_t c = c0; c < c1; c += 16) {
      for (std::int64_t b = 0; b < R * CB; b += kCacheLineBytes) prefetch_stream<StreamKind::kDecoded>(p + b);
      const V16 xv = simd::load16(lifted + c);
      for (int i = 0; i < R; ++i) sb[i] = simd::fmadd(e4m3_interleaved16(p + i * CB), xv, sb[i]);
      p += R * CB;
    }
    for (int i = 0; i < R; ++i) {
      const V16 sc = simd::set1(e4m3_block_scale(sbase[i] + static_cast<std::size_t>(k)));
      simd::store16(acc[i], simd::fmadd(sb[i], sc, simd::load16(acc[i])));
    }
  }
  for (int i = 0; i < R; ++i) y[i] = simd::reduce_add(swap_middle_quarters(simd::load16(acc[i])));
}

namespace {

// The block scales of 4-bit chunk j's 4 rows (as nibble_chunk_tables above chooses them): s_lo[i]
// for row i's first 16 columns, s_hi[i] for the other 16.
template <Element S, bool kPerHalf>
[[gnu::always_inline]] inline void nibble_chunk_scales(const NibbleScales& sc, std::int64_t j, std::int64_t cols,
                                                       std::int64_t& left, std::size_t& blk, float* s_lo, float* s_hi) {
  constexpr int R = 4;
  if constexpr (kPerHalf) {
    const std::size_t lo = 2 * static_cast<std::size_t>(j) * sc.stride, hi = lo + sc.stride;
    const bool has_hi = 32 * j + 16 < cols;
    if (S == Element::kFp8E4M3 && sc.stride == R && has_hi) {
      // Tile-permuted E4M3 scales: the 4 rows' scales of block column 2j, then of 2j + 1, are 8
      // consecutive bytes, decoded together (e4m3_value's bit trick, 8 lanes).
      const __m128i b8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc.data + sc.sbase[0] + lo));
      const V16 v = simd::e4m3_scaled_down16(b8);  // lanes 0-7 from the 8 bytes
      _mm_storeu_ps(s_lo, _mm_mul_ps(_mm256_castps256_ps128(v.lo), _mm_set1_ps(kE4M3Fix)));
      _mm_storeu_ps(s_hi, _mm_mul_ps(_mm256_extractf128_ps(v.lo, 1), _mm_set1_ps(kE4M3Fix)));
      return;
    }
    for (int i = 0; i < R; ++i) {
      s_lo[i] = scale_value<S>(sc.data, sc.sbase[i] + lo);
      s_hi[i] = has_hi ? scale_value<S>(sc.data, sc.sbase[i] + hi) : s_lo[i];
    }
  } else if (left-- == 0) {
    for (int i = 0; i < R; ++i) s_lo[i] = s_hi[i] = scale_value<S>(sc.data, sc.sbase[i] + blk * sc.stride);
    ++blk;
    left = sc.cpb - 1;
  }
}

// The 32 values of a chunk row before scaling (16 bytes at p: element k in byte k's low nibble,
// k + 16 in its high nibble): INT4 codes are two's complement, sign-extended in place; other
// codes (E2M1) are looked up in the 16-entry table.
template <bool kInt4>
[[gnu::always_inline]] inline void nibble_values(const std::uint8_t* p, V16 lut, V16& lo, V16& hi) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kInt4) {
    // Each byte sign-extended: its arithmetic shift right by 4 is the high code's value (the byte
    // is 16 x high + the low nibble read unsigned); the low code sign-extends from bit 3.
    const __m256i d0 = _mm256_cvtepi8_epi32(bytes), d1 = _mm256_cvtepi8_epi32(_mm_unpackhi_epi64(bytes, bytes));
    auto low = [](__m256i d) { return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 28), 28)); };
    auto high = [](__m256i d) { return _mm256_cvtepi32_ps(_mm256_srai_epi32(d, 4)); };
    lo = {low(d0), low(d1)};
    hi = {high(d0), high(d1)};
  } else {
    const __m256i d0 = _mm256_cvtepu8_epi32(bytes), d1 = _mm256_cvtepu8_epi32(_mm_unpackhi_epi64(bytes, bytes));
    lo = {simd::lookup16(d0, lut), simd::lookup16(d1, lut)};
    hi = {simd::lookup16(_mm256_srli_epi32(d0, 4), lut), simd::lookup16(_mm256_srli_epi32(d1, 4), lut)};
  }
}

// The 4-bit GEMV of one tile: the AVX-512 nibble_tile's sums. Where that kernel looks each code up
// in a table already multiplied by the block scale, this one takes the code's value and then
// multiplies it by the scale: the same single product (exact for BF16, E8M0 and E4M3 scales; one
// rounding, the same, for FP32 ones), so the same bits, without rebuilding 8 tables per chunk.
template <Element S, bool kPerHalf, bool kTensorScale, int NT, bool kInt4>
void nibble_tile_values(const std::uint8_t* p, std::int64_t chunks, std::int64_t cols, const float* lut16, const NibbleScales& sc,
                        const float* x, std::int64_t ldx, float* y) {
  const bool scaled = sc.data != nullptr;
  constexpr int R = 4;
  constexpr std::int64_t CB = chunk_bytes(WeightLayout::kNibble);
  V16 acc[R][NT];
  for (int i = 0; i < R; ++i) {
    for (int n = 0; n < NT; ++n) acc[i][n] = simd::zero16();
  }
  const V16 lut = simd::load16(lut16);
  float s_lo[R] = {1.0f, 1.0f, 1.0f, 1.0f}, s_hi[R] = {1.0f, 1.0f, 1.0f, 1.0f};
  std::int64_t left = 0;
  std::size_t blk = 0;
  const std::int64_t full = cols / 32;
  for (std::int64_t j = 0; j < chunks; ++j, p += R * CB) {
    prefetch_stream(p);
    if (scaled) nibble_chunk_scales<S, kPerHalf>(sc, j, cols, left, blk, s_lo, s_hi);
    V16 x_lo[NT], x_hi[NT];
    for (int n = 0; n < NT; ++n) {
      const float* xn = x + n * ldx;
      x_lo[n] = j < full ? simd::load16(xn + 32 * j) : load_x(xn, 32 * j, cols);
      x_hi[n] = j < full ? simd::load16(xn + 32 * j + 16) : load_x(xn, 32 * j + 16, cols);
    }
    for (int i = 0; i < R; ++i) {
      V16 w_lo, w_hi;
      nibble_values<kInt4>(p + i * CB, lut, w_lo, w_hi);
      if (scaled) {
        w_lo = simd::mul(w_lo, simd::set1(s_lo[i]));
        w_hi = simd::mul(w_hi, simd::set1(s_hi[i]));
      }
      for (int n = 0; n < NT; ++n) acc[i][n] = simd::fmadd(w_hi, x_hi[n], simd::fmadd(w_lo, x_lo[n], acc[i][n]));
    }
  }
  for (int n = 0; n < NT; ++n) {
    for (int i = 0; i < R; ++i) {
      const float sum = simd::reduce_add(acc[i][n]);
      y[n * R + i] = kTensorScale ? sum * sc.tensor : sum;
    }
  }
}

template <Element S, bool kPerHalf, bool kTensorScale, int NT>
void nibble_tile(const std::uint8_t* p, std::int64_t chunks, std::int64_t cols, const float* lut16, const NibbleScales& sc,
                 const float* x, std::int64_t ldx, float* y) {
  if (sc.int4_codes) {
    nibble_tile_values<S, kPerHalf, kTensorScale, NT, true>(p, chunks, cols, lut16, sc, x, ldx, y);
  } else {
    nibble_tile_values<S, kPerHalf, kTensorScale, NT, false>(p, chunks, cols, lut16, sc, x, ldx, y);
  }
}

}  // namespace
#endif

#ifdef RLSIM_SIMD16
namespace {
// The INT4 W4A16 integer GEMV (PackedWeight::gemm_rows on a weight with int4_dot_ok_). Each
// 32-column chunk of a token's activations becomes fixed point: with 2^(E-1) <= m < 2^E for the
// chunk's largest magnitude m, x = v 2^(E - kInt4DotFracBits) with the integer v = round(x
// 2^(kInt4DotFracBits - E)), |v| <= 2^22, held as three signed base-256 digits. v is x exactly
// for every BF16 value of magnitude >= 2^(E - 15) (8 significant bits); any other x is rounded to
// the nearest multiple of 2^(E - 22), at most 2^-23 of the chunk's largest magnitude away. The
// weight codes, made offset-binary (code + 8, in 0..15), multiply the digits exactly (VPDPBUSD,
// or VPMADDUBSW + VPMADDWD: the same integer sums), Horner's rule over the digits gives each
// lane's exact sum of (code + 8) v over its 8 columns, and the lane's bias -8 sum v makes it the
// sum of code v (|.| <= 2^28). That integer times the row's BF16 group scale times 2^(E - 22) is
// added into the lane's FP32 partial, one FMA per chunk (the conversion rounds integers above
// 2^24; the scale product is exact); a row's result is its 4 lanes added as (l0 + l1) + (l2 + l3).
// Against the FP32 kernel: one rounding per chunk and lane instead of one per product, and about
// 1.3x the weights per second (1536 x 576 g32 weight held in L2, one Zen 4 core: 26.3 against
// 19.9 G weights/s, 2026-11-28).
//
// A chunk whose every v is a multiple of 256 (every x within 2^7 of the largest, or zero: its
// lowest digit is 0) is held as v / 256 in two digits, with bias / 256 and 256 times the unit, and
// the kernels skip the third digit's two products and shift. The same bits: the integer is the
// three-digit one over 256 exactly, its conversion to FP32 is that conversion over 256, and the
// scale-unit product is 256 times the three-digit one (powers of two, inside FP32's normal range:
// 2^(E - 14) <= 2^50), so each FMA takes the same product. In 64-token decodes of SmolLM2-135M
// shapes with synthetic weights 44 % of the chunks were such, and the decodes 3-4 % faster (2
// threads of a Zen 4 VM, alternated in one process, 2026-11-28); a 1536 x 576 weight in L2 with
// 60 % such chunks took 12.2 instead of 13.7 cycles per 64-byte tile chunk (one core).
constexpr int kInt4DotFracBits = 22;
constexpr int kInt4DigitBits = 8;  // base-256 digits: VPDPBUSD's signed bytes
// A chunk's largest |x| the kernel takes: 0 or in [2^-64, 2^64) (else the token takes the FP32
// kernel); with kInt4DotMaxScaleLog2 every scale x 2^(E - 22) product is a normal FP32 number.
constexpr int kInt4DotMaxXLog2 = 64;

// One 32-column chunk of a token's activations for int4_dot_tile (two cache lines).
struct alignas(64) Int4DotChunk {
  std::int8_t digit[3][32];  // digit[k][c]: column c's base-256 digit k of v, most significant first
  std::int32_t bias[4];      // lane m: -8 x the sum of v over columns 4m..4m+3 and 16+4m..16+4m+3
  float unit;                // 2^(E - kInt4DotFracBits): the value of v = 1
  bool three_digits = true;  // false: v / 256 in digits 0 and 1, bias / 256, unit x 256 (above)
};
static_assert(sizeof(Int4DotChunk) == 128);

// Makes chunk d two-digit where its lowest digits are all 0 (see kInt4DotFracBits): bias and unit
// over and times 256, both exact.
void drop_zero_lowest_digit(Int4DotChunk& d) {
  std::uint64_t any = 0;  // the 32 lowest digits OR'ed 8 at a time
  for (std::size_t k = 0; k < sizeof d.digit[2]; k += sizeof any) {
    std::uint64_t w;
    std::memcpy(&w, d.digit[2] + k, sizeof w);
    any |= w;
  }
  d.three_digits = any != 0;
  if (d.three_digits) return;
  constexpr int kBase = 1 << kInt4DigitBits;
  for (std::int32_t& b : d.bias) b /= kBase;  // -8 x a sum of multiples of 256: exact
  d.unit *= static_cast<float>(kBase);
}

// The exponent E of a chunk's largest magnitude m (m < 2^E; 0 for m = 0), or false when m is
// outside the kernel's range (0 or [2^-kInt4DotMaxXLog2, 2^kInt4DotMaxXLog2)).
bool int4_dot_exponent(float m, int& e) {
  if (m != 0.0f && !(m >= simd::pow2f(-kInt4DotMaxXLog2) && m < simd::pow2f(kInt4DotMaxXLog2))) return false;
  // ilogb(m) + 1 from m's biased exponent field: m is 0 or normal here (kInt4DotMaxXLog2 < 126).
  constexpr int kMantissaBits = 23, kBias = 127;
  static_assert(kInt4DotMaxXLog2 < kBias - 1);
  e = m == 0.0f ? 0 : static_cast<int>(std::bit_cast<std::uint32_t>(m) >> kMantissaBits) - kBias + 1;
  return true;
}

#ifdef RLSIM_AVX512
// Chunk d from the n <= 32 columns of x, on 16-lane registers, with the definition's integers:
// x 2^(22 - E) is exact in FP32 whenever it is at least 2^-126 (a power-of-two scaling of a
// normal number below 2^22), any smaller product rounds to 0 either way, and VCVTPS2DQ rounds to
// nearest even as nearbyint does in the default rounding mode. Each digit step shifts a multiple
// of 256, an exact division.
bool int4_dot_chunk(const float* x, std::int64_t n, Int4DotChunk& d) {
  const auto lo_mask = static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << n) - 1u);
  const auto hi_mask = static_cast<__mmask16>(n >= 32 ? 0xFFFFu : n <= 16 ? 0u : (1u << (n - 16)) - 1u);
  const __m512 x0 = _mm512_maskz_loadu_ps(lo_mask, x), x1 = _mm512_maskz_loadu_ps(hi_mask, x + 16);
  const __m512 a0 = _mm512_abs_ps(x0), a1 = _mm512_abs_ps(x1);
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  // |x| >= inf or unordered (NaN): not finite.
  if ((_mm512_cmp_ps_mask(a0, inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(a1, inf, _CMP_NLT_UQ)) != 0) return false;
  int e = 0;
  if (!int4_dot_exponent(_mm512_reduce_max_ps(_mm512_max_ps(a0, a1)), e)) return false;
  const __m512 to_fixed = _mm512_set1_ps(simd::pow2f(kInt4DotFracBits - e));
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512i v[2] = {_mm512_cvt_roundps_epi32(_mm512_mul_ps(x0, to_fixed), kRound),
                        _mm512_cvt_roundps_epi32(_mm512_mul_ps(x1, to_fixed), kRound)};
  const __m512i half = _mm512_set1_epi32(128), byte = _mm512_set1_epi32(0xFF);
  for (int h = 0; h < 2; ++h) {
    __m512i r = v[h];
    for (int q = 2; q >= 0; --q) {
      const __m512i digit = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(r, half), byte), half);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d.digit[q] + 16 * h), _mm512_cvtepi32_epi8(digit));
      r = _mm512_srai_epi32(_mm512_sub_epi32(r, digit), 8);
    }
  }
  alignas(64) std::int32_t sum[16];
  _mm512_store_si512(sum, _mm512_add_epi32(v[0], v[1]));  // column k plus column 16 + k
  for (int l = 0; l < 4; ++l) d.bias[l] = -8 * ((sum[4 * l] + sum[4 * l + 1]) + (sum[4 * l + 2] + sum[4 * l + 3]));
  d.unit = simd::pow2f(e - kInt4DotFracBits);
  drop_zero_lowest_digit(d);
  return true;
}
#else
// Chunk d's digits, bias and unit from its 32 integers v (zero past the token's columns).
void int4_dot_digits(const std::int32_t* v, int e, Int4DotChunk& d) {
  constexpr int kLaneCols = 4, kHalf = 16, kChunkCols = 32;
  d.unit = simd::pow2f(e - kInt4DotFracBits);
  for (int k = 0; k < kChunkCols; ++k) {
    std::int32_t r = v[k];
    for (int q = 2; q >= 0; --q) {  // least significant first, each digit in [-128, 127]
      const std::int32_t digit = ((r + 128) & 0xFF) - 128;
      d.digit[q][k] = static_cast<std::int8_t>(digit);
      r = (r - digit) / 256;
    }
  }
  for (int l = 0; l < 4; ++l) {
    std::int32_t sum = 0;
    for (int e2 = 0; e2 < kLaneCols; ++e2) sum += v[kLaneCols * l + e2] + v[kHalf + kLaneCols * l + e2];
    d.bias[l] = -8 * sum;
  }
  drop_zero_lowest_digit(d);
}

// Chunk d from the n <= 32 columns of x by the definition above (double products, nearbyint).
bool int4_dot_chunk(const float* x, std::int64_t n, Int4DotChunk& d) {
  float m = 0.0f;
  for (std::int64_t k = 0; k < n; ++k) {
    if (!std::isfinite(x[k])) return false;
    m = std::max(m, std::fabs(x[k]));
  }
  int e = 0;
  if (!int4_dot_exponent(m, e)) return false;
  const double to_fixed = std::ldexp(1.0, kInt4DotFracBits - e);
  std::int32_t v[32] = {};
  for (std::int64_t k = 0; k < n; ++k) v[k] = static_cast<std::int32_t>(std::nearbyint(x[k] * to_fixed));
  int4_dot_digits(v, e, d);
  return true;
}
#endif

// Token x (cols values, zero past them) as `chunks` Int4DotChunks into out. False (out partly
// written) when an x is not finite or a chunk's largest magnitude is outside the kernel's range.
bool int4_dot_activations(const float* x, std::int64_t cols, std::int64_t chunks, Int4DotChunk* out) {
  constexpr std::int64_t kChunkCols = 32;
  for (std::int64_t j = 0; j < chunks; ++j) {
    if (!int4_dot_chunk(x + kChunkCols * j, std::min(kChunkCols, cols - kChunkCols * j), out[j])) return false;
  }
  return true;
}

// Bytes of one 32-column chunk of a 4-row tile (row i's 16 bytes at 16 i).
constexpr std::int64_t kTileChunkBytes = 4 * chunk_bytes(WeightLayout::kNibble);

// The integer kernels' (int4_dot_tile, e2m1_tile) sum of tile row i from its 4 FP32 lane partials
// (lanes 4i..4i+3): (l0 + l1) + (l2 + l3).
inline float tile_row_sum(const float* lane, int i) {
  return (lane[4 * i] + lane[4 * i + 1]) + (lane[4 * i + 2] + lane[4 * i + 3]);
}

// 16 bytes at p in each 128-bit lane of a register.
#ifdef RLSIM_AVX512
inline __m512i broadcast_16_bytes(const void* p) {
  return _mm512_broadcast_i32x4(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}
#else
inline __m256i broadcast_16_bytes(const void* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i*>(p)));
}
#endif

// a plus the four sums of 4 products of unsigned bytes u and signed bytes d in each 32-bit lane
// (VPDPBUSD: AVX512-VNNI, or AVX-VNNI's VEX form on 256-bit registers). Without VNNI,
// VPMADDUBSW adds pairs of products into 16 bits and VPMADDWD with ones adds the pairs: the same
// sums while every pair fits int16, which the callers' operands keep (INT4 x digits: 2 x 15 x
// 128; E2M1 x E2M1: 2 x 24 x 12).
#ifdef RLSIM_AVX512
inline __m512i dot_u8s8(__m512i a, __m512i u, __m512i d) {
#ifdef RLSIM_AVX512_VNNI
  return _mm512_dpbusd_epi32(a, u, d);
#else
  return _mm512_add_epi32(a, _mm512_madd_epi16(_mm512_maddubs_epi16(u, d), _mm512_set1_epi16(1)));
#endif
}
#else
inline __m256i dot_u8s8(__m256i a, __m256i u, __m256i d) {
#ifdef RLSIM_AVX_VNNI
  return _mm256_dpbusd_avx_epi32(a, u, d);
#else
  return _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(u, d), _mm256_set1_epi16(1)));
#endif
}
// dot_u8s8(dot_u8s8(a, u, d), v, e). Without VNNI the two VPMADDUBSW results are added in 16 bits
// before the one VPMADDWD: exact while their sum fits int16, which the INT4 kernel's operands
// keep (2 x 2 x 15 x 128 = 7680); 5 operations instead of 6. A 1536 x 576 int4/group32 weight
// held in L2, one Zen 4 core (-march=haswell, 2026-12-04): 41.5 -> 36.3 us, group128 40.6 -> 35.4.
inline __m256i dot2_u8s8(__m256i a, __m256i u, __m256i d, __m256i v, __m256i e) {
#ifdef RLSIM_AVX_VNNI
  return _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(a, u, d), v, e);
#else
  const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(u, d), _mm256_maddubs_epi16(v, e));
  return _mm256_add_epi32(a, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
}
#endif

#ifdef RLSIM_AVX512
// The offset-binary values (code ^ 8) & 0xF of the two's-complement 4-bit codes in v's bytes:
// low nibbles into lo, high ones into hi, each in 0..15. With GFNI one GF2P8AFFINEQB each (Intel
// SDM vol. 2A: bit i of a result byte is the parity of matrix byte 7 - i AND the source byte,
// XOR bit i of the immediate: here nibble bit i, or i + 4, for i < 4, and the immediate 8 flips
// bit 3); without it VPTERNLOGD 0x28, (a ^ b) & c, after a shift for the high nibbles.
inline void offset_binary_nibbles(__m512i v, __m512i& lo, __m512i& hi) {
#ifdef RLSIM_GFNI
  constexpr int kFlipBit3 = 0x08;
  auto nibble_matrix = [](int first_bit) {
    std::uint64_t m = 0;
    for (int i = 0; i < 4; ++i) m |= std::uint64_t{1} << (first_bit + i) << (8 * (7 - i));
    return _mm512_set1_epi64(static_cast<long long>(m));
  };
  lo = _mm512_gf2p8affine_epi64_epi8(v, nibble_matrix(0), kFlipBit3);
  hi = _mm512_gf2p8affine_epi64_epi8(v, nibble_matrix(4), kFlipBit3);
#else
  const __m512i low4 = _mm512_set1_epi8(0x0F), offset_binary = _mm512_set1_epi8(static_cast<char>(0x88));
  lo = _mm512_ternarylogic_epi32(v, offset_binary, low4, 0x28);
  hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), offset_binary, low4, 0x28);
#endif
}

// The INT4 integer kernel of NS tiles read side by side for NT tokens: tiles[s] a tile's chunks
// (64 bytes each: row i's 16 bytes at 16 i, byte k holding column k in its low nibble and k + 16
// in its high one), tile_scales[s] its tile-ordered BF16 scales (4 a block, cpb chunks per
// block), xs[m] token m's chunks. Lane 4 i + m belongs to row i and columns 4m..4m+3,
// 16+4m..16+4m+3. out[(s * NT + m) * 4 + i]: row i of tiles[s] for token m, the same bits for
// any NS.
template <int NT, int NS>
void int4_dot_tile(const std::uint8_t* const* tiles, std::int64_t chunks, std::int64_t cpb,
                   const std::uint8_t* const* tile_scales, const Int4DotChunk* const* xs, float* out) {
  __m512 acc[NS][NT];
  const std::uint8_t* p[NS];
  const std::uint8_t* scales[NS];
  for (int s = 0; s < NS; ++s) {
    p[s] = tiles[s], scales[s] = tile_scales[s];
    for (int m = 0; m < NT; ++m) acc[s][m] = _mm512_setzero_ps();
  }
  // VPSHUFB control: the 8 bytes of a chunk's 4 BF16 scales are in every 128-bit lane; lane i's
  // dwords take scale i's bytes (2i, 2i+1) into their upper halves, zeros (index 0x80) below:
  // scale i's FP32 value in lanes 4i..4i+3.
  alignas(64) std::int8_t control[64];
  for (int l = 0; l < 16; ++l) {
    const auto i = static_cast<std::int8_t>(l / 4);
    control[4 * l] = control[4 * l + 1] = static_cast<std::int8_t>(0x80);
    control[4 * l + 2] = static_cast<std::int8_t>(2 * i), control[4 * l + 3] = static_cast<std::int8_t>(2 * i + 1);
  }
  const __m512i spread = _mm512_load_si512(control);
  __m512 sc[NS];
  std::int64_t left = 0;  // chunks before the next scale block
  for (std::int64_t j = 0; j < chunks; ++j) {
    const bool reload = left-- == 0;
    if (reload) left = cpb - 1;
    __m512i ul[NS], uh[NS];
    for (int s = 0; s < NS; ++s) {
      prefetch_stream(p[s]);
      if (reload) {
        std::int64_t block;
        std::memcpy(&block, scales[s], sizeof block);
        sc[s] = _mm512_castsi512_ps(_mm512_shuffle_epi8(_mm512_set1_epi64(block), spread));
        scales[s] += sizeof block;
      }
      const __m512i v = _mm512_loadu_si512(p[s]);
      offset_binary_nibbles(v, ul[s], uh[s]);
      p[s] += kTileChunkBytes;
    }
    for (int m = 0; m < NT; ++m) {
      const Int4DotChunk& c = xs[m][j];
      __m512i a[NS];
      for (int s = 0; s < NS; ++s) a[s] = _mm512_setzero_si512();
      auto horner_step = [&](int q) {
        const __m512i dl = broadcast_16_bytes(c.digit[q]), dh = broadcast_16_bytes(c.digit[q] + 16);
        for (int s = 0; s < NS; ++s) {
          if (q > 0) a[s] = _mm512_slli_epi32(a[s], kInt4DigitBits);
          a[s] = dot_u8s8(dot_u8s8(a[s], ul[s], dl), uh[s], dh);
        }
      };
      horner_step(0), horner_step(1);
      if (c.three_digits) horner_step(2);
      const __m512i bias = broadcast_16_bytes(c.bias);
      const __m512 unit = _mm512_set1_ps(c.unit);
      for (int s = 0; s < NS; ++s)
        acc[s][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a[s], bias)), _mm512_mul_ps(sc[s], unit), acc[s][m]);
    }
  }
  for (int s = 0; s < NS; ++s) {
    for (int m = 0; m < NT; ++m) {
      alignas(64) float lane[16];
      _mm512_store_ps(lane, acc[s][m]);
      for (int i = 0; i < 4; ++i) out[(s * NT + m) * 4 + i] = tile_row_sum(lane, i);
    }
  }
}
#else
// The same kernel on AVX2's 256-bit registers: rows 0-1 of the tile in one register, rows 2-3 in
// the other, so lane 4 i + m of the pair is the AVX-512 kernel's lane 4 i + m. dot_u8s8 gives
// VPDPBUSD's exact sums on AVX2 too (see it), then the same FP32 operations: the same bits.
template <int NT, int NS>
void int4_dot_tile(const std::uint8_t* const* tiles, std::int64_t chunks, std::int64_t cpb,
                   const std::uint8_t* const* tile_scales, const Int4DotChunk* const* xs, float* out) {
  simd::V16 acc[NS][NT];
  const std::uint8_t* p[NS];
  const std::uint8_t* scales[NS];
  for (int s = 0; s < NS; ++s) {
    p[s] = tiles[s], scales[s] = tile_scales[s];
    for (int m = 0; m < NT; ++m) acc[s][m] = simd::zero16();
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F), offset_binary = _mm256_set1_epi8(static_cast<char>(0x88));
  // VPSHUFB controls: the BF16 scale bytes of rows 0 and 1 (2 and 3) into the upper halves of
  // lanes 0-3 and 4-7, zeros (index 0x80) below: their FP32 values.
  constexpr char z = static_cast<char>(0x80);
  const __m256i rows01 =
      _mm256_setr_epi8(z, z, 0, 1, z, z, 0, 1, z, z, 0, 1, z, z, 0, 1, z, z, 2, 3, z, z, 2, 3, z, z, 2, 3, z, z, 2, 3);
  const __m256i rows23 =
      _mm256_setr_epi8(z, z, 4, 5, z, z, 4, 5, z, z, 4, 5, z, z, 4, 5, z, z, 6, 7, z, z, 6, 7, z, z, 6, 7, z, z, 6, 7);
  simd::V16 sc[NS];
  std::int64_t left = 0;  // chunks before the next scale block
  for (std::int64_t j = 0; j < chunks; ++j) {
    const bool reload = left-- == 0;
    if (reload) left = cpb - 1;
    __m256i ul0[NS], uh0[NS], ul1[NS], uh1[NS];
    for (int s = 0; s < NS; ++s) {
      prefetch_stream(p[s]);
      if (reload) {
        std::int64_t block;
        std::memcpy(&block, scales[s], sizeof block);
        const __m256i b = _mm256_set1_epi64x(block);
        sc[s] = {_mm256_castsi256_ps(_mm256_shuffle_epi8(b, rows01)), _mm256_castsi256_ps(_mm256_shuffle_epi8(b, rows23))};
        scales[s] += sizeof block;
      }
      const __m256i v0 = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[s])), offset_binary);
      const __m256i v1 =
          _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p[s] + kTileChunkBytes / 2)), offset_binary);
      ul0[s] = _mm256_and_si256(v0, low4), uh0[s] = _mm256_and_si256(_mm256_srli_epi16(v0, 4), low4);
      ul1[s] = _mm256_and_si256(v1, low4), uh1[s] = _mm256_and_si256(_mm256_srli_epi16(v1, 4), low4);
      p[s] += kTileChunkBytes;
    }
    for (int m = 0; m < NT; ++m) {
      const Int4DotChunk& c = xs[m][j];
      __m256i a0[NS], a1[NS];
      for (int s = 0; s < NS; ++s) a0[s] = _mm256_setzero_si256(), a1[s] = _mm256_setzero_si256();
      auto horner_step = [&](int q) {
        const __m256i dl = broadcast_16_bytes(c.digit[q]), dh = broadcast_16_bytes(c.digit[q] + 16);
        for (int s = 0; s < NS; ++s) {
          if (q > 0) a0[s] = _mm256_slli_epi32(a0[s], kInt4DigitBits), a1[s] = _mm256_slli_epi32(a1[s], kInt4DigitBits);
          a0[s] = dot2_u8s8(a0[s], ul0[s], dl, uh0[s], dh);
          a1[s] = dot2_u8s8(a1[s], ul1[s], dl, uh1[s], dh);
        }
      };
      horner_step(0), horner_step(1);
      if (c.three_digits) horner_step(2);
      const __m256i bias = broadcast_16_bytes(c.bias);
      const simd::V16 unit = simd::set1(c.unit);
      for (int s = 0; s < NS; ++s) {
        const simd::V16 sum{_mm256_cvtepi32_ps(_mm256_add_epi32(a0[s], bias)), _mm256_cvtepi32_ps(_mm256_add_epi32(a1[s], bias))};
        acc[s][m] = simd::fmadd(sum, simd::mul(sc[s], unit), acc[s][m]);
      }
    }
  }
  for (int s = 0; s < NS; ++s) {
    for (int m = 0; m < NT; ++m) {
      alignas(32) float lane[16];
      simd::store16(lane, acc[s][m]);
      for (int i = 0; i < 4; ++i) out[(s * NT + m) * 4 + i] = tile_row_sum(lane, i);
    }
  }
}
#endif
}  // namespace
#endif

#ifdef RLSIM_SIMD16
template <int NT>
void PackedWeight::simd_nibble(const float* x, std::int64_t ldx, float* y, std::int64_t t) const {
  constexpr int R = kTileRows;
  const std::uint8_t* p = tile_codes(t);
  std::size_t sbase[R];  // scale slot of each row's first block; block b at sbase + b * sstride
  for (int i = 0; i < R; ++i)
    sbase[i] = tile_scales_ ? block_index(t * R + i, 0) : block_index(std::min(t * R + i, rows_ - 1), 0);
  NibbleScales sc;
  sc.data = scaled_ ? scale_data_.data() : nullptr;
  sc.sbase = sbase;
  sc.stride = tile_scales_ ? kTileRows : 1;
  sc.cpb = nibble_chunks_per_block();
  sc.tensor = tensor_scale_;
  sc.e4m3_luts = e4m3_luts_;
  sc.int4_codes = element_ == Element::kInt4;
  const bool halves = scaled_ && grid_cols_ > 1 && block_cols_ == 16;
  const bool ts = tensor_scale_ != 1.0f;
#define RLSIM_NIBBLE(S)                                                                    \
  (halves ? (ts ? nibble_tile<S, true, true, NT>(p, chunks_, cols_, lut_, sc, x, ldx, y)   \
                : nibble_tile<S, true, false, NT>(p, chunks_, cols_, lut_, sc, x, ldx, y)) \
          : (ts ? nibble_tile<S, false, true, NT>(p, chunks_, cols_, lut_, sc, x, ldx, y)  \
                : nibble_tile<S, false, false, NT>(p, chunks_, cols_, lut_, sc, x, ldx, y)))
  switch (scale_element_) {
    case Element::kBf16:
      RLSIM_NIBBLE(Element::kBf16);
      break;
    case Element::kE8M0:
      RLSIM_NIBBLE(Element::kE8M0);
      break;
    case Element::kFp8E4M3:
      RLSIM_NIBBLE(Element::kFp8E4M3);
      break;
    default:
      RLSIM_NIBBLE(Element::kFp32);
      break;
  }
#undef RLSIM_NIBBLE
}
#endif

#ifdef RLSIM_SIMD16
template <int NT, int NS>
void PackedWeight::simd_tile(const float* x, float* out, const std::int64_t* tiles) const {
  switch (layout_) {
    case WeightLayout::kF32:
      simd16<WeightLayout::kF32, NT, NS>(x, cols_, out, tiles);
      break;
    case WeightLayout::kBf16:
      simd16<WeightLayout::kBf16, NT, NS>(x, cols_, out, tiles);
      break;
    case WeightLayout::kF16:
      simd16<WeightLayout::kF16, NT, NS>(x, cols_, out, tiles);
      break;
    case WeightLayout::kE4M3:
      simd16<WeightLayout::kE4M3, NT, NS>(x, cols_, out, tiles);
      break;
    case WeightLayout::kNibble:
      for (int s = 0; s < NS; ++s) simd_nibble<NT>(x, cols_, out + s * NT * kTileRows, tiles[s]);  // one tile at a time
      break;
    case WeightLayout::kE4M3KMajor:
      break;  // panels, not tiles: simd_kmajor
  }
}

namespace {
// log2 of what a k-major block scale is multiplied by (kE4M3ScaleFix), added to its E8M0 code.
constexpr int kKMajorScaleLog2 = 120 - kE4M3LiftLog2;
static_assert(kE4M3ScaleFix == static_cast<float>(std::uint64_t{1} << kKMajorScaleLog2));
// 32-column blocks of a panel summed side by side for NT tokens: independent FMA chains, so that
// the FMA latency (4 cycles on the hosts measured) does not bound one token's single chain to 16
// codes per 4 cycles, as many as the registers hold (AVX2's 16 registers: one block's sums of 4
// tokens, two registers each, beside their partials).
#ifdef RLSIM_AVX512
template <int NT>
constexpr int kKMajorAbreast = NT == 1 ? 4 : 2;
#else
template <int NT>
constexpr int kKMajorAbreast = NT == 1 ? 4 : 1;
#endif

// The k-major kernel's 16-lane vector and its operations, and the E8M0 scales of n (1..16) rows
// r.. of 32-column block b in the Ascend layout ([kb/2, rows, 2]: byte pairs from ((b / 2) *
// rows + r) * 2, the even or odd byte of each; lanes past n 0, nothing read past them), times
// 2^120 / 2^60 (the E4M3 bit trick less the lift of x), as FP32. Code e is 2^(e - 127) (OCP MX
// v1.0, sec. 5.4.1; code 0 is 2^-127, 255 NaN never reaches this kernel), so the FP32 bits are
// (e + kKMajorScaleLog2) << 23 for every code below 195 (PackedWeight keeps scales under 2^8,
// codes under 135): no multiply, and code 0 needs no case of its own.
#ifdef RLSIM_AVX512
using KVec = __m512;
inline KVec kv_zero() { return _mm512_setzero_ps(); }
inline KVec kv_set1(float v) { return _mm512_set1_ps(v); }
inline KVec kv_fmadd(KVec a, KVec b, KVec c) { return _mm512_fmadd_ps(a, b, c); }
inline KVec kv_mul(KVec a, KVec b) { return _mm512_mul_ps(a, b); }
inline KVec kv_add(KVec a, KVec b) { return _mm512_add_ps(a, b); }
// A panel's column pair's 32 codes (the pair layout of PackedWeight's class comment) as
// e4m3_row_pair widens a tile's two rows: `first` the even column, `second` the odd one, lane i
// row i; an odd last column's 16 codes (rows in order) as e4m3_scaled_down16 reads them.
inline void kmajor_pair(const std::uint8_t* q, KVec& first, KVec& second) { e4m3_row_pair(q, first, second); }
inline KVec kmajor_column(const std::uint8_t* q) {
  const __m512i c = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  return _mm512_castsi512_ps(
      _mm512_and_si512(_mm512_slli_epi32(c, simd::kE4M3Fp32Shift), _mm512_set1_epi32(static_cast<int>(simd::kE4M3Fp32Mask))));
}
inline KVec kmajor_scales(const std::uint8_t* scales, std::int64_t rows, std::int64_t b, std::int64_t r, int n) {
  __m512i c = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(tail_mask(n), scales + ((b / 2) * rows + r) * 2));
  if (b % 2) c = _mm512_srli_epi32(c, 8);
  c = _mm512_add_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0xFF)), _mm512_set1_epi32(kKMajorScaleLog2));
  return _mm512_castsi512_ps(_mm512_slli_epi32(c, 23));
}
// The 16 rows' sums in row order.
inline void kmajor_store(float* y, KVec v) { _mm512_storeu_ps(y, v); }
#else
using KVec = V16;
inline KVec kv_zero() { return simd::zero16(); }
inline KVec kv_set1(float v) { return simd::set1(v); }
inline KVec kv_fmadd(KVec a, KVec b, KVec c) { return simd::fmadd(a, b, c); }
inline KVec kv_mul(KVec a, KVec b) { return simd::mul(a, b); }
inline KVec kv_add(KVec a, KVec b) { return simd::add(a, b); }
// AVX2: a column pair's 16 bytes of rows 0-7 and 16 of rows 8-15 each widened as
// e4m3_interleaved16 widens 16 codes: its lo half is then the even column's 8 rows in order, its
// hi half the odd column's.
inline void kmajor_pair(const std::uint8_t* q, KVec& first, KVec& second) {
  const V16 rows0 = e4m3_interleaved16(q), rows8 = e4m3_interleaved16(q + 16);
  first = {rows0.lo, rows8.lo};
  second = {rows0.hi, rows8.hi};
}
inline KVec kmajor_column(const std::uint8_t* q) {
  return simd::e4m3_scaled_down16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
}
// The first `n` (1..16) bytes at p in a 16-byte vector, the rest 0; reads nothing past p + n.
inline __m128i load_bytes_first(const std::uint8_t* p, int n) {
  if (n >= 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  alignas(16) std::uint8_t b[16] = {};
  std::memcpy(b, p, static_cast<std::size_t>(n));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(b));
}
inline KVec kmajor_scales(const std::uint8_t* scales, std::int64_t rows, std::int64_t b, std::int64_t r, int n) {
  const std::uint8_t* s = scales + ((b / 2) * rows + r) * 2;
  const __m128i lo = load_bytes_first(s, std::min(2 * n, 16)),
                hi = n > 8 ? load_bytes_first(s + 16, 2 * n - 16) : _mm_setzero_si128();
  auto half = [b](__m128i pairs) {
    __m256i c = _mm256_cvtepu16_epi32(pairs);
    if (b % 2) c = _mm256_srli_epi32(c, 8);
    c = _mm256_add_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0xFF)), _mm256_set1_epi32(kKMajorScaleLog2));
    return _mm256_castsi256_ps(_mm256_slli_epi32(c, 23));
  };
  return V16{half(lo), half(hi)};
}
inline void kmajor_store(float* y, KVec v) { simd::store16(y, v); }
#endif

// NB blocks side by side of a panel's NT tokens, from block b: the codes of block b + i's column
// pair (c, c + 1) at q + (32 i + c) 16 (an odd last column at q + 16 c), token t's lifted x of that column at x[t ldx + 32 i +
// c], the blocks' scales those of the panel's n rows from row r in `scales` (kmajor_scales; null: `unscaled` for all), `cols`
// (1..32; < 32 only with NB = 1) columns a block. Each block's sums one FMA chain from 0 in column order, then times its scale
// added to partial[t] (a power-of-two scale multiplies exactly while the product is a normal FP32 number, so this is what an FMA
// of the sum and the scale gives), block after block.
template <int NT, int NB>
inline void kmajor_blocks(const std::uint8_t* q, const float* x, std::int64_t ldx, const std::uint8_t* scales, std::int64_t rows,
                          std::int64_t b, std::int64_t r, int n, KVec unscaled, KVec* partial, int cols) {
  constexpr std::int64_t P = PackedWeight::kKMajorPanelRows;
  constexpr int kColumnsPerLine = 4;  // 16 bytes a column
  KVec acc[NB][NT];
  for (auto& a : acc) std::fill(std::begin(a), std::end(a), kv_zero());
  int c = 0;
  for (; c + 1 < cols; c += 2) {  // column pairs
    if (c % kColumnsPerLine == 0) {
      for (int i = 0; i < NB; ++i) prefetch_stream<StreamKind::kKMajor>(q + (32 * i + c) * P);
    }
    for (int i = 0; i < NB; ++i) {
      KVec w0, w1;
      kmajor_pair(q + (32 * i + c) * P, w0, w1);
      for (int t = 0; t < NT; ++t) {
        const float* xt = x + t * ldx + 32 * i + c;
        acc[i][t] = kv_fmadd(w1, kv_set1(xt[1]), kv_fmadd(w0, kv_set1(xt[0]), acc[i][t]));
      }
    }
  }
  if (c < cols) {  // the weight's odd last column (NB = 1)
    const KVec w = kmajor_column(q + c * P);
    for (int t = 0; t < NT; ++t) acc[0][t] = kv_fmadd(w, kv_set1(x[t * ldx + c]), acc[0][t]);
  }
  for (int i = 0; i < NB; ++i) {
    const KVec sc = scales != nullptr ? kmajor_scales(scales, rows, b + i, r, n) : unscaled;
    for (int t = 0; t < NT; ++t) partial[t] = kv_add(partial[t], kv_mul(acc[i][t], sc));
  }
}

// Panels ahead whose E8M0 scales simd_kmajor prefetches into L2 as it starts a panel. A panel's
// scales are ceil(kb / 2) pieces of 32 bytes, rows x 2 bytes apart (the vllm-ascend layout of
// PackedWeight's class comment): as many strided streams, which the hardware prefetchers follow
// poorly. Zen 4 VM (2026-12-04), 30 layers' GEMVs in decode order at SmolLM2-135M's shapes, one
// thread, medians of 32 tokens, three alternating rounds: 5.95-6.84 ms a token against 6.73-8.15
// without and 7.14-7.41 with 8 panels ahead; the Xeon VM of 2026-12-03, 2 threads: 2-3 % faster.
constexpr std::int64_t kKMajorScalePrefetchPanels = 4;
}  // namespace

template <int NT>
void PackedWeight::simd_kmajor(const float* x, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1) const {
  constexpr std::int64_t P = kKMajorPanelRows;
  constexpr int NB = kKMajorAbreast<NT>;
  thread_local std::vector<float> lifted;  // x times kE4M3Lift (exact: a power of two)
  float* const xl = scratch(lifted, static_cast<std::size_t>(NT * cols_));
  for (std::int64_t i = 0; i < NT * cols_; ++i) xl[i] = x[i] * kE4M3Lift;
  const std::uint8_t* scales = scaled_ ? scale_data_.data() : nullptr;
  const KVec unscaled = kv_set1(kE4M3ScaleFix);
  for (std::int64_t p = r0 / P; p * P < r1; ++p) {
    const std::uint8_t* panel = data_.data() + p * cols_ * P;
    const auto n = static_cast<int>(std::min(P, rows_ - p * P));  // the panel's rows (the rest padding)
    if (const std::int64_t ahead = (p + kKMajorScalePrefetchPanels) * P; scales != nullptr && ahead < rows_) {
      for (std::int64_t b = 0; b < scale_blocks(); b += 2) prefetch_l2(scales + block_index(ahead, b));  // a pair's piece
    }
    KVec total[NT];
    std::fill(std::begin(total), std::end(total), kv_zero());
    for (int g = 0; g < kKMajorSegments; ++g) {
      KVec partial[NT];
      std::fill(std::begin(partial), std::end(partial), kv_zero());
      std::int64_t b = kmajor_segment_begin(g);
      const std::int64_t b1 = kmajor_segment_begin(g + 1);
      auto full = [&](auto nb) {  // nb blocks of 32 columns from block b
        kmajor_blocks<NT, nb()>(panel + 32 * b * P, xl + 32 * b, cols_, scales, rows_, b, p * P, n, unscaled, partial, 32);
        b += nb();
      };
      const std::int64_t whole = std::min(b1, cols_ / 32);  // blocks before a ragged last one
      while (b + NB <= whole) full(std::integral_constant<int, NB>{});
      // The rest side by side too: a block alone is one FMA chain per token, 32 FMAs of 4 cycles
      // latency each, about the time of three side by side. (SmolLM2-135M's 576-column weights
      // have 9 blocks a segment: 2 x 4 + 1.)
      if constexpr (NB >= 4) {
        if (b + 3 <= whole) full(std::integral_constant<int, 3>{});
      }
      if constexpr (NB >= 3) {
        if (b + 2 <= whole) full(std::integral_constant<int, 2>{});
      }
      for (; b < b1; ++b) {
        const auto c = static_cast<int>(std::min<std::int64_t>(32, cols_ - 32 * b));  // a ragged last block
        kmajor_blocks<NT, 1>(panel + 32 * b * P, xl + 32 * b, cols_, scales, rows_, b, p * P, n, unscaled, partial, c);
      }
      for (int t = 0; t < NT; ++t) total[t] = kv_add(total[t], partial[t]);
    }
    // The panel's rows inside [r0, r1).
    const std::int64_t first = std::max(r0, p * P), last = std::min(r1, p * P + P);
    for (int t = 0; t < NT; ++t) {
      float* yt = y + t * ldy + first - r0;
      if (last - first == P) {
        kmajor_store(yt, total[t]);
      } else {
        alignas(64) float rows[P];
        kmajor_store(rows, total[t]);
        std::copy(rows + (first - p * P), rows + (last - p * P), yt);
      }
    }
  }
}
#endif

#ifdef RLSIM_SIMD16
namespace {
// Tile t's sums (out[i] for row t * TileRows + i) of the rows inside [r0, r1) into y[r - r0].
template <std::int64_t TileRows>
void store_tile_rows(std::int64_t t, const float* out, std::int64_t r0, std::int64_t r1, float* y) {
  for (std::int64_t i = 0; i < TileRows; ++i) {
    const std::int64_t r = t * TileRows + i;
    if (r >= r0 && r < r1) y[r - r0] = out[i];
  }
}

// Drives a tile kernel over rows [r0, r1) of `tokens` tokens: blocks of `token_block` (>= 1)
// tokens, and in each every tile of TileRows rows with its tokens 4 at a time (the rest one by
// one): tile(n, four, out, t) writes the sums of tile t for tokens n.. (4 of them when `four`)
// to out[m * TileRows + i]; the tile's rows inside [r0, r1) go to y[(n + m) * ldy + r - r0].
template <std::int64_t TileRows, typename Tile>
void for_each_tile(std::int64_t tokens, std::int64_t token_block, std::int64_t r0, std::int64_t r1, float* y, std::int64_t ldy,
                   Tile&& tile) {
  constexpr std::int64_t tile_rows = TileRows;
  for (std::int64_t n0 = 0; n0 < tokens; n0 += token_block) {
    const std::int64_t n1 = std::min(tokens, n0 + token_block);
    for (std::int64_t t = r0 / tile_rows; t * tile_rows < r1; ++t) {
      for (std::int64_t n = n0; n < n1;) {
        float out[4 * TileRows] = {};  // simd_tile writes every entry of a tiled layout
        const std::int64_t nt = n1 - n >= 4 ? 4 : 1;
        tile(n, nt == 4, out, t);
        for (std::int64_t m = 0; m < nt; ++m) store_tile_rows<TileRows>(t, out + m * tile_rows, r0, r1, y + (n + m) * ldy);
        n += nt;
      }
    }
  }
}

// Drives a tile kernel over rows [r0, r1) of one token (a decode step) in two sequential streams:
// the range's tiles split into halves, tile k of the first half read side by side with tile k of
// the second (two(ts, out) writes tile ts[0]'s sums to out[0, TileRows) and ts[1]'s to
// out[TileRows, 2 TileRows)), an odd last tile alone (one(t, out)); rows inside [r0, r1) go to
// y[r - r0]. The hardware prefetchers keep more lines in flight for two streams than for one (a
// 256 MB read, 2 threads of a Zen 4 VM, 2026-11-28, alternating runs: 26-35 GB/s for one stream
// a thread, 34-53 for two read a cache line of each in turn, 32 for two read 1 KB of each in
// turn: the streams must advance together); bench runtime decode, 2 threads, alternating runs: bf16
// 97-115 -> 121-128 tok/s, int4-w4a16-g32 202-205 -> 208-226 (fp8-block, bound elsewhere,
// 143-150 either way). A prefill's 4-token tiles keep one stream: their arithmetic, not the
// weight reads, bounds them.
template <std::int64_t TileRows, typename One, typename Two>
void for_each_tile_pair(std::int64_t r0, std::int64_t r1, float* y, One&& one, Two&& two) {
  const std::int64_t ta = r0 / TileRows, tb = (r1 + TileRows - 1) / TileRows, half = (tb - ta + 1) / 2;
  for (std::int64_t k = 0; k < half; ++k) {
    const std::int64_t ts[2] = {ta + k, ta + half + k};
    float out[2 * TileRows] = {};
    if (ts[1] < tb) {
      two(ts, out);
      store_tile_rows<TileRows>(ts[1], out + TileRows, r0, r1, y);
    } else {
      one(ts[0], out);
    }
    store_tile_rows<TileRows>(ts[0], out, r0, r1, y);
  }
}
}  // namespace
#endif

#ifdef RLSIM_SIMD16
namespace {
#ifdef RLSIM_AVX512
using simd::bf16_pair_dot;
// The accumulator of 16 FP32 lanes, and its sum in _mm512_reduce_add_ps's order.
using PairAcc = __m512;
inline PairAcc pair_acc_zero() { return _mm512_setzero_ps(); }
inline float pair_acc_sum(PairAcc a) { return _mm512_reduce_add_ps(a); }
#else
// bf16_pair_dot on AVX2's two 8-lane halves (lanes 0-7: w_lo and x_lo, 8-15: w_hi and x_hi).
inline simd::V16 bf16_pair_dot(simd::V16 acc, __m256i w_lo, __m256i w_hi, __m256i x_lo, __m256i x_hi) {
  using simd::bf16_high_halves, simd::bf16_low_halves;
  return simd::bf16_pair_fmadd(acc, {bf16_high_halves(w_lo), bf16_high_halves(w_hi)},
                               {bf16_high_halves(x_lo), bf16_high_halves(x_hi)}, {bf16_low_halves(w_lo), bf16_low_halves(w_hi)},
                               {bf16_low_halves(x_lo), bf16_low_halves(x_hi)});
}
using PairAcc = simd::V16;
inline PairAcc pair_acc_zero() { return simd::zero16(); }
inline float pair_acc_sum(PairAcc a) { return simd::reduce_add(a); }
#endif
}  // namespace

template <int NT, int NS>
void PackedWeight::simd_bf16_dot(const std::uint16_t* xb, std::int64_t ldxb, float* y, const std::int64_t* tiles) const {
  constexpr int R = kTileRows;
  constexpr int RS = R * NS;
  constexpr std::int64_t CB = chunk_bytes(WeightLayout::kBf16);  // 16 BF16 weights of a row
  PairAcc acc[RS][NT];
  for (int i = 0; i < RS; ++i) {
    for (int n = 0; n < NT; ++n) acc[i][n] = pair_acc_zero();
  }
  const std::uint8_t* ps[NS];
  for (int s = 0; s < NS; ++s) ps[s] = tile_codes(tiles[s]);
  // Two 16-column chunks per step: a row's 32 weights, one dot-product instruction per token
  // (lane l sums the products of columns 2l and 2l + 1 of the 32).
  for (std::int64_t c = 0; c < chunks_; c += 2) {
    for (int s = 0; s < NS; ++s)
      for (std::int64_t b = 0; b < 2 * R * CB; b += kCacheLineBytes) prefetch_stream<StreamKind::kPlain>(ps[s] + b);
    const bool pair = c + 1 < chunks_;
#ifdef RLSIM_AVX512
    __m512i xv[NT];
    for (int n = 0; n < NT; ++n) xv[n] = _mm512_loadu_si512(xb + n * ldxb + 16 * c);
#else
    __m256i xlo[NT], xhi[NT];
    for (int n = 0; n < NT; ++n) {
      xlo[n] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + n * ldxb + 16 * c));
      xhi[n] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + n * ldxb + 16 * c + 16));
    }
#endif
    for (int s = 0; s < NS; ++s) {
      const std::uint8_t* p = ps[s];
      for (int i = 0; i < R; ++i) {
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * CB));
        const __m256i hi = pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (R + i) * CB)) : _mm256_setzero_si256();
#ifdef RLSIM_AVX512
        const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        for (int n = 0; n < NT; ++n) acc[s * R + i][n] = bf16_pair_dot(acc[s * R + i][n], w, xv[n]);
#else
        for (int n = 0; n < NT; ++n) acc[s * R + i][n] = bf16_pair_dot(acc[s * R + i][n], lo, hi, xlo[n], xhi[n]);
#endif
      }
      ps[s] += 2 * R * CB;
    }
  }
  for (int n = 0; n < NT; ++n) {
    for (int i = 0; i < RS; ++i) y[n * RS + i] = pair_acc_sum(acc[i][n]);
  }
}
#endif

void PackedWeight::gemv_rows(const float* x, float* y, std::int64_t r0, std::int64_t r1) const {
  gemm_rows(x, 1, y, r1 - r0, r0, r1);
}

void PackedWeight::gemm_rows(const float* x, std::int64_t tokens, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1,
                             [[maybe_unused]] bool x_bf16) const {
#ifdef RLSIM_SIMD16
  if (simd_ok_ && (layout_ == WeightLayout::kE4M3 || layout_ == WeightLayout::kE4M3KMajor) &&
      !e4m3_lift_fits(x, tokens * cols_)) {
    // A token the E4M3 kernels' lift would overflow takes the scalar kernel (the true values, no
    // lift); the others their SIMD kernel one by one, which gives a token the same bits as a batch.
    for (std::int64_t n = 0; n < tokens; ++n) {
      const float* xn = x + n * cols_;
      if (e4m3_lift_fits(xn, cols_)) {
        gemm_rows(xn, 1, y + n * ldy, ldy, r0, r1, x_bf16);
      } else {
        gemv_rows_scalar(xn, y + n * ldy, r0, r1);
      }
    }
    return;
  }
#endif
  if (layout_ == WeightLayout::kE4M3KMajor) {
#ifdef RLSIM_SIMD16
    if (simd_ok_) {
      for (std::int64_t n = 0; n < tokens;) {
        const std::int64_t nt = tokens - n >= 4 ? 4 : 1;
        if (nt == 4) {
          simd_kmajor<4>(x + n * cols_, y + n * ldy, ldy, r0, r1);
        } else {
          simd_kmajor<1>(x + n * cols_, y + n * ldy, ldy, r0, r1);
        }
        n += nt;
      }
      return;
    }
#endif
    for (std::int64_t n = 0; n < tokens; ++n) kmajor_scalar(x + n * cols_, y + n * ldy, r0, r1);
    return;
  }
#ifdef RLSIM_SIMD16
  if (simd_ok_ && x_bf16 && layout_ == WeightLayout::kBf16) {
    // The activations as BF16 (exact: they are BF16 values, so their upper 16 bits), each row
    // padded with zeros to a whole number of 32-column steps; then tile by tile, 4 tokens at a
    // time and the rest one by one, each (token, row) summed in the same order whatever the batch.
    const std::int64_t ldxb = (chunks_ + 1) / 2 * 32;
    thread_local std::vector<std::uint16_t> xb;
    xb.assign(static_cast<std::size_t>(tokens * ldxb), 0);
    for (std::int64_t n = 0; n < tokens; ++n) {
      for (std::int64_t c = 0; c < cols_; ++c) xb[static_cast<std::size_t>(n * ldxb + c)] = bf16_bits(x[n * cols_ + c]);
    }
    if (tokens == 1) {
      for_each_tile_pair<kTileRows>(
          r0, r1, y, [&](std::int64_t t, float* out) { simd_bf16_dot<1, 1>(xb.data(), ldxb, out, &t); },
          [&](const std::int64_t* ts, float* out) { simd_bf16_dot<1, 2>(xb.data(), ldxb, out, ts); });
      return;
    }
    for_each_tile<kTileRows>(tokens, std::max<std::int64_t>(tokens, 1), r0, r1, y, ldy,
                             [&](std::int64_t n, bool four, float* out, std::int64_t t) {
                               if (four) {
                                 simd_bf16_dot<4, 1>(xb.data() + n * ldxb, ldxb, out, &t);
                               } else {
                                 simd_bf16_dot<1, 1>(xb.data() + n * ldxb, ldxb, out, &t);
                               }
                             });
    return;
  }
#endif
#ifdef RLSIM_SIMD16
  if (simd_ok_ && int4_dot_ok_) {
    gemm_rows_int4_dot(x, tokens, y, ldy, r0, r1);
    return;
  }
  if (simd_ok_) {
    simd_tiles(x, tokens, y, ldy, r0, r1);
    return;
  }
#endif
  for (std::int64_t n = 0; n < tokens; ++n) gemv_rows_scalar(x + n * cols_, y + n * ldy, r0, r1);
}

#ifdef RLSIM_SIMD16
void PackedWeight::simd_tiles(const float* x, std::int64_t tokens, float* y, std::int64_t ldy, std::int64_t r0,
                              std::int64_t r1) const {
#ifdef RLSIM_AVX512
  // E4M3, one token: two tiles at once, x lifted and permuted once per call (e4m3_pair_activations)
  // instead of once per tile pair. With it, each tile's scale index found with one division
  // instead of one a row (tile_row_scale_bases) and a tile's block scale read once, a 768 x 576
  // fp8-e4m3/block128x128 weight held in L2 read 37.4 instead of 30.0 GB/s on one core of the
  // 2-vCPU Zen 5 VM (2026-12-01, means of 6 runs alternating with the earlier build; the pair
  // layout alone: 35.0 against 32.7), per-tensor scales 38.4 against 33.7; the same outputs.
  if (tokens == 1 && layout_ == WeightLayout::kE4M3) {
    thread_local std::vector<float> buffer;
    float* const pairs = scratch(buffer, static_cast<std::size_t>(2 * ((cols_ + 15) / 16 * 16)));
    e4m3_pair_activations(x, cols_, pairs);
    for_each_tile_pair<kTileRows>(
        r0, r1, y, [&](std::int64_t t, float* out) { simd16_e4m3<1, 1>(x, cols_, out, &t, pairs); },
        [&](const std::int64_t* ts, float* out) { simd16_e4m3<1, 2>(x, cols_, out, ts, pairs); });
    return;
  }
#else
  // E4M3, one token: x lifted and put in lane order once per call; a pair's two tiles one after
  // the other (simd16_e4m3 holds one tile's sums in registers), so the two streams advance in
  // turns of a tile (2.3 KB at 576 columns). Against both tiles side by side, 4 steps of each in
  // turn: within each other's spread (bench runtime, 3 alternating rounds, -march=haswell, Zen 4
  // VM, 2026-12-04: fp8-tensor 144-160 against 131-162 tok/s, fp8-block 138-166 against 134-160).
  if (tokens == 1 && layout_ == WeightLayout::kE4M3) {
    thread_local std::vector<float> buffer;
    float* const lifted = scratch(buffer, static_cast<std::size_t>((cols_ + 15) / 16 * 16));
    e4m3_interleaved_activations(x, cols_, lifted);
    for_each_tile_pair<kTileRows>(
        r0, r1, y, [&](std::int64_t t, float* out) { simd16_e4m3<1, 1>(x, cols_, out, &t, lifted); },
        [&](const std::int64_t* ts, float* out) {
          simd16_e4m3<1, 1>(x, cols_, out, ts, lifted);
          simd16_e4m3<1, 1>(x, cols_, out + kTileRows, ts + 1, lifted);
        });
    return;
  }
#endif
  if (tokens == 1 && layout_ != WeightLayout::kNibble) {  // simd16's layouts: two tiles at once
    for_each_tile_pair<kTileRows>(
        r0, r1, y, [&](std::int64_t t, float* out) { simd_tile<1, 1>(x, out, &t); },
        [&](const std::int64_t* ts, float* out) { simd_tile<1, 2>(x, out, ts); });
    return;
  }
  // Token blocks of 64 keep their activations in L2 while every tile of [r0, r1) passes over
  // them. Each (token, row) is summed exactly as a single-token call sums it.
  for_each_tile<kTileRows>(tokens, 64, r0, r1, y, ldy, [&](std::int64_t n, bool four, float* out, std::int64_t t) {
    if (four) {
      simd_tile<4, 1>(x + n * cols_, out, &t);
    } else {
      simd_tile<1, 1>(x + n * cols_, out, &t);
    }
  });
}

void PackedWeight::gemm_rows_int4_dot(const float* x, std::int64_t tokens, float* y, std::int64_t ldy, std::int64_t r0,
                                      std::int64_t r1) const {
  constexpr int R = kTileRows;
  thread_local std::vector<Int4DotChunk> buffer;
  Int4DotChunk* const xs = scratch(buffer, static_cast<std::size_t>(tokens * chunks_));
  const std::int64_t cpb = nibble_chunks_per_block();
  // Tokens [n0, n1), whose activations are in xs, 4 at a time and the rest one by one.
  auto tile_scales = [&](std::int64_t t) { return scale_data_.data() + block_index(t * R, 0) * sizeof(std::uint16_t); };
  auto run = [&](std::int64_t n0, std::int64_t n1) {
    if (n1 - n0 == 1) {
      const Int4DotChunk* token[1] = {xs + n0 * chunks_};
      for_each_tile_pair<R>(
          r0, r1, y + n0 * ldy,
          [&](std::int64_t t, float* out) {
            const std::uint8_t *p = tile_codes(t), *sc = tile_scales(t);
            int4_dot_tile<1, 1>(&p, chunks_, cpb, &sc, token, out);
          },
          [&](const std::int64_t* ts, float* out) {
            const std::uint8_t* p[2] = {tile_codes(ts[0]), tile_codes(ts[1])};
            const std::uint8_t* sc[2] = {tile_scales(ts[0]), tile_scales(ts[1])};
            int4_dot_tile<1, 2>(p, chunks_, cpb, sc, token, out);
          });
      return;
    }
    for_each_tile<R>(n1 - n0, 64, r0, r1, y + n0 * ldy, ldy, [&](std::int64_t n, bool four, float* out, std::int64_t t) {
      const std::uint8_t *p = tile_codes(t), *scales = tile_scales(t);
      const Int4DotChunk* token[4] = {};
      for (int m = 0; m < (four ? 4 : 1); ++m) token[m] = xs + (n0 + n + m) * chunks_;
      if (four) {
        int4_dot_tile<4, 1>(&p, chunks_, cpb, &scales, token, out);
      } else {
        int4_dot_tile<1, 1>(&p, chunks_, cpb, &scales, token, out);
      }
    });
  };
  // A token the fixed point cannot hold (a non-finite x, a chunk's largest |x| out of range) takes
  // the FP32 kernel on its own; its neighbours keep their bits, as in any batch.
  std::int64_t n0 = 0;
  for (std::int64_t n = 0; n < tokens; ++n) {
    if (int4_dot_activations(x + n * cols_, cols_, chunks_, xs + n * chunks_)) continue;
    if (n0 < n) run(n0, n);
    simd_tiles(x + n * cols_, 1, y + n * ldy, ldy, r0, r1);
    n0 = n + 1;
  }
  if (n0 < tokens) run(n0, tokens);
}
#endif

#ifdef RLSIM_SIMD16
namespace {
// The constants of e^x for softmax_row's SIMD paths: x clamped at kExpClamp, k = round(x log2 e),
// r = x - k ln 2 with ln 2 in two parts (Cody-Waite: kLn2Hi exact in few bits, kLn2Lo the rest),
// e^r = 1 + r + r^2 P(r), P's coefficients highest first (S. Moshier, Cephes Math Library, expf.c).
constexpr float kExpClamp = -104.0f;  // e^-104 is below FP32's smallest subnormal
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
}  // namespace
#endif

#ifdef RLSIM_AVX512
namespace {
// e^x in 16 FP32 lanes, for the x <= 0 of a softmax: x = k ln 2 + r with |r| <= ln 2 / 2
// (Cody-Waite, ln 2 in two parts), e^r = 1 + r + r^2 P(r) with Cephes' minimax P for expf
// (S. Moshier, Cephes Math Library, expf.c; about 1 ulp), and 2^k applied by vscalefps, which
// underflows to 0 below FP32's range. x is clamped at -104 (e^-104 is below FP32's smallest
// subnormal), so -inf gives 0 too, while NaN stays NaN as std::exp leaves it. Each lane is computed alone: the result of an
// element does not depend on its neighbours or on the row's length.
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(kExpClamp), x);  // a NaN x stays NaN (vmaxps returns its second operand)
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpP[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpP[i]));
  const __m512 y = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, k);
}
}  // namespace
#elif defined(RLSIM_AVX2)
namespace {
// exp_nonpositive above, 8 lanes: the same operations (VROUNDPS to nearest for vroundscaleps),
// and 2^k applied as (y 2^(k + 64)) 2^-64: the first product is exact (k >= -151), the second
// rounds once, as vscalefps does, so each lane gives vscalefps's bits, subnormals included.
inline __m256 exp_nonpositive8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(kExpClamp), x);  // a NaN x stays NaN (vmaxps returns its second operand)
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpP[i]));
  const __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  constexpr int kLift = 64;  // keeps 2^(k + kLift) a normal FP32 number for k >= -104 log2(e) - 1
  const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127 + kLift));
  const __m256 lifted = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(e, 23)));
  return _mm256_mul_ps(lifted, _mm256_set1_ps(0x1p-64f));
}

// Lanes [0, n) of 16 as all-ones masks (n may be <= 0 or >= 16).
inline void lane_masks(std::int64_t n, __m256& lo, __m256& hi) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const auto c = static_cast<int>(std::clamp<std::int64_t>(n, 0, 16));
  lo = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(c), lane));
  hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(c - 8), lane));
}
}  // namespace
#endif

void softmax_row(float* s, std::int64_t n) {
#ifdef RLSIM_AVX512
  auto mask = [n](std::int64_t j) { return tail_mask(n - j); };
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (std::int64_t j = 0; j < n; j += 16) vmax = _mm512_mask_max_ps(vmax, mask(j), vmax, _mm512_maskz_loadu_ps(mask(j), s + j));
  const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (std::int64_t j = 0; j < n; j += 16) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask(j), s + j), mx));
    _mm512_mask_storeu_ps(s + j, mask(j), e);
    vsum = _mm512_mask_add_ps(vsum, mask(j), vsum, e);
  }
  const __m512 sum = _mm512_set1_ps(_mm512_reduce_add_ps(vsum));
  for (std::int64_t j = 0; j < n; j += 16)
    _mm512_mask_storeu_ps(s + j, mask(j), _mm512_div_ps(_mm512_maskz_loadu_ps(mask(j), s + j), sum));
#elif defined(RLSIM_AVX2)
  // The AVX-512 path's lanes as two halves: the same maximum, the same e^x per lane, the same 16
  // partial sums (a masked-off lane adds +0, which leaves its non-negative sum's bits as they are)
  // added in _mm512_reduce_add_ps's order, the same division: the same bits.
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 max_lo = neg_inf, max_hi = neg_inf, m_lo, m_hi;
  for (std::int64_t j = 0; j < n; j += 16) {
    lane_masks(n - j, m_lo, m_hi);
    const simd::V16 v = simd::load16_first(s + j, n - j);
    max_lo = _mm256_max_ps(max_lo, _mm256_blendv_ps(neg_inf, v.lo, m_lo));
    max_hi = _mm256_max_ps(max_hi, _mm256_blendv_ps(neg_inf, v.hi, m_hi));
  }
  float mx = -std::numeric_limits<float>::infinity();
  alignas(32) float lanes[16];
  _mm256_store_ps(lanes, max_lo);
  _mm256_store_ps(lanes + 8, max_hi);
  for (float l : lanes) mx = std::max(mx, l);
  const __m256 vmx = _mm256_set1_ps(mx);
  simd::V16 vsum = simd::zero16();
  for (std::int64_t j = 0; j < n; j += 16) {
    lane_masks(n - j, m_lo, m_hi);
    const simd::V16 v = simd::load16_first(s + j, n - j);
    const simd::V16 e = {_mm256_and_ps(exp_nonpositive8(_mm256_sub_ps(v.lo, vmx)), m_lo),
                         _mm256_and_ps(exp_nonpositive8(_mm256_sub_ps(v.hi, vmx)), m_hi)};
    _mm256_maskstore_ps(s + j, _mm256_castps_si256(m_lo), e.lo);
    _mm256_maskstore_ps(s + j + 8, _mm256_castps_si256(m_hi), e.hi);
    vsum = simd::add(vsum, e);
  }
  const __m256 sum = _mm256_set1_ps(simd::reduce_add(vsum));
  for (std::int64_t j = 0; j < n; j += 16) {
    lane_masks(n - j, m_lo, m_hi);
    const simd::V16 v = simd::load16_first(s + j, n - j);
    _mm256_maskstore_ps(s + j, _mm256_castps_si256(m_lo), _mm256_div_ps(v.lo, sum));
    _mm256_maskstore_ps(s + j + 8, _mm256_castps_si256(m_hi), _mm256_div_ps(v.hi, sum));
  }
#else
  float mx = s[0];
  for (std::int64_t j = 1; j < n; ++j) mx = std::max(mx, s[j]);
  float sum = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - mx);
    sum += s[j];
  }
  for (std::int64_t j = 0; j < n; ++j) s[j] /= sum;
#endif
}

namespace {
// attention_scores_fixed's dot product one element at a time: 16 lane sums over strides of 16
// (product, then sum: two roundings), the n % 16 tail into lanes 0.., the lanes added pairwise
// from the smallest power of two >= n (8 for n >= 16) down.
float dot_fixed_scalar(const float* a, const float* b, std::int64_t n) {
  float lane[16] = {};
  std::int64_t e = 0;
  for (; e + 16 <= n; e += 16) {
    for (int l = 0; l < 16; ++l) lane[l] += a[e + l] * b[e + l];
  }
  for (int l = 0; e < n; ++e, ++l) lane[l] += a[e] * b[e];
  int top = 8;
  while (top > 1 && top >= n) top /= 2;
  for (int w = top; w >= 1; w /= 2) {
    for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
  }
  return lane[0];
}

#ifdef RLSIM_SIMD16
// Keys a register block of attention_scores_fixed takes side by side (independent sums).
constexpr std::int64_t kScoreKeys = 4;
#ifdef RLSIM_AVX512
using Lanes16 = __m512;
inline Lanes16 lanes_zero() { return _mm512_setzero_ps(); }
inline Lanes16 lanes_load(const float* p) { return _mm512_loadu_ps(p); }
inline void lanes_store(float* p, Lanes16 v) { _mm512_storeu_ps(p, v); }
inline Lanes16 lanes_set1(float v) { return _mm512_set1_ps(v); }
inline Lanes16 lanes_add(Lanes16 a, Lanes16 b) { return _mm512_add_ps(a, b); }
inline Lanes16 lanes_mul(Lanes16 a, Lanes16 b) { return _mm512_mul_ps(a, b); }
inline float lanes_sum(Lanes16 v) { return _mm512_reduce_add_ps(v); }  // the pairwise tree from 8
#else
using Lanes16 = simd::V16;
inline Lanes16 lanes_zero() { return simd::zero16(); }
inline Lanes16 lanes_load(const float* p) { return simd::load16(p); }
inline void lanes_store(float* p, Lanes16 v) { simd::store16(p, v); }
inline Lanes16 lanes_set1(float v) { return simd::set1(v); }
inline Lanes16 lanes_add(Lanes16 a, Lanes16 b) { return simd::add(a, b); }
inline Lanes16 lanes_mul(Lanes16 a, Lanes16 b) { return simd::mul(a, b); }
inline float lanes_sum(Lanes16 v) { return simd::reduce_add(v); }
#endif
#endif
}  // namespace

void attention_scores_fixed(const float* q, const float* k, std::int64_t ldk, std::int64_t visible, std::int64_t hd, float scale,
                            float* s) {
  std::int64_t j = 0;
#ifdef RLSIM_SIMD16
  if (hd % 16 == 0) {
    // kScoreKeys keys at a time, each key's 16 lane sums in its own register: the lanes of
    // dot_fixed_scalar, added by the same tree (n >= 16 starts it at 8).
    for (; j + kScoreKeys <= visible; j += kScoreKeys) {
      Lanes16 acc[kScoreKeys];
      for (auto& a : acc) a = lanes_zero();
      for (std::int64_t e = 0; e < hd; e += 16) {
        const Lanes16 qe = lanes_load(q + e);
        for (std::int64_t u = 0; u < kScoreKeys; ++u)
          acc[u] = lanes_add(acc[u], lanes_mul(qe, lanes_load(k + (j + u) * ldk + e)));
      }
      for (std::int64_t u = 0; u < kScoreKeys; ++u) s[j + u] = lanes_sum(acc[u]) * scale;
    }
  }
#endif
  for (; j < visible; ++j) s[j] = dot_fixed_scalar(q, k + j * ldk, hd) * scale;
}

namespace {
thread_local volatile std::uint8_t read_sink;  // read_into_cache's loads stay: their result is stored
}  // namespace

void read_into_cache(const void* p, std::size_t bytes) {
  constexpr auto kLine = static_cast<std::size_t>(kCacheLineBytes);
  std::size_t b0 = 0, b1 = bytes;
#ifdef _OPENMP
  const auto n = static_cast<std::size_t>(omp_get_num_threads()), t = static_cast<std::size_t>(omp_get_thread_num());
  b0 = bytes * t / n / kLine * kLine, b1 = t + 1 == n ? bytes : bytes * (t + 1) / n / kLine * kLine;
#endif
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint8_t any = 0;  // one byte of each line, ORed: independent loads the core overlaps
  for (std::size_t o = b0; o < b1; o += kLine) any |= b[o];
  read_sink = any;
}

void attention_values_fixed(const float* p, const float* v, std::int64_t ldv, std::int64_t visible, std::int64_t hd, float* out) {
  std::int64_t e0 = 0;
#ifdef RLSIM_SIMD16
  // Up to 8 registers of 16 outputs (a head of up to 128) summed over the positions in order.
  while (e0 + 16 <= hd) {
    const std::int64_t nv = std::min<std::int64_t>(8, (hd - e0) / 16);
    Lanes16 acc[8];
    for (std::int64_t r = 0; r < nv; ++r) acc[r] = lanes_zero();
    for (std::int64_t j = 0; j < visible; ++j) {
      const Lanes16 pj = lanes_set1(p[j]);
      const float* vj = v + j * ldv + e0;
      for (std::int64_t r = 0; r < nv; ++r) acc[r] = lanes_add(acc[r], lanes_mul(pj, lanes_load(vj + 16 * r)));
    }
    for (std::int64_t r = 0; r < nv; ++r) lanes_store(out + e0 + 16 * r, acc[r]);
    e0 += 16 * nv;
  }
#endif
  for (; e0 < hd; ++e0) {
    float a = 0;
    for (std::int64_t j = 0; j < visible; ++j) a += p[j] * v[j * ldv + e0];
    out[e0] = a;
  }
}

void silu_mul(const float* gate, const float* up, float* out, std::int64_t n) {
  std::int64_t i = 0;
#ifdef RLSIM_AVX512
  const __m512 one = _mm512_set1_ps(1.0f);
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 a = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 t = exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(a)));  // e^-|a|
    const __m512 num = _mm512_mask_mul_ps(a, _mm512_cmp_ps_mask(a, _mm512_setzero_ps(), _CMP_LT_OQ), a, t);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_div_ps(num, _mm512_add_ps(one, t)), _mm512_maskz_loadu_ps(m, up + i)));
  }
#elif defined(RLSIM_AVX2)
  // The AVX-512 lanes' operations 8 at a time (exp_nonpositive8 gives exp_nonpositive's bits).
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_loadu_ps(gate + i);
    const __m256 t = exp_nonpositive8(_mm256_sub_ps(zero, _mm256_and_ps(a, abs_mask)));
    const __m256 num = _mm256_blendv_ps(a, _mm256_mul_ps(a, t), _mm256_cmp_ps(a, zero, _CMP_LT_OQ));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(num, _mm256_add_ps(one, t)), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {  // the tail through a zero-padded block of 8
    alignas(32) float g8[8] = {}, u8[8] = {}, o8[8];
    std::copy(gate + i, gate + n, g8);
    std::copy(up + i, up + n, u8);
    silu_mul(g8, u8, o8, 8);
    std::copy(o8, o8 + (n - i), out + i);
  }
#else
  for (; i < n; ++i) {
    const float a = gate[i], t = std::exp(-std::fabs(a));
    out[i] = (a < 0.0f ? a * t : a) / (1.0f + t) * up[i];
  }
#endif
}

E2M1Activations::E2M1Activations(const float* x, std::int64_t t, std::int64_t c, const Format& f)
    : tokens(t), cols(c), ld((c + 31) / 32 * 32) {
  if (f.element != Element::kFp4E2M1 || f.scaling.kind != ScaleKind::kNv16) {
    throw std::invalid_argument(fmt::format("E2M1Activations: {} is not fp4-e2m1 with nv16 scaling", f.str()));
  }
  if (t <= 0 || c <= 0) throw std::invalid_argument(fmt::format("E2M1Activations: shape [{}, {}] must be positive", t, c));
  const auto n = static_cast<std::size_t>(t * ld);
  codes.assign(n, 0);
  bias.assign(n / 4, 0);
  scales.assign(n / 16, 0.0f);
  tensor.assign(static_cast<std::size_t>(t), 1.0f);
  const float lift = kE4M3Fix * 0.25f;  // 2^118: the scale's 2^120 and the doubled codes' 1/4
  thread_local std::vector<double> row_scales;
  row_scales.resize(static_cast<std::size_t>((c + 15) / 16));
  for (std::int64_t r = 0; r < t; ++r) {
    std::int8_t* row = codes.data() + r * ld;
    // quantize(f, 1, c, row)'s codes as their doubled values, its block scales and tensor scale.
    tensor[static_cast<std::size_t>(r)] = static_cast<float>(
        quantize_nvfp4_doubled(f, std::span<const float>(x + r * c, static_cast<std::size_t>(c)), row, row_scales.data()));
    for (std::size_t b = 0; b < row_scales.size(); ++b)
      scales[static_cast<std::size_t>(r * ld / 16) + b] = static_cast<float>(row_scales[b]) * lift;
    for (std::int64_t g = 0; g < ld / 4; ++g)
      bias[static_cast<std::size_t>(r * ld / 4 + g)] = -kOffset * (row[4 * g] + row[4 * g + 1] + row[4 * g + 2] + row[4 * g + 3]);
  }
}

bool PackedWeight::e2m1_dot_applies(const Format& f) const {
#if defined(RLSIM_AVX512_VNNI) || defined(RLSIM_AVX2)
  return e2m1_dot_ok_ && f.element == Element::kFp4E2M1 && f.scaling.kind == ScaleKind::kNv16;
#else
  (void)f;
  return false;
#endif
}

namespace {
// A 4-bit E2M1 code's doubled value plus E2M1Activations::kOffset, in [0, 24]: the unsigned
// weight byte of VPDPBUSD, for each of the 16 codes of `lut` (the codes' values).
std::array<std::uint8_t, 16> e2m1_unsigned_codes(const float* lut) {
  std::array<std::uint8_t, 16> u{};
  for (int k = 0; k < 16; ++k)
    u[static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(2.0f * lut[k] + E2M1Activations::kOffset);
  return u;
}

#ifdef RLSIM_AVX512_VNNI
// The W4A4 integer kernel of NS tiles read side by side for NT tokens (n0..): tiles[s] a tile's
// chunks (64 bytes each: row i's 16 bytes at 16 i, byte k holding column k in its low nibble and
// k + 16 in its high one), tile_scales[s] its tile-permuted E4M3 scales (8 bytes a chunk: the 4
// rows' of the chunk's first 16-column block, then of its second). Lane 4 i + m of every vector
// belongs to row i and columns 4m..4m+3 of a block, so one VPDPBUSD sums a block's 16 products
// into the 4 lanes of each row. out[(s * NT + m) * 4 + i]: row i of tiles[s] for token n0 + m,
// the same bits for any NS.
template <int NT, int NS>
void e2m1_tile(const std::uint8_t* const* tiles, const std::uint8_t* const* tile_scales, std::int64_t chunks, __m512i table,
               const E2M1Activations& x, std::int64_t n0, float weight_tensor_scale, float* out) {
  __m512 acc[NS][NT];
  for (int s = 0; s < NS; ++s) {
    for (int m = 0; m < NT; ++m) acc[s][m] = _mm512_setzero_ps();
  }
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  // VPSHUFB controls on the chunk's 8 scale bytes, which every 128-bit lane holds: byte 4d of
  // lane d takes scale byte d / 4 (first block) or 4 + d / 4 (second), the lane's other three
  // bytes zero (index 0x80). Lane d's 128-bit lane is d / 4, so the control is per 128-bit lane.
  alignas(64) std::int8_t idx[2][64];
  for (int b = 0; b < 64; ++b) {
    const bool low_byte = b % 4 == 0;
    const auto lane = static_cast<std::int8_t>(b / 16);
    idx[0][b] = low_byte ? lane : static_cast<std::int8_t>(0x80);
    idx[1][b] = low_byte ? static_cast<std::int8_t>(4 + lane) : static_cast<std::int8_t>(0x80);
  }
  const __m512i idx_lo = _mm512_load_si512(idx[0]), idx_hi = _mm512_load_si512(idx[1]);
  const std::int64_t ldb = x.ld / 4, lds = x.ld / 16;
  for (std::int64_t j = 0; j < chunks; ++j) {
    __m512i wl[NS], wh[NS];
    __m512 sl[NS], sh[NS];
    for (int s = 0; s < NS; ++s) {
      const std::uint8_t* p = tiles[s] + 64 * j;
      prefetch_stream(p);
      const __m512i v = _mm512_loadu_si512(p);
      wl[s] = _mm512_shuffle_epi8(table, _mm512_and_si512(v, low4));
      wh[s] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
      std::uint64_t b8;
      std::memcpy(&b8, tile_scales[s] + 8 * j, sizeof b8);
      const __m512i sb = _mm512_set1_epi64(static_cast<long long>(b8));
      // Each lane's E4M3 scale bits at FP32 bits 26..20: 2^-120 times the scale (kE4M3Fix).
      sl[s] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_shuffle_epi8(sb, idx_lo), simd::kE4M3Fp32Shift));
      sh[s] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_shuffle_epi8(sb, idx_hi), simd::kE4M3Fp32Shift));
    }
    for (int m = 0; m < NT; ++m) {
      const std::int64_t n = n0 + m;
      const std::int8_t* xc = x.codes.data() + n * x.ld + 32 * j;
      const std::int32_t* xb = x.bias.data() + n * ldb + 8 * j;
      const float* xs = x.scales.data() + n * lds + 2 * j;
      const __m512i cl = broadcast_16_bytes(xc), ch = broadcast_16_bytes(xc + 16), bl = broadcast_16_bytes(xb),
                    bh = broadcast_16_bytes(xb + 4);
      const __m512 xs0 = _mm512_set1_ps(xs[0]), xs1 = _mm512_set1_ps(xs[1]);
      for (int s = 0; s < NS; ++s) {
        const __m512i il = dot_u8s8(bl, wl[s], cl), ih = dot_u8s8(bh, wh[s], ch);
        acc[s][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(il), _mm512_mul_ps(sl[s], xs0), acc[s][m]);
        acc[s][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ih), _mm512_mul_ps(sh[s], xs1), acc[s][m]);
      }
    }
  }
  for (int s = 0; s < NS; ++s) {
    for (int m = 0; m < NT; ++m) {
      alignas(64) float lane[16];
      _mm512_store_ps(lane, acc[s][m]);
      const float ts = weight_tensor_scale * x.tensor[static_cast<std::size_t>(n0 + m)];
      for (int i = 0; i < 4; ++i) out[(s * NT + m) * 4 + i] = tile_row_sum(lane, i) * ts;
    }
  }
}
#elif defined(RLSIM_AVX2)
// The same kernel on AVX2's 256-bit registers: rows 0-1 of the tile in
// one register, rows 2-3 in the other, so lane 4 i + m of the pair is the AVX-512 kernel's lane
// 4 i + m. dot_u8s8 gives VPDPBUSD's exact sums of 4 products (Intel SDM vol. 2B) on AVX2 too
// (see it), then the same FP32 operations in the same order: both give the same bits.
template <int NT, int NS>
void e2m1_tile(const std::uint8_t* const* tiles, const std::uint8_t* const* tile_scales, std::int64_t chunks, __m256i table,
               const E2M1Activations& x, std::int64_t n0, float weight_tensor_scale, float* out) {
  simd::V16 acc[NS][NT];
  for (int s = 0; s < NS; ++s) {
    for (int m = 0; m < NT; ++m) acc[s][m] = simd::zero16();
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  // Lanes 0-3 take the scale of the register's first row, lanes 4-7 of its second.
  const __m256i rows01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), rows23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
  const __m256i rows45 = _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5), rows67 = _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7);
  const std::int64_t ldb = x.ld / 4, lds = x.ld / 16;
  for (std::int64_t j = 0; j < chunks; ++j) {
    __m256i wl0[NS], wh0[NS], wl1[NS], wh1[NS];
    simd::V16 sl[NS], sh[NS];
    for (int s = 0; s < NS; ++s) {
      const std::uint8_t* p = tiles[s] + 64 * j;
      prefetch_stream(p);
      const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
      wl0[s] = _mm256_shuffle_epi8(table, _mm256_and_si256(v0, low4));
      wh0[s] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v0, 4), low4));
      wl1[s] = _mm256_shuffle_epi8(table, _mm256_and_si256(v1, low4));
      wh1[s] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v1, 4), low4));
      // The chunk's 8 E4M3 scale bytes at FP32 bits 26..20: 2^-120 times each scale (kE4M3Fix).
      const __m256 s8 = _mm256_castsi256_ps(_mm256_slli_epi32(
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(tile_scales[s] + 8 * j))), simd::kE4M3Fp32Shift));
      sl[s] = {_mm256_permutevar8x32_ps(s8, rows01), _mm256_permutevar8x32_ps(s8, rows23)};
      sh[s] = {_mm256_permutevar8x32_ps(s8, rows45), _mm256_permutevar8x32_ps(s8, rows67)};
    }
    for (int m = 0; m < NT; ++m) {
      const std::int64_t n = n0 + m;
      const std::int8_t* xc = x.codes.data() + n * x.ld + 32 * j;
      const std::int32_t* xb = x.bias.data() + n * ldb + 8 * j;
      const float* xs = x.scales.data() + n * lds + 2 * j;
      const __m256i cl = broadcast_16_bytes(xc), ch = broadcast_16_bytes(xc + 16), bl = broadcast_16_bytes(xb),
                    bh = broadcast_16_bytes(xb + 4);
      const simd::V16 xs0 = simd::set1(xs[0]), xs1 = simd::set1(xs[1]);
      for (int s = 0; s < NS; ++s) {
        // The 4 sums of 4 products per row of a register, plus the activations' offset correction.
        const simd::V16 il{_mm256_cvtepi32_ps(dot_u8s8(bl, wl0[s], cl)), _mm256_cvtepi32_ps(dot_u8s8(bl, wl1[s], cl))};
        const simd::V16 ih{_mm256_cvtepi32_ps(dot_u8s8(bh, wh0[s], ch)), _mm256_cvtepi32_ps(dot_u8s8(bh, wh1[s], ch))};
        acc[s][m] = simd::fmadd(il, simd::mul(sl[s], xs0), acc[s][m]);
        acc[s][m] = simd::fmadd(ih, simd::mul(sh[s], xs1), acc[s][m]);
      }
    }
  }
  for (int s = 0; s < NS; ++s) {
    for (int m = 0; m < NT; ++m) {
      alignas(32) float lane[16];
      simd::store16(lane, acc[s][m]);
      const float ts = weight_tensor_scale * x.tensor[static_cast<std::size_t>(n0 + m)];
      for (int i = 0; i < 4; ++i) out[(s * NT + m) * 4 + i] = tile_row_sum(lane, i) * ts;
    }
  }
}
#endif
}  // namespace

void PackedWeight::gemm_rows_e2m1(const E2M1Activations& x, float* y, std::int64_t ldy, std::int64_t r0, std::int64_t r1) const {
  if (!e2m1_dot_ok_) throw std::logic_error("gemm_rows_e2m1: the weight is not NVFP4 in the kernel layout");
  if (x.cols != cols_)
    throw std::invalid_argument(fmt::format("gemm_rows_e2m1: activations of {} columns, weight of {}", x.cols, cols_));
#if defined(RLSIM_AVX512_VNNI) || defined(RLSIM_AVX2)
  const std::array<std::uint8_t, 16> u = e2m1_unsigned_codes(lut_);
#ifdef RLSIM_AVX512_VNNI
  const __m512i table = broadcast_16_bytes(u.data());
#else
  const __m256i table = broadcast_16_bytes(u.data());
#endif
  constexpr int R = kTileRows;
  auto tile_scales = [&](std::int64_t t) { return scale_data_.data() + block_index(t * R, 0); };
  if (x.tokens == 1) {
    for_each_tile_pair<R>(
        r0, r1, y,
        [&](std::int64_t t, float* out) {
          const std::uint8_t *p = tile_codes(t), *sc = tile_scales(t);
          e2m1_tile<1, 1>(&p, &sc, chunks_, table, x, 0, tensor_scale_, out);
        },
        [&](const std::int64_t* ts, float* out) {
          const std::uint8_t* p[2] = {tile_codes(ts[0]), tile_codes(ts[1])};
          const std::uint8_t* sc[2] = {tile_scales(ts[0]), tile_scales(ts[1])};
          e2m1_tile<1, 2>(p, sc, chunks_, table, x, 0, tensor_scale_, out);
        });
    return;
  }
  for_each_tile<R>(x.tokens, x.tokens, r0, r1, y, ldy, [&](std::int64_t n, bool four, float* out, std::int64_t t) {
    const std::uint8_t *p = tile_codes(t), *sc = tile_scales(t);
    if (four) {
      e2m1_tile<4, 1>(&p, &sc, chunks_, table, x, n, tensor_scale_, out);
    } else {
      e2m1_tile<1, 1>(&p, &sc, chunks_, table, x, n, tensor_scale_, out);
    }
  });
#else
  gemm_rows_e2m1_scalar(x, y, ldy, r0, r1);
#endif
}

void PackedWeight::gemm_rows_e2m1_scalar(const E2M1Activations& x, float* y, std::int64_t ldy, std::int64_t r0,
                                         std::int64_t r1) const {
  if (!e2m1_dot_ok_) throw std::logic_error("gemm_rows_e2m1_scalar: the weight is not NVFP4 in the kernel layout");
  if (x.cols != cols_)
    throw std::invalid_argument(fmt::format("gemm_rows_e2m1_scalar: activations of {} columns, weight of {}", x.cols, cols_));
  const std::array<std::uint8_t, 16> u = e2m1_unsigned_codes(lut_);
  const std::int64_t ldb = x.ld / 4, lds = x.ld / 16;
  for (std::int64_t n = 0; n < x.tokens; ++n) {
    const std::int8_t* xc = x.codes.data() + n * x.ld;
    for (std::int64_t r = r0; r < r1; ++r) {
      float acc[4] = {};
      for (std::int64_t j = 0; j < chunks_; ++j) {
        const std::uint8_t* chunk = data_.data() + offset(r, 32 * j);
        for (int h = 0; h < 2; ++h) {
          const std::int64_t b = 2 * j + h;
          const float s = std::bit_cast<float>(static_cast<std::uint32_t>(scale_data_[block_index(r, b)]) << 20) *
                          x.scales[static_cast<std::size_t>(n * lds + b)];
          for (int m = 0; m < 4; ++m) {
            std::int32_t sum = x.bias[static_cast<std::size_t>(n * ldb + 4 * b + m)];
            for (int e = 0; e < 4; ++e) {
              const int k = 4 * m + e;
              const unsigned code = h == 0 ? chunk[k] & 0xFu : chunk[k] >> 4u;
              sum += u[code] * xc[16 * b + k];
            }
            acc[m] = std::fma(static_cast<float>(sum), s, acc[m]);
          }
        }
      }
      y[n * ldy + r - r0] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) * (tensor_scale_ * x.tensor[static_cast<std::size_t>(n)]);
    }
  }
}

void LearnedSplit::boundaries(std::int64_t total, int n, std::int64_t* b) const {
  b[0] = 0;
  double cumulative = 0;
  for (int t = 0; t < n; ++t) {
    cumulative += fraction(t, n);
    b[t + 1] = t + 1 == n ? total : std::clamp<std::int64_t>(std::llround(cumulative * static_cast<double>(total)), b[t], total);
  }
}

float LearnedSplit::fraction(int t, int n) const {
  if (n < 2 || n > kMaxThreads || threads_.load(std::memory_order_relaxed) != n) return 1.0f / static_cast<float>(n);
  return fraction_[static_cast<std::size_t>(t)].load(std::memory_order_relaxed);
}

void LearnedSplit::learn(int n, const std::int64_t* b, const double* seconds) const {
  if (n < 2 || n > kMaxThreads) return;
  std::array<double, kMaxThreads> rate{};
  double rates = 0;
  for (int t = 0; t < n; ++t) {
    const auto work = static_cast<double>(b[t + 1] - b[t]);
    if (!(work > 0 && seconds[t] > 0)) return;
    rate[static_cast<std::size_t>(t)] = work / seconds[t];
    rates += rate[static_cast<std::size_t>(t)];
  }
  constexpr double kStep = 0.25;  // of the way towards the last call's balance
  const double even = 1.0 / n;
  std::array<double, kMaxThreads> f{};
  double sum = 0;
  for (int t = 0; t < n; ++t) {
    const auto i = static_cast<std::size_t>(t);
    const double old = fraction(t, n);
    f[i] = std::clamp(old + kStep * (rate[i] / rates - old), 0.5 * even, 1.5 * even);
    sum += f[i];
  }
  for (int t = 0; t < n; ++t) {
    const auto i = static_cast<std::size_t>(t);
    fraction_[i].store(static_cast<float>(f[i] / sum), std::memory_order_relaxed);
  }
  threads_.store(n, std::memory_order_relaxed);
}

namespace {
// split_work with the shares `split` learned (LearnedSplit::boundaries), each thread's time from
// the call's start taught to it afterwards. A team of another size than omp_get_max_threads()
// (a nested region) splits evenly and teaches nothing.
template <typename F>
void split_learned(std::int64_t total, bool parallel, [[maybe_unused]] const LearnedSplit& split, F&& run) {
#ifdef _OPENMP
  const int n = omp_get_max_threads();
  if (parallel && n > 1 && n <= LearnedSplit::kMaxThreads) {
    using Clock = std::chrono::steady_clock;
    std::array<std::int64_t, LearnedSplit::kMaxThreads + 1> b{};
    std::array<double, LearnedSplit::kMaxThreads> seconds{};
    split.boundaries(total, n, b.data());
    bool whole_team = true;
    const Clock::time_point start = Clock::now();
#pragma omp parallel
    {
      const int m = omp_get_num_threads(), t = omp_get_thread_num();
      if (m == n) {
        run(b[static_cast<std::size_t>(t)], b[static_cast<std::size_t>(t) + 1]);
        seconds[static_cast<std::size_t>(t)] = std::chrono::duration<double>(Clock::now() - start).count();
      } else {
        if (t == 0) whole_team = false;
        run(total * t / m, total * (t + 1) / m);
      }
    }
    if (whole_team) split.learn(n, b.data(), seconds.data());
    return;
  }
#endif
  split_work(total, parallel, run);
}
}  // namespace

void GemvCallStats::add(double b, double t) {
  ++calls;
  const double db = b - mean_bytes;
  mean_bytes += db / static_cast<double>(calls);
  mean_seconds += (t - mean_seconds) / static_cast<double>(calls);
  m2_bytes += db * (b - mean_bytes);
  co_bytes_seconds += db * (t - mean_seconds);
  seconds += t;
}

bool GemvCallStats::fit(double& fixed_seconds, double& bytes_per_second) const {
  fixed_seconds = bytes_per_second = 0;
  constexpr double kMinRelativeSpread = 1e-9;  // of the mean size: below it, one size
  const double spread = std::sqrt(m2_bytes / std::max<double>(1, static_cast<double>(calls)));
  if (calls < 2 || !(spread > kMinRelativeSpread * mean_bytes)) return false;
  const double slope = co_bytes_seconds / m2_bytes;  // seconds per byte
  if (!(slope > 0)) return false;
  fixed_seconds = mean_seconds - slope * mean_bytes;
  bytes_per_second = 1 / slope;
  return true;
}

namespace {
// gemv()'s recorder (gemv_record_start): on or off, and the sums under their mutex.
std::atomic<bool> g_gemv_recording{false};
std::mutex g_gemv_record_mutex;
GemvCallStats g_gemv_record;

// Times one gemv() call from its construction to its destruction (every return path) and adds
// it to the recorder's sums, when recording and outside an OpenMP region.
class GemvCallTimer {
 public:
  explicit GemvCallTimer(std::span<const GemvJob> jobs) : jobs_(jobs) {
    on_ = g_gemv_recording.load(std::memory_order_relaxed);
#ifdef _OPENMP
    on_ = on_ && omp_in_parallel() == 0;
#endif
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  GemvCallTimer(const GemvCallTimer&) = delete;
  GemvCallTimer& operator=(const GemvCallTimer&) = delete;
  ~GemvCallTimer() {
    if (!on_) return;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    double bytes = 0;
    for (const GemvJob& j : jobs_) bytes += static_cast<double>(j.w->bytes());
    const std::lock_guard<std::mutex> lock(g_gemv_record_mutex);
    g_gemv_record.add(bytes, seconds);
  }

 private:
  std::span<const GemvJob> jobs_;
  bool on_ = false;
  std::chrono::steady_clock::time_point start_;
};
}  // namespace

void gemv_record_start() {
  const std::lock_guard<std::mutex> lock(g_gemv_record_mutex);
  g_gemv_record = GemvCallStats{};
  g_gemv_recording.store(true, std::memory_order_relaxed);
}

GemvCallStats gemv_record_stop() {
  const std::lock_guard<std::mutex> lock(g_gemv_record_mutex);
  g_gemv_recording.store(false, std::memory_order_relaxed);
  return std::exchange(g_gemv_record, GemvCallStats{});
}

void gemv(std::span<const GemvJob> jobs) {
  const GemvCallTimer timer(jobs);
  if (jobs.empty()) return;
  std::int64_t total = 0;
  for (const GemvJob& j : jobs) total += j.w->rows() * j.w->cols() * j.tokens;
  auto run = [&](std::int64_t w0, std::int64_t w1) {
    // Rows whose first multiply-add falls in [w0, w1), boundaries on whole tiles or panels.
    std::int64_t off = 0;
    for (const GemvJob& j : jobs) {
      const std::int64_t rows = j.w->rows(), cols = j.w->cols() * j.tokens;  // work per row
      const std::int64_t granule = j.w->split_rows();
      auto boundary = [&](std::int64_t w) {
        const std::int64_t r = std::clamp<std::int64_t>((w - off + cols - 1) / cols, 0, rows);
        return std::min(rows, (r + granule - 1) / granule * granule);
      };
      const std::int64_t a = w0 <= off ? 0 : boundary(w0), b = w1 >= off + rows * cols ? rows : boundary(w1);
      if (a < b && j.x_e2m1 != nullptr) {
        j.w->gemm_rows_e2m1(*j.x_e2m1, j.y + a, rows, a, b);
      } else if (a < b) {
        j.w->gemm_rows(j.x, j.tokens, j.y + a, rows, a, b, j.x_bf16);
      }
      off += rows * cols;
    }
  };
  split_learned(total, total >= (1 << 16), jobs.front().w->split(), run);
}

}  // namespace rlsim::models
