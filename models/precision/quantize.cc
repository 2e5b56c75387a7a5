#include "models/precision/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace rlsim::models {
namespace {

std::uint32_t mask(int bits) { return bits >= 32 ? 0xFFFFFFFFu : (1u << bits) - 1u; }

void flag(bool* p) {
  if (p) *p = true;
}

// Largest finite value of a layout (E4M3: top binade minus the NaN pattern; IEEE: below the
// all-ones exponent; no specials: the all-ones pattern).
double layout_max(const FloatLayout& l) {
  const int top = (1 << l.exp_bits) - 1;
  const int man_all = (1 << l.man_bits) - 1;
  if (l.ieee_specials) return std::ldexp(1.0 + static_cast<double>(man_all) / (1 << l.man_bits), top - 1 - l.bias);
  if (l.e4m3_nan) return std::ldexp(1.0 + static_cast<double>(man_all - 1) / (1 << l.man_bits), top - l.bias);
  return std::ldexp(1.0 + static_cast<double>(man_all) / (1 << l.man_bits), top - l.bias);
}

std::uint32_t encode_float(const FloatLayout& l, int bits, double x, bool* saturated) {
  const std::uint32_t sign = std::signbit(x) ? 1u << (bits - 1) : 0u;
  const std::uint32_t exp_all = (1u << l.exp_bits) - 1u;
  const std::uint32_t man_all = (1u << l.man_bits) - 1u;
  if (std::isnan(x)) {
    if (!l.has_nan) {
      flag(saturated);
      return 0;
    }
    return (exp_all << l.man_bits) | man_all;  // canonical: positive, all-ones mantissa
  }
  const double maxf = layout_max(l);
  const double a = std::fabs(x);
  if (a == 0) return sign;
  double r;
  if (std::isinf(a)) {
    r = std::numeric_limits<double>::infinity();
  } else {
    int e = 0;
    std::frexp(a, &e);                          // a = f 2^e, f in [0.5, 1)
    const int exponent = std::max(e - 1, 1 - l.bias);  // subnormals share the smallest normal exponent
    const double quantum = std::ldexp(1.0, exponent - l.man_bits);
    r = std::nearbyint(a / quantum) * quantum;  // exact scaling; the default mode rounds ties to even
  }
  if (r > maxf) {
    flag(saturated);
    r = maxf;
  }
  if (r == 0) return sign;
  int e = 0;
  std::frexp(r, &e);
  const int exponent = e - 1;
  if (exponent < 1 - l.bias) {  // subnormal: exponent field 0
    const auto man = static_cast<std::uint32_t>(std::ldexp(r, l.man_bits - (1 - l.bias)));
    return sign | man;
  }
  const auto exp_field = static_cast<std::uint32_t>(exponent + l.bias);
  const auto man = static_cast<std::uint32_t>(std::ldexp(r, l.man_bits - exponent)) - (1u << l.man_bits);
  return sign | (exp_field << l.man_bits) | man;
}

double decode_float(const FloatLayout& l, int bits, std::uint32_t code) {
  code &= mask(bits);
  const bool neg = (code >> (bits - 1)) & 1u;
  const std::uint32_t exp_all = (1u << l.exp_bits) - 1u;
  const std::uint32_t man_all = (1u << l.man_bits) - 1u;
  const std::uint32_t ef = (code >> l.man_bits) & exp_all;
  const std::uint32_t mf = code & man_all;
  double v;
  if (l.ieee_specials && ef == exp_all) {
    v = mf == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (l.e4m3_nan && ef == exp_all && mf == man_all) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (ef == 0) {
    v = std::ldexp(static_cast<double>(mf), 1 - l.bias - l.man_bits);
  } else {
    v = std::ldexp(static_cast<double>(mf + (1u << l.man_bits)), static_cast<int>(ef) - l.bias - l.man_bits);
  }
  return neg ? -v : v;
}

int int_bits(Element e) { return traits(e).bits; }

}  // namespace

FloatLayout float_layout(Element e) {
  switch (e) {
    case Element::kBf16: return {8, 7, 127, true, false, true};
    case Element::kFp16: return {5, 10, 15, true, false, true};
    case Element::kFp8E4M3: return {4, 3, 7, false, true, true};
    case Element::kFp8E5M2: return {5, 2, 15, true, false, true};
    case Element::kFp4E2M1: return {2, 1, 1, false, false, false};
    default: throw std::invalid_argument("float_layout: " + std::string(traits(e).name) + " is not a binary float element");
  }
}

double max_finite(Element e) { return traits(e).max_finite; }

std::uint32_t encode(Element e, double x, bool* saturated, const CodecOptions& opt) {
  if (saturated) *saturated = false;
  switch (e) {
    case Element::kFp32: {
      const auto f = static_cast<float>(x);  // IEEE conversion: nearest even, overflow to Inf
      return std::bit_cast<std::uint32_t>(f);
    }
    case Element::kBf16:
    case Element::kFp16:
    case Element::kFp8E4M3:
    case Element::kFp8E5M2:
    case Element::kFp4E2M1:
      return encode_float(float_layout(e), traits(e).bits, x, saturated);
    case Element::kInt8:
    case Element::kInt4: {
      const int b = int_bits(e);
      const double hi = static_cast<double>((1 << (b - 1)) - 1);
      const double lo = opt.full_int_range ? -hi - 1 : -hi;
      double level;
      if (std::isnan(x)) {
        flag(saturated);
        level = 0;
      } else {
        level = std::nearbyint(x);
        if (level > hi || level < lo) {
          flag(saturated);
          level = level > hi ? hi : lo;
        }
      }
      return static_cast<std::uint32_t>(static_cast<std::int32_t>(level)) & mask(b);
    }
    case Element::kE8M0: {
      if (std::isnan(x) || std::isinf(x)) return 0xFFu;
      if (!(x > 0)) throw std::invalid_argument("e8m0 encodes positive scales only");
      int ex = 0;
      std::frexp(x, &ex);
      int k = ex - 1;  // floor(log2 x)
      if (k > 127 || k < -127) {
        flag(saturated);
        k = k > 127 ? 127 : -127;
      }
      return static_cast<std::uint32_t>(k + 127);
    }
    case Element::kHif8:
    case Element::kHif4:
      break;
  }
  throw std::invalid_argument("encode: no element codec for " + std::string(traits(e).name) + " yet");
}

double decode(Element e, std::uint32_t code) {
  switch (e) {
    case Element::kFp32: return static_cast<double>(std::bit_cast<float>(code));
    case Element::kBf16:
    case Element::kFp16:
    case Element::kFp8E4M3:
    case Element::kFp8E5M2:
    case Element::kFp4E2M1:
      return decode_float(float_layout(e), traits(e).bits, code);
    case Element::kInt8:
    case Element::kInt4: {
      const int b = int_bits(e);
      code &= mask(b);
      const auto v = static_cast<std::int32_t>(code);
      return static_cast<double>((code >> (b - 1)) & 1u ? v - (1 << b) : v);
    }
    case Element::kE8M0:
      code &= 0xFFu;
      if (code == 0xFFu) return std::numeric_limits<double>::quiet_NaN();
      return std::ldexp(1.0, static_cast<int>(code) - 127);
    case Element::kHif8:
    case Element::kHif4:
      break;
  }
  throw std::invalid_argument("decode: no element codec for " + std::string(traits(e).name) + " yet");
}

double round_to(Element e, double x, bool* saturated, const CodecOptions& opt) {
  return decode(e, encode(e, x, saturated, opt));
}

namespace {

struct BlockShape {
  std::int64_t rows = 1, cols = 1;
};

BlockShape block_shape(const Scaling& sc, std::int64_t rows, std::int64_t cols) {
  switch (sc.kind) {
    case ScaleKind::kNone:
    case ScaleKind::kTensor: return {rows, cols};
    case ScaleKind::kChannel:
    case ScaleKind::kToken: return {1, cols};
    case ScaleKind::kBlockMxN: return {sc.rows, sc.cols};
    case ScaleKind::kGroup1xN:
    case ScaleKind::kGroupN:
    case ScaleKind::kMx32:
    case ScaleKind::kNv16: return {1, sc.cols};
  }
  return {rows, cols};
}

// Exponent of the element's largest normal (MX v1.0 sec. 6.3 emax_elem).
int emax(Element e) {
  int ex = 0;
  std::frexp(max_finite(e), &ex);
  return ex - 1;
}

}  // namespace

QuantizedTensor quantize(const Format& f, std::int64_t rows, std::int64_t cols, const std::vector<double>& x) {
  if (rows <= 0 || cols <= 0) throw std::invalid_argument("quantize: shape must be positive");
  if (static_cast<std::int64_t>(x.size()) != rows * cols) {
    throw std::invalid_argument("quantize: " + std::to_string(x.size()) + " values for a " + std::to_string(rows) + " x " +
                                std::to_string(cols) + " tensor");
  }
  QuantizedTensor q;
  q.format = f;
  q.rows = rows;
  q.cols = cols;
  const BlockShape b = block_shape(f.scaling, rows, cols);
  q.block_rows = b.rows;
  q.block_cols = b.cols;
  const std::int64_t grid_r = (rows + b.rows - 1) / b.rows, grid_c = (cols + b.cols - 1) / b.cols;
  q.codes.assign(x.size(), 0);
  q.scales.assign(static_cast<std::size_t>(grid_r * grid_c), 1.0);
  q.scale_codes.assign(q.scales.size(), 0);
  const Element el = f.element;
  const Element scale_el = traits(f.scaling.kind).scale_element;
  const double elem_max = max_finite(el);
  if (f.scaling.kind == ScaleKind::kNv16) {
    double amax = 0;
    for (double v : x) {
      if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
    }
    q.tensor_scale = amax > 0 ? static_cast<double>(static_cast<float>(amax / (448.0 * 6.0))) : 1.0;
  }
  for (std::int64_t br = 0; br < grid_r; ++br) {
    for (std::int64_t bc = 0; bc < grid_c; ++bc) {
      const std::int64_t r0 = br * b.rows, r1 = std::min(rows, r0 + b.rows);
      const std::int64_t c0 = bc * b.cols, c1 = std::min(cols, c0 + b.cols);
      double amax = 0;
      bool nan = false;
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = c0; c < c1; ++c) {
          const double v = x[static_cast<std::size_t>(r * cols + c)];
          if (std::isnan(v)) nan = true;
          else if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
        }
      }
      const auto idx = static_cast<std::size_t>(br * grid_c + bc);
      double scale = 1.0;
      std::uint32_t scale_code = 0;
      switch (f.scaling.kind) {
        case ScaleKind::kNone: break;
        case ScaleKind::kMx32: {
          if (nan) {
            scale = std::numeric_limits<double>::quiet_NaN();
            scale_code = 0xFFu;
            break;
          }
          int shared = -127;
          if (amax > 0) {
            int ex = 0;
            std::frexp(amax, &ex);
            shared = std::clamp(ex - 1 - emax(el), -127, 127);
          }
          scale_code = static_cast<std::uint32_t>(shared + 127);
          scale = std::ldexp(1.0, shared);
          break;
        }
        case ScaleKind::kNv16: {
          scale_code = encode(Element::kFp8E4M3, amax / 6.0 / q.tensor_scale);
          scale = decode(Element::kFp8E4M3, scale_code);
          break;
        }
        default: {
          scale = amax > 0 ? amax / elem_max : 1.0;
          scale_code = encode(scale_el, scale);
          scale = decode(scale_el, scale_code);
          if (!(scale > 0)) {  // a scale below the storage type's range: store 1 (the block's values round to 0)
            scale_code = encode(scale_el, 1.0);
            scale = 1.0;
          }
          break;
        }
      }
      q.scales[idx] = scale;
      q.scale_codes[idx] = scale_code;
      const double denom = scale * q.tensor_scale;
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = c0; c < c1; ++c) {
          const auto i = static_cast<std::size_t>(r * cols + c);
          bool sat = false;
          const double v = denom > 0 && std::isfinite(denom) ? x[i] / denom : (std::isnan(denom) ? x[i] : 0.0);
          q.codes[i] = encode(el, v, &sat);
          if (sat) q.saturated++;
        }
      }
    }
  }
  return q;
}

std::vector<double> dequantize(const QuantizedTensor& q) {
  std::vector<double> out(q.codes.size());
  const std::int64_t grid_c = (q.cols + q.block_cols - 1) / q.block_cols;
  for (std::int64_t r = 0; r < q.rows; ++r) {
    for (std::int64_t c = 0; c < q.cols; ++c) {
      const auto i = static_cast<std::size_t>(r * q.cols + c);
      const double scale = q.scales[static_cast<std::size_t>((r / q.block_rows) * grid_c + c / q.block_cols)];
      out[i] = decode(q.format.element, q.codes[i]) * scale * q.tensor_scale;
    }
  }
  return out;
}

std::vector<double> fake_quantize(const Format& f, std::int64_t rows, std::int64_t cols, const std::vector<double>& x) {
  return dequantize(quantize(f, rows, cols, x));
}

double sqnr_db(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) throw std::invalid_argument("sqnr_db: sizes differ");
  double sig = 0, noise = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sig += x[i] * x[i];
    noise += (x[i] - y[i]) * (x[i] - y[i]);
  }
  if (noise == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sig / noise);
}

}  // namespace rlsim::models
