// Packing: quantised tensors in the storage layouts that inference engines load, and back.
//
// Layouts (all little-endian, row-major over [rows, cols], cols = the reduction dimension):
//  - INT4, 8 per int32 (slime's pack_int4_to_int32, the compressed-tensors "pack-quantized" format
//    that slime's tools/convert_hf_to_int4_direct.py writes for Kimi-K2 / SGLang): per row, word w
//    holds elements 8w..8w+7, element 8w+j in bits 4j..4j+3, each as the offset-binary nibble
//    level + 8 (symmetric quantisation's offset); a row is padded to a multiple of 8 with nibble 0.
//  - 4-bit codes, 2 per byte (SGLang's Triton W4A16 path; ONNX int4 / float4e2m1 packing): element
//    2i in the low nibble, 2i+1 in the high nibble, codes as the element stores them (two's
//    complement INT4, sign-magnitude E2M1 / HiF4); a row with an odd count is padded with 0.
//  - 8-, 16- and 32-bit codes: one element per 1, 2 or 4 bytes.
//  - Scales in their storage type (format.h ScalingTraits): FP32 4 bytes, BF16 2, E8M0 / E4M3 1;
//    HiF4's 32-bit metadata word 4 bytes; one per block, block grid row-major. Unscaled formats
//    store none. NVFP4's per-tensor FP32 scale is kept as its bit pattern.
#pragma once

#include <cstdint>
#include <vector>

#include "models/precision/quantize.h"

namespace rlsim::models {

/// Packs rows x cols INT4 codes (two's-complement levels in the low 4 bits, as QuantizedTensor
/// holds them) 8 per int32 in slime's order (see the file comment). Returns rows x ceil(cols / 8)
/// words. Throws std::invalid_argument when codes.size() != rows x cols.
std::vector<std::int32_t> pack_int4_to_int32(const std::vector<std::uint32_t>& codes, std::int64_t rows, std::int64_t cols);

/// Inverse of pack_int4_to_int32: rows x cols two's-complement INT4 codes. Exact for every level
/// in [-8, 7]. Throws std::invalid_argument when words.size() != rows x ceil(cols / 8).
std::vector<std::uint32_t> unpack_int32_to_int4(const std::vector<std::int32_t>& words, std::int64_t rows, std::int64_t cols);

/// Packs rows x cols 4-bit codes two per byte (low nibble first). Returns rows x ceil(cols / 2)
/// bytes. Throws std::invalid_argument on a size mismatch.
std::vector<std::uint8_t> pack_nibbles(const std::vector<std::uint32_t>& codes, std::int64_t rows, std::int64_t cols);

/// Inverse of pack_nibbles. Throws std::invalid_argument on a size mismatch.
std::vector<std::uint32_t> unpack_nibbles(const std::vector<std::uint8_t>& bytes, std::int64_t rows, std::int64_t cols);

/// Where 4-bit INT4 codes go: 8 per int32 (slime / compressed-tensors) or 2 per byte.
enum class Int4Layout : std::uint8_t { kInt32x8, kBytes };

/// A quantised tensor as bytes in its storage layout.
struct PackedTensor {
  Format format;
  std::int64_t rows = 0, cols = 0;
  std::int64_t block_rows = 1, block_cols = 1;
  Int4Layout int4_layout = Int4Layout::kInt32x8;
  std::vector<std::uint8_t> data;                 // element codes
  std::vector<std::uint8_t> scales;               // the scale tensor in its storage type (empty when unscaled)
  std::uint32_t tensor_scale_bits = 0x3F800000u;  // FP32 bits of the per-tensor scale (NVFP4), else 1.0f
  std::int64_t saturated = 0;

  /// Bytes of data, scales and (NVFP4) the tensor scale: equals Format::bytes(rows, cols) when
  /// rows and cols are multiples of the packing unit (8 for INT4 in int32 words, 2 for nibbles).
  std::size_t storage_bytes() const;
};

/// Packs a quantised tensor. INT4 uses `int4_layout`; other 4-bit elements (E2M1, HiF4) always go
/// two per byte.
PackedTensor pack(const QuantizedTensor& q, Int4Layout int4_layout = Int4Layout::kInt32x8);

/// Unpacks: codes, scale codes, decoded scales and tensor scale equal those of the tensor that was
/// packed (dequantize() of the result is bit-identical). Throws std::invalid_argument when the byte
/// counts do not match the shape and format.
QuantizedTensor unpack(const PackedTensor& p);

}  // namespace rlsim::models
