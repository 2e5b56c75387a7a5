// The precision trait table: one row per element format and per scaling, in one place, as ggml's
// type_traits. The memory model (bytes), the cost model (which tensor-core rate), the
// precision-flow graph (edge attributes) and the real runtime (which quantiser) all read it.
//
// Sources: OCP 8-bit Floating Point Specification (OFP8) v1.0 (E4M3 / E5M2 ranges);
// OCP Microscaling Formats (MX) v1.0 sec. 5 (E8M0 scale, 32-element blocks, E2M1 elements);
// NVIDIA Blackwell NVFP4 (E2M1 + E4M3 scale per 16 + FP32 per tensor);
// HiFloat8 arXiv 2409.16626; HiF4 arXiv 2602.11287 (64-element block, 32 bits metadata);
// DeepSeek-V3 tech report sec. 3.3 (128x128 weight blocks, 1x128 activation groups).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlsim::models {

/// Tensor-core compute type a GEMM runs on (keys of a device's `compute:` map).
enum class ComputeType : std::uint8_t { kFp32, kBf16, kFp16, kFp8, kInt8, kFp4 };

/// Facts of one compute type: its name in device files, the operand width rank that decides
/// which operand's type a mixed GEMM runs on (the wider), and the types a device without this
/// one runs it on instead, in order of preference (FP32 CUDA cores always come last; Hopper has
/// no FP4 tensor cores, so NVFP4 falls back to FP8, then the 16-bit types).
struct ComputeTraits {
  ComputeType compute;
  std::string_view name;
  int width_rank;  // 0 fp4, 1 fp8/int8, 2 bf16/fp16, 3 fp32
  std::array<ComputeType, 3> fallback;
  int fallbacks;  // entries of `fallback` in use
};

inline constexpr std::array<ComputeTraits, 6> kComputeTraits{{
    {ComputeType::kFp32, "fp32", 3, {}, 0},
    {ComputeType::kBf16, "bf16", 2, {ComputeType::kFp16}, 1},
    {ComputeType::kFp16, "fp16", 2, {ComputeType::kBf16}, 1},
    {ComputeType::kFp8, "fp8", 1, {ComputeType::kBf16, ComputeType::kFp16}, 2},
    {ComputeType::kInt8, "int8", 1, {ComputeType::kBf16, ComputeType::kFp16}, 2},
    {ComputeType::kFp4, "fp4", 0, {ComputeType::kFp8, ComputeType::kBf16, ComputeType::kFp16}, 3},
}};
static_assert(kComputeTraits.size() == static_cast<std::size_t>(ComputeType::kFp4) + 1);
static_assert(kComputeTraits[static_cast<int>(ComputeType::kFp8)].compute == ComputeType::kFp8);

constexpr const ComputeTraits& traits(ComputeType c) { return kComputeTraits[static_cast<int>(c)]; }

/// Element (storage) formats. kE8M0 only ever appears as a shared scale (OCP MX).
enum class Element : std::uint8_t { kFp32, kBf16, kFp16, kFp8E4M3, kFp8E5M2, kInt8, kInt4, kFp4E2M1, kHif8, kHif4, kE8M0 };

/// Bit layout of a binary floating-point element (sign bit, exp_bits, man_bits); exp_bits 0 for
/// an element with a codec of its own (fp32, integers, hif8, e8m0).
struct FloatLayout {
  int exp_bits = 0;
  int man_bits = 0;
  int bias = 0;
  bool ieee_specials = false;  // all-ones exponent = Inf / NaN (IEEE, E5M2)
  bool e4m3_nan = false;       // only S.1111.111 is NaN; the rest of the top binade is finite (E4M3)
  bool has_nan = true;         // false: no NaN encoding (E2M1)
};

/// Facts of one element format.
struct ElementTraits {
  Element element;
  std::string_view name;  // as written in scenario files
  int bits;               // storage bits per element
  bool is_float;
  double max_finite;        // largest finite magnitude (int: largest symmetric level)
  ComputeType compute;      // tensor-core type a GEMM on this element runs on natively
  int intrinsic_block;      // elements sharing built-in metadata (HiF4: 64), else 1
  int intrinsic_meta_bits;  // metadata bits per intrinsic block (HiF4: 32), else 0
  bool scale_only;          // only valid as a scale element (E8M0)
  FloatLayout layout;       // binary float elements encoded by the generic float codec
};

