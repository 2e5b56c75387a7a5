#include "models/precision/pack.h"

#include <bit>
#include <stdexcept>
#include <string>

namespace rlsim::models {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

void check_size(std::size_t got, std::int64_t want, const char* what) {
  if (static_cast<std::int64_t>(got) != want) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(got) + " entries where the shape needs " +
                                std::to_string(want));
  }
}

void put_le(std::vector<std::uint8_t>& out, std::uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

std::uint32_t get_le(const std::vector<std::uint8_t>& in, std::size_t at, int bytes) {
  std::uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint32_t>(in[at + static_cast<std::size_t>(i)]) << (8 * i);
  return v;
}

// Bytes per scale in storage; 0 when the format stores no scale.
int scale_bytes(const Format& f) {
  if (f.element == Element::kHif4) return 4;
  if (f.scaling.kind == ScaleKind::kNone) return 0;
  return traits(traits(f.scaling.kind).scale_element).bits / 8;
}

}  // namespace

std::vector<std::int32_t> pack_int4_to_int32(const std::vector<std::uint32_t>& codes, std::int64_t rows, std::int64_t cols) {
  check_size(codes.size(), rows * cols, "pack_int4_to_int32");
  const std::int64_t words = ceil_div(cols, 8);
  std::vector<std::int32_t> out(static_cast<std::size_t>(rows * words), 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint32_t nibble = (codes[static_cast<std::size_t>(r * cols + c)] + 8u) & 0xFu;  // level + 8
      auto& w = out[static_cast<std::size_t>(r * words + c / 8)];
      w = std::bit_cast<std::int32_t>(std::bit_cast<std::uint32_t>(w) | (nibble << (4 * (c % 8))));
    }
  }
  return out;
}

std::vector<std::uint32_t> unpack_int32_to_int4(const std::vector<std::int32_t>& words, std::int64_t rows, std::int64_t cols) {
  const std::int64_t per_row = ceil_div(cols, 8);
  check_size(words.size(), rows * per_row, "unpack_int32_to_int4");
  std::vector<std::uint32_t> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const auto w = std::bit_cast<std::uint32_t>(words[static_cast<std::size_t>(r * per_row + c / 8)]);
      out[static_cast<std::size_t>(r * cols + c)] = (((w >> (4 * (c % 8))) & 0xFu) - 8u) & 0xFu;  // nibble - 8
    }
  }
  return out;
}

std::vector<std::uint8_t> pack_nibbles(const std::vector<std::uint32_t>& codes, std::int64_t rows, std::int64_t cols) {
  check_size(codes.size(), rows * cols, "pack_nibbles");
  const std::int64_t per_row = ceil_div(cols, 2);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(rows * per_row), 0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint32_t nibble = codes[static_cast<std::size_t>(r * cols + c)] & 0xFu;
      out[static_cast<std::size_t>(r * per_row + c / 2)] |= static_cast<std::uint8_t>(nibble << (4 * (c % 2)));
    }
  }
  return out;
}

std::vector<std::uint32_t> unpack_nibbles(const std::vector<std::uint8_t>& bytes, std::int64_t rows, std::int64_t cols) {
  const std::int64_t per_row = ceil_div(cols, 2);
  check_size(bytes.size(), rows * per_row, "unpack_nibbles");
  std::vector<std::uint32_t> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      out[static_cast<std::size_t>(r * cols + c)] =
          (bytes[static_cast<std::size_t>(r * per_row + c / 2)] >> (4 * (c % 2))) & 0xFu;
    }
  }
  return out;
}

std::size_t PackedTensor::storage_bytes() const {
  return data.size() + scales.size() + (format.scaling.kind == ScaleKind::kNv16 ? 4 : 0);
}