inline constexpr std::array<ElementTraits, 11> kElementTraits{{
    {Element::kFp32, "fp32", 32, true, 3.4028234663852886e38, ComputeType::kFp32, 1, 0, false, {}},
    {Element::kBf16, "bf16", 16, true, 3.3895313892515355e38, ComputeType::kBf16, 1, 0, false, {8, 7, 127, true, false, true}},
    {Element::kFp16, "fp16", 16, true, 65504.0, ComputeType::kFp16, 1, 0, false, {5, 10, 15, true, false, true}},
    // OFP8 v1.0 table 1: E4M3 max 448 (S.1111.110), no infinities; E5M2 max 57344.
    {Element::kFp8E4M3, "fp8-e4m3", 8, true, 448.0, ComputeType::kFp8, 1, 0, false, {4, 3, 7, false, true, true}},
    {Element::kFp8E5M2, "fp8-e5m2", 8, true, 57344.0, ComputeType::kFp8, 1, 0, false, {5, 2, 15, true, false, true}},
    {Element::kInt8, "int8", 8, false, 127.0, ComputeType::kInt8, 1, 0, false, {}},
    // Symmetric [-7, 7] as slime / Kimi-K2 W4A16 use; weights dequantise to BF16 for the GEMM.
    {Element::kInt4, "int4", 4, false, 7.0, ComputeType::kBf16, 1, 0, false, {}},
    // OCP MX v1.0 sec. 5.3.3: E2M1 values +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
    {Element::kFp4E2M1, "fp4-e2m1", 4, true, 6.0, ComputeType::kFp4, 1, 0, false, {2, 1, 1, false, false, false}},
    // HiFloat8 (arXiv 2409.16626 sec. 2): max normal 2^15 = 32768; tapered, its own codec.
    {Element::kHif8, "hif8", 8, true, 32768.0, ComputeType::kFp8, 1, 0, false, {}},
    // HiF4 (arXiv 2602.11287): S1E1M2 elements (max 1.75) in 64-blocks with 32 bits of metadata.
    {Element::kHif4, "hif4", 4, true, 1.75, ComputeType::kFp4, 64, 32, false, {1, 2, 1, false, false, false}},
    // OCP MX v1.0 sec. 5.4: E8M0 power-of-two scale, bias 127, 0xFF = NaN.
    {Element::kE8M0, "e8m0", 8, true, 1.7014118346046923e38, ComputeType::kFp32, 1, 0, true, {}},
}};

/// How a tensor's elements share scale factors.
enum class ScaleKind : std::uint8_t {
  kNone,      // unscaled (bf16, fp32 ...)
  kTensor,    // one FP32 scale per tensor
  kChannel,   // one FP32 scale per output channel (row of a [out, in] weight)
  kToken,     // one FP32 scale per token (row of an activation [tokens, features])
  kGroup1xN,  // activations: one FP32 scale per token per N inputs (DeepSeek-V3: 1x128)
  kBlockMxN,  // weights: one FP32 scale per MxN block (DeepSeek-V3: 128x128)
  kGroupN,    // weights: one scale per N inputs of a row (W4A16 g32/g128; BF16 scale)
  kMx32,      // OCP MX: one E8M0 scale per 32 elements along the reduction dimension
  kNv16,      // NVFP4: one E4M3 scale per 16 elements plus one FP32 scale per tensor
};

/// Facts of one scaling kind.
struct ScalingTraits {
  ScaleKind kind;
  std::string_view name;  // as written after '/', without its numeric parameters
  Element scale_element;  // storage type of each scale
  int tensor_scale_bits;  // extra per-tensor scale bits (NVFP4: 32), else 0
};

inline constexpr std::array<ScalingTraits, 9> kScalingTraits{{
    {ScaleKind::kNone, "none", Element::kFp32, 0},
    {ScaleKind::kTensor, "tensor", Element::kFp32, 0},
    {ScaleKind::kChannel, "channel", Element::kFp32, 0},
    {ScaleKind::kToken, "token", Element::kFp32, 0},
    {ScaleKind::kGroup1xN, "group1x", Element::kFp32, 0},
    {ScaleKind::kBlockMxN, "block", Element::kFp32, 0},
    // slime / SGLang W4A16 keep group scales in BF16 (pack_int4_to_int32 path).
    {ScaleKind::kGroupN, "group", Element::kBf16, 0},
    {ScaleKind::kMx32, "mx32", Element::kE8M0, 0},
    {ScaleKind::kNv16, "nv16", Element::kFp8E4M3, 32},
}};

static_assert(kElementTraits.size() == static_cast<std::size_t>(Element::kE8M0) + 1);
static_assert(kScalingTraits.size() == static_cast<std::size_t>(ScaleKind::kNv16) + 1);
static_assert(kElementTraits[static_cast<int>(Element::kFp8E4M3)].max_finite == 448.0);
static_assert(kElementTraits[static_cast<int>(Element::kFp8E5M2)].max_finite == 57344.0);
static_assert(kElementTraits[static_cast<int>(Element::kFp4E2M1)].bits == 4);
static_assert(kElementTraits[static_cast<int>(Element::kHif4)].intrinsic_block == 64);
// 1 sign + exponent + mantissa bits fill the element.
static_assert(1 + kElementTraits[static_cast<int>(Element::kBf16)].layout.exp_bits +
                  kElementTraits[static_cast<int>(Element::kBf16)].layout.man_bits ==
              16);
static_assert(1 + kElementTraits[static_cast<int>(Element::kFp8E4M3)].layout.exp_bits +
                  kElementTraits[static_cast<int>(Element::kFp8E4M3)].layout.man_bits ==
              8);
static_assert(kScalingTraits[static_cast<int>(ScaleKind::kMx32)].scale_element == Element::kE8M0);

constexpr const ElementTraits& traits(Element e) { return kElementTraits[static_cast<int>(e)]; }
constexpr const ScalingTraits& traits(ScaleKind k) { return kScalingTraits[static_cast<int>(k)]; }

/// A scaling with its block shape. For kGroup1xN and kGroupN, `cols` is N (rows = 1); for
/// kBlockMxN, rows x cols = M x N; kMx32 is 1x32 and kNv16 1x16 along the reduction dimension.
struct Scaling {
  ScaleKind kind = ScaleKind::kNone;
  int rows = 1;
  int cols = 1;
  bool operator==(const Scaling&) const = default;
};

/// A tensor format `<element>[/<scaling>]`, e.g. "fp8-e4m3/block128x128", "int4/group32", "mxfp8".
struct Format {
  Element element = Element::kBf16;
  Scaling scaling{};
  bool operator==(const Format&) const = default;

  /// Storage bytes of a [rows, cols] tensor (cols = reduction dimension, the inner one), with
  /// scale overhead: ceil-divided block counts (ragged edges get their own scale) times scale
  /// bits, plus intrinsic metadata and the per-tensor scale. Throws std::invalid_argument for
  /// non-positive shapes.
  double bytes(std::int64_t rows, std::int64_t cols) const;

  /// Bits per value including amortised scale overhead, for a [rows, cols] tensor.
  double bits_per_value(std::int64_t rows, std::int64_t cols) const;

  /// Canonical string, e.g. "fp8-e4m3/block128x128" (short names are expanded).
  std::string str() const;
  /// Whether the format changes values beyond a plain 16/32-bit float: any scaling, or an element
  /// narrower than 16 bits (what a quantiser has to run for).
  bool quantised() const { return scaling.kind != ScaleKind::kNone || traits(element).bits < 16; }
};

/// Parses an element name ("fp8-e4m3"). Returns nullopt when unknown.
std::optional<Element> parse_element(std::string_view name);

/// Parses a format: "<element>[/<scaling>]" or a short name (mxfp8, mxfp4, nvfp4).
/// Throws std::invalid_argument whose message lists the valid elements / scalings.
Format parse_format(std::string_view text);

/// The list of element names, comma-separated (for error messages and --help).
std::string element_names();

std::string_view compute_name(ComputeType c);
std::optional<ComputeType> parse_compute(std::string_view name);

/// The tensor-core type a GEMM with these operand formats runs on, before device fallback: the
/// wider of the two operands' native types (W4A16 runs on BF16 tensor cores after dequantisation:
/// Hopper has no INT4 tensor cores).
ComputeType gemm_compute(const Format& weight, const Format& activation);

/// Short names: "mxfp8" -> fp8-e4m3/mx32, "mxfp4" -> fp4-e2m1/mx32, "nvfp4" -> fp4-e2m1/nv16.
std::optional<Format> short_format(std::string_view name);

}  // namespace rlsim::models