PackedTensor pack(const QuantizedTensor& q, Int4Layout int4_layout) {
  PackedTensor p;
  p.format = q.format;
  p.rows = q.rows;
  p.cols = q.cols;
  p.block_rows = q.block_rows;
  p.block_cols = q.block_cols;
  p.int4_layout = int4_layout;
  p.saturated = q.saturated;
  p.tensor_scale_bits = std::bit_cast<std::uint32_t>(static_cast<float>(q.tensor_scale));
  const int bits = traits(q.format.element).bits;
  if (bits == 4) {
    if (q.format.element == Element::kInt4 && int4_layout == Int4Layout::kInt32x8) {
      for (std::int32_t w : pack_int4_to_int32(q.codes, q.rows, q.cols)) put_le(p.data, std::bit_cast<std::uint32_t>(w), 4);
    } else {
      p.data = pack_nibbles(q.codes, q.rows, q.cols);
    }
  } else {
    const int b = bits / 8;
    p.data.resize(q.codes.size() * static_cast<std::size_t>(b));
    std::uint8_t* out = p.data.data();
    for (std::uint32_t c : q.codes) {
      for (int i = 0; i < b; ++i) *out++ = static_cast<std::uint8_t>(c >> (8 * i));
    }
  }
  if (const int sb = scale_bytes(q.format); sb > 0) {
    p.scales.reserve(q.scale_codes.size() * static_cast<std::size_t>(sb));
    for (std::uint32_t c : q.scale_codes) put_le(p.scales, c, sb);
  }
  return p;
}

QuantizedTensor unpack(const PackedTensor& p) {
  QuantizedTensor q;
  q.format = p.format;
  q.rows = p.rows;
  q.cols = p.cols;
  q.block_rows = p.block_rows;
  q.block_cols = p.block_cols;
  q.saturated = p.saturated;
  if (p.rows <= 0 || p.cols <= 0 || p.block_rows <= 0 || p.block_cols <= 0)
    throw std::invalid_argument("unpack: shape must be positive");
  const int bits = traits(p.format.element).bits;
  if (bits == 4) {
    if (p.format.element == Element::kInt4 && p.int4_layout == Int4Layout::kInt32x8) {
      check_size(p.data.size(), p.rows * ceil_div(p.cols, 8) * 4, "unpack (int32 words)");
      std::vector<std::int32_t> words(p.data.size() / 4);
      for (std::size_t i = 0; i < words.size(); ++i) words[i] = std::bit_cast<std::int32_t>(get_le(p.data, 4 * i, 4));
      q.codes = unpack_int32_to_int4(words, p.rows, p.cols);
    } else {
      q.codes = unpack_nibbles(p.data, p.rows, p.cols);
    }
  } else {
    const int b = bits / 8;
    check_size(p.data.size(), p.rows * p.cols * b, "unpack (codes)");
    q.codes.resize(static_cast<std::size_t>(p.rows * p.cols));
    for (std::size_t i = 0; i < q.codes.size(); ++i) q.codes[i] = get_le(p.data, i * static_cast<std::size_t>(b), b);
  }
  const std::int64_t blocks = ceil_div(p.rows, p.block_rows) * ceil_div(p.cols, p.block_cols);
  const int sb = scale_bytes(p.format);
  q.scale_codes.assign(static_cast<std::size_t>(blocks), 0);
  if (sb > 0) {
    check_size(p.scales.size(), blocks * sb, "unpack (scales)");
    for (std::size_t i = 0; i < q.scale_codes.size(); ++i)
      q.scale_codes[i] = get_le(p.scales, i * static_cast<std::size_t>(sb), sb);
  } else if (!p.scales.empty()) {
    throw std::invalid_argument("unpack: scales given for the unscaled format " + p.format.str());
  }
  q.scales.resize(q.scale_codes.size());
  for (std::size_t i = 0; i < q.scales.size(); ++i) q.scales[i] = decode_scale(p.format, q.scale_codes[i]);
  q.tensor_scale = static_cast<double>(std::bit_cast<float>(p.tensor_scale_bits));
  return q;
}

}  // namespace rlsim::models
