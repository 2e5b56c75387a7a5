#include "models/precision/quantize.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "models/precision/simd.h"

namespace rlsim::models {
namespace {

constexpr std::int64_t kHif4Block = traits(Element::kHif4).intrinsic_block;  // one HiF4 unit

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
    std::frexp(a, &e);                                 // a = f 2^e, f in [0.5, 1)
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

// --- HiFloat8 (arXiv 2409.16626 sec. 2) -------------------------------------------------------
// Byte S | Dot | Em | M. Dot is a prefix code giving the stored exponent width D:
//   '11' D=4 (Em 4 bits, M 1 bit), '10' D=3 (Em 3, M 2), '01' D=2 (Em 2, M 3), '001' D=1 (Em 1,
//   M 3), '0001' D=0 (no Em, M 3), '0000' denormal (M 3 bits hold the exponent: 2^(M - 23)).
// Em is sign-magnitude with an implicit leading 1 on the magnitude (sec. 2.2): D=1 gives +-1,
// D=2 +-{2,3}, D=3 +-{4..7}, D=4 +-{8..15}. Value 2^E x 1.M. Specials (sec. 2.3, table 4): 0x00
// zero (the only zero), 0x80 NaN, 0x6F / 0xEF +-Inf (the D=4, E=+15, M=1 patterns), so the
// largest finite value is 2^15 = 32768 and the smallest 2^-22 (38 binades).
constexpr double kHif8Max = 32768.0;
constexpr int kHif8MinExp = -22;  // smallest denormal 2^-22
constexpr int kHif8MinNormalExp = -15;

// Mantissa bits of the binade 2^e (sec. 2.1: 3 bits for |E| <= 3, 2 for 4..7, 1 for 8..15; the
// denormal binades below 2^-15 have none).
int hif8_mantissa_bits(int e) {
  if (e < kHif8MinNormalExp) return 0;
  const int a = e < 0 ? -e : e;
  return a <= 3 ? 3 : (a <= 7 ? 2 : 1);
}

std::uint32_t hif8_code(std::uint32_t sign, int e, std::uint32_t man);

std::uint32_t encode_hif8(double x, bool* saturated) {
  if (std::isnan(x)) return 0x80u;
  const std::uint32_t sign = std::signbit(x) ? 0x80u : 0u;
  const double a = std::fabs(x);
  if (a == 0) return 0;  // one zero: -0 encodes as 0x00
  double r;
  if (std::isinf(a)) {
    r = std::numeric_limits<double>::infinity();
  } else {
    int e2 = 0;
    std::frexp(a, &e2);
    const int e = std::max(e2 - 1, kHif8MinExp);  // below 2^-22 round against the smallest quantum
    const double quantum = std::ldexp(1.0, e - hif8_mantissa_bits(e));
    r = std::nearbyint(a / quantum) * quantum;  // ties to even on the significand (see encode())
  }
  if (r > kHif8Max) {
    flag(saturated);
    r = kHif8Max;
  }
  if (r == 0) return 0;
  int e2 = 0;
  std::frexp(r, &e2);
  const int e = e2 - 1;
  const int m = hif8_mantissa_bits(e);
  const auto man = e < kHif8MinNormalExp ? 0u : static_cast<std::uint32_t>(std::ldexp(r, m - e)) - (1u << m);
  return hif8_code(sign, e, man);
}

// The HiF8 byte of sign | 2^e x 1.man (e in [-22, 15], man within the binade's mantissa width).
std::uint32_t hif8_code(std::uint32_t sign, int e, std::uint32_t man) {
  if (e < kHif8MinNormalExp) return sign | static_cast<std::uint32_t>(e + 23);  // denormal, Dot '0000'
  const std::uint32_t es = e < 0 ? 1u : 0u;
  const auto mag = static_cast<std::uint32_t>(e < 0 ? -e : e);
  if (mag >= 8) return sign | (0x3u << 5) | (es << 4) | ((mag - 8) << 1) | man;
  if (mag >= 4) return sign | (0x2u << 5) | (es << 4) | ((mag - 4) << 2) | man;
  if (mag >= 2) return sign | (0x1u << 5) | (es << 4) | ((mag - 2) << 3) | man;
  if (mag == 1) return sign | (0x1u << 4) | (es << 3) | man;
  return sign | (0x1u << 3) | man;
}

double decode_hif8(std::uint32_t code) {
  code &= 0xFFu;
  if (code == 0x80u) return std::numeric_limits<double>::quiet_NaN();
  const bool neg = (code & 0x80u) != 0;
  const std::uint32_t v = code & 0x7Fu;
  double r;
  if (v == 0) {
    r = 0;
  } else if (v == 0x6Fu) {
    r = std::numeric_limits<double>::infinity();
  } else {
    int es = 0, mag = 0, mbits = 0;
    std::uint32_t man = 0;
    if ((v >> 5) == 3) {
      es = (v >> 4) & 1u, mag = 8 + static_cast<int>((v >> 1) & 7u), mbits = 1, man = v & 1u;
    } else if ((v >> 5) == 2) {
      es = (v >> 4) & 1u, mag = 4 + static_cast<int>((v >> 2) & 3u), mbits = 2, man = v & 3u;
    } else if ((v >> 5) == 1) {
      es = (v >> 4) & 1u, mag = 2 + static_cast<int>((v >> 3) & 1u), mbits = 3, man = v & 7u;
    } else if ((v >> 4) == 1) {
      es = (v >> 3) & 1u, mag = 1, mbits = 3, man = v & 7u;
    } else if ((v >> 3) == 1) {
      mbits = 3, man = v & 7u;
    } else {
      return (neg ? -1.0 : 1.0) * std::ldexp(1.0, static_cast<int>(v & 7u) - 23);
    }
    r = std::ldexp(1.0 + static_cast<double>(man) / (1 << mbits), es ? -mag : mag);
  }
  return neg ? -r : r;
}

}  // namespace

FloatLayout float_layout(Element e) {
  const FloatLayout& l = traits(e).layout;
  if (l.exp_bits == 0)
    throw std::invalid_argument("float_layout: " + std::string(traits(e).name) + " is not a binary float element");
  return l;
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
    case Element::kHif4:
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
      return encode_hif8(x, saturated);
  }
  throw std::invalid_argument("encode: unknown element");
}

double decode(Element e, std::uint32_t code) {
  switch (e) {
    case Element::kFp32:
      return static_cast<double>(std::bit_cast<float>(code));
    case Element::kBf16:
    case Element::kFp16:
    case Element::kFp8E4M3:
    case Element::kFp8E5M2:
    case Element::kFp4E2M1:
    case Element::kHif4:
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
      return decode_hif8(code);
  }
  throw std::invalid_argument("decode: unknown element");
}

double round_to(Element e, double x, bool* saturated, const CodecOptions& opt) { return decode(e, encode(e, x, saturated, opt)); }

namespace {

struct BlockShape {
  std::int64_t rows = 1, cols = 1;
};

BlockShape block_shape(const Format& f, std::int64_t rows, std::int64_t cols) {
  if (f.element == Element::kHif4) return {1, kHif4Block};
  const Scaling& sc = f.scaling;
  switch (sc.kind) {
    case ScaleKind::kNone:
    case ScaleKind::kTensor:
      return {rows, cols};
    case ScaleKind::kChannel:
    case ScaleKind::kToken:
      return {1, cols};
    case ScaleKind::kBlockMxN:
      return {sc.rows, sc.cols};
    case ScaleKind::kGroup1xN:
    case ScaleKind::kGroupN:
    case ScaleKind::kMx32:
    case ScaleKind::kNv16:
      return {1, sc.cols};
  }
  return {rows, cols};
}

// Largest |x| over the finite values of x[0..n) (0 when there are none); sets *nan when one is NaN.
// Infinities are left out: they saturate instead of setting the scale.
double finite_amax(const double* x, std::int64_t n, bool* nan = nullptr) {
  double amax = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) {
      if (nan) *nan = true;
    } else if (std::isfinite(x[i])) {
      amax = std::max(amax, std::fabs(x[i]));
    }
  }
  return amax;
}

// Exponent of the element's largest normal (MX v1.0 sec. 6.3 emax_elem), from a table built once
// (every MX block's scale asks for it).
int emax(Element e) {
  static const auto table = [] {
    std::array<int, kElementTraits.size()> t{};
    for (std::size_t i = 0; i < t.size(); ++i) {
      int ex = 0;
      std::frexp(kElementTraits[i].max_finite, &ex);
      t[i] = ex - 1;
    }
    return t;
  }();
  return table[static_cast<std::size_t>(e)];
}

// HiF8 is tapered: it has 3 mantissa bits only for |E| <= 3. Scaling the amax to max_finite
// (2^15), as for the uniform formats, would leave the whole tensor at 1 mantissa bit; rlsim's rule
// scales by a power of two (exact in the FP32 scale) that puts the amax in the binade [8, 16), the
// top of the 3-bit region, so values down to amax / 2^6 keep 3 mantissa bits.
constexpr int kHif8ScaleTargetExp = 3;

// E6M2 level-1 scale of HiF4 (arXiv 2602.11287, format definition): unsigned, bias 48, 2 mantissa bits, no
// zero and no subnormals; 0xFF is NaN, so the range is [2^-48, 1.5 x 2^15 = 49152]. Round to
// nearest even, saturating at both ends (a block of zeros gets the smallest scale).
constexpr int kE6M2Bias = 48;
std::uint32_t encode_e6m2(double x) {
  if (std::isnan(x)) return 0xFFu;
  const double lo = std::ldexp(1.0, -kE6M2Bias), hi = 49152.0;
  if (!(x > lo)) return 0;
  if (x >= hi) return 0xFEu;
  int e2 = 0;
  std::frexp(x, &e2);
  const int e = e2 - 1;
  const double quantum = std::ldexp(1.0, e - 2);
  const double r = std::min(std::nearbyint(x / quantum) * quantum, hi);
  std::frexp(r, &e2);
  const int er = e2 - 1;
  const auto man = static_cast<std::uint32_t>(std::ldexp(r, 2 - er)) - 4u;
  return (static_cast<std::uint32_t>(er + kE6M2Bias) << 2) | man;
}
double decode_e6m2(std::uint32_t code) {
  code &= 0xFFu;
  if (code == 0xFFu) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0 + static_cast<double>(code & 3u) / 4.0, static_cast<int>(code >> 2) - kE6M2Bias);
}

// The scale of one block: what quantize() stores and fake_quantize() divides by.
struct BlockScale {
  double scale = 1.0;      // decoded level-1 scale (NaN for a NaN block of MX / HiF4)
  std::uint32_t code = 0;  // the scale in its storage element; HiF4: the 32-bit metadata word
};

// HiF4 metadata word of one 64-block (rlsim's bit order): bits 31..24 the E6M2 level-1 scale,
// bits 23..16 one E1 micro-exponent per 8 elements (bit 16 + j for elements 8j..8j+7), bits
// 15..0 one E1 micro-exponent per 4 elements (bit k for elements 4k..4k+3).
// Element multiplier: scale x 2^(e1_8 + e1_4), so an element reaches 1.75 x 4 = 7 scale units.
double hif4_multiplier(std::uint32_t meta, std::int64_t i /* index within the block */) {
  const double s1 = decode_e6m2(meta >> 24);
  const int e8 = static_cast<int>((meta >> (16 + i / 8)) & 1u);
  const int e4 = static_cast<int>((meta >> (i / 4)) & 1u);
  return std::ldexp(s1, e8 + e4);
}

// Level-by-level rule of arXiv 2602.11287, its BF16-to-HiF4 conversion: level 1
// s = E6M2(amax64 / 7); level 2, per 8 elements, e1_8 = 1 when amax8 / s >= 4; level 3, per 4
// elements, e1_4 = 1 when amax4 / (s 2^e1_8) >= 2. (A public reference implementation rounds amax / 7 to
// BF16 before E6M2; rlsim rounds once, which differs only on double-rounding ties.) A NaN in the block gives the
// NaN scale 0xFF; infinities are left out of the amax and saturate.
std::uint32_t hif4_metadata(const double* x, std::int64_t n) {
  bool nan = false;
  const double amax = finite_amax(x, n, &nan);
  if (nan) return 0xFFu << 24;
  const std::uint32_t s_code = encode_e6m2(amax / 7.0);
  const double s = decode_e6m2(s_code);
  std::uint32_t meta = s_code << 24;
  auto group_amax = [&](std::int64_t b, std::int64_t len) { return finite_amax(x + b, std::min(n, b + len) - b); };
  for (std::int64_t j = 0; j * 8 < n; ++j) {
    const int e8 = group_amax(j * 8, 8) / s >= 4.0 ? 1 : 0;
    meta |= static_cast<std::uint32_t>(e8) << (16 + j);
    for (std::int64_t k = 2 * j; k < 2 * j + 2 && k * 4 < n; ++k) {
      if (group_amax(k * 4, 4) / std::ldexp(s, e8) >= 2.0) meta |= 1u << k;
    }
  }
  return meta;
}

// The code encode() gives, computed from the bits of the double with integer round-to-nearest-even
// (no libm): the fast path of the binary float elements. Equal to encode_float() for every double
// (tested on random and edge values for each element).
struct FastFloatEncoder {
  int m = 0, emin = 0, bits = 0;
  std::int64_t max_code = 0;
  std::uint32_t nan_code = 0;
  bool has_nan = true;

  explicit FastFloatEncoder(Element e) {
    const FloatLayout l = float_layout(e);
    m = l.man_bits;
    emin = 1 - l.bias;
    bits = traits(e).bits;
    max_code = encode(e, max_finite(e));
    has_nan = l.has_nan;
    nan_code = has_nan ? encode(e, std::numeric_limits<double>::quiet_NaN()) : 0;
  }

  std::uint32_t operator()(double v, std::int64_t& saturated) const {
    const auto b = std::bit_cast<std::uint64_t>(v);
    const auto sign = static_cast<std::uint32_t>(b >> 63) << (bits - 1);
    const std::uint64_t a = b & 0x7FFFFFFFFFFFFFFFull;
    if (a > 0x7FF0000000000000ull) {  // NaN
      if (has_nan) return nan_code;
      ++saturated;
      return 0;
    }
    const int e = static_cast<int>(a >> 52) - 1023;
    // Bits of the 53-bit significand below the element's last mantissa bit (more for its
    // subnormals). From 54 on the value is under half the smallest subnormal (or a double
    // subnormal) and rounds to 0, which the capped shift of 63 also gives.
    const int shift = std::min(52 - m + std::max(emin - e, 0), 63);
    const std::uint64_t mant = (a & ((1ull << 52) - 1)) | (1ull << 52);
    // Branch-free round to nearest, ties to even: add half - 1, plus 1 when the kept LSB is odd.
    const std::uint64_t q = (mant + ((1ull << (shift - 1)) - 1) + ((mant >> shift) & 1u)) >> shift;
    // Normal: q carries the implicit bit, so (e - emin) << m + q = (e + bias) << m | fraction, and
    // a carry out of the mantissa bumps the exponent field by itself. Subnormal: q is the field.
    std::int64_t code = (static_cast<std::int64_t>(std::max(e, emin) - emin) << m) + static_cast<std::int64_t>(q);
    if (code > max_code) {
      ++saturated;
      code = max_code;
    }
    return sign | static_cast<std::uint32_t>(code);
  }

  // out[i] = (*this)(double(x[i]) / d) for i < n (d finite and non-zero), with the scalar path's
  // saturation count: the same integer steps on eight doubles at a time where AVX-512 is compiled in
  // (IEEE division is correctly rounded in either unit, so the codes are the same bits).
  void encode_run(const float* x, std::int64_t n, double d, std::uint32_t* out, std::int64_t& saturated) const {
    std::int64_t i = 0;
#ifdef RLSIM_AVX512
    const __m512d vd = _mm512_set1_pd(d);
    const __m512i abs_mask = _mm512_set1_epi64(0x7FFFFFFFFFFFFFFFll), inf = _mm512_set1_epi64(0x7FF0000000000000ll),
                  frac = _mm512_set1_epi64((1ll << 52) - 1), implicit = _mm512_set1_epi64(1ll << 52), one = _mm512_set1_epi64(1),
                  bias = _mm512_set1_epi64(1023), vemin = _mm512_set1_epi64(emin), base_shift = _mm512_set1_epi64(52 - m),
                  cap = _mm512_set1_epi64(63), zero = _mm512_setzero_si512(), vmax = _mm512_set1_epi64(max_code),
                  vnan = _mm512_set1_epi64(has_nan ? nan_code : 0);
    for (; i + 8 <= n; i += 8) {
      const __m512i b = _mm512_castpd_si512(_mm512_div_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x + i)), vd));
      const __m512i sign = _mm512_slli_epi64(_mm512_srli_epi64(b, 63), bits - 1);
      const __m512i a = _mm512_and_si512(b, abs_mask);
      const __mmask8 is_nan = _mm512_cmpgt_epi64_mask(a, inf);
      const __m512i e = _mm512_sub_epi64(_mm512_srli_epi64(a, 52), bias);
      const __m512i shift =
          _mm512_min_epi64(_mm512_add_epi64(base_shift, _mm512_max_epi64(_mm512_sub_epi64(vemin, e), zero)), cap);
      const __m512i mant = _mm512_or_si512(_mm512_and_si512(a, frac), implicit);
      const __m512i half_less = _mm512_sub_epi64(_mm512_sllv_epi64(one, _mm512_sub_epi64(shift, one)), one);
      const __m512i odd = _mm512_and_si512(_mm512_srlv_epi64(mant, shift), one);
      const __m512i q = _mm512_srlv_epi64(_mm512_add_epi64(_mm512_add_epi64(mant, half_less), odd), shift);
      __m512i code =
          _mm512_add_epi64(_mm512_sll_epi64(_mm512_sub_epi64(_mm512_max_epi64(e, vemin), vemin), _mm_cvtsi32_si128(m)), q);
      const __mmask8 over = _mm512_cmpgt_epi64_mask(code, vmax) & static_cast<__mmask8>(~is_nan);
      code = _mm512_or_si512(sign, _mm512_min_epi64(code, vmax));
      code = _mm512_mask_mov_epi64(code, is_nan, vnan);
      saturated += std::popcount(static_cast<unsigned>(over)) + (has_nan ? 0 : std::popcount(static_cast<unsigned>(is_nan)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi64_epi32(code));
    }
#elif defined(RLSIM_AVX2)
    // The same steps on four doubles: AVX2 has no 64-bit min / max, so a compare and a blend
    // stand in for each (the values compared are far inside the signed range).
    const __m256d vd = _mm256_set1_pd(d);
    const __m256i abs_mask = _mm256_set1_epi64x(0x7FFFFFFFFFFFFFFFll), inf = _mm256_set1_epi64x(0x7FF0000000000000ll),
                  frac = _mm256_set1_epi64x((1ll << 52) - 1), implicit = _mm256_set1_epi64x(1ll << 52),
                  one = _mm256_set1_epi64x(1), bias = _mm256_set1_epi64x(1023), vemin = _mm256_set1_epi64x(emin),
                  base_shift = _mm256_set1_epi64x(52 - m), cap = _mm256_set1_epi64x(63), zero = _mm256_setzero_si256(),
                  vmax = _mm256_set1_epi64x(max_code), vnan = _mm256_set1_epi64x(has_nan ? nan_code : 0),
                  low_halves = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    auto max64 = [](__m256i a, __m256i b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(b, a)); };
    auto min64 = [](__m256i a, __m256i b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); };
    for (; i + 4 <= n; i += 4) {
      const __m256i b = _mm256_castpd_si256(_mm256_div_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), vd));
      const __m256i sign = _mm256_slli_epi64(_mm256_srli_epi64(b, 63), bits - 1);
      const __m256i a = _mm256_and_si256(b, abs_mask);
      const __m256i is_nan = _mm256_cmpgt_epi64(a, inf);
      const __m256i e = _mm256_sub_epi64(_mm256_srli_epi64(a, 52), bias);
      const __m256i shift = min64(_mm256_add_epi64(base_shift, max64(_mm256_sub_epi64(vemin, e), zero)), cap);
      const __m256i mant = _mm256_or_si256(_mm256_and_si256(a, frac), implicit);
      const __m256i half_less = _mm256_sub_epi64(_mm256_sllv_epi64(one, _mm256_sub_epi64(shift, one)), one);
      const __m256i odd = _mm256_and_si256(_mm256_srlv_epi64(mant, shift), one);
      const __m256i q = _mm256_srlv_epi64(_mm256_add_epi64(_mm256_add_epi64(mant, half_less), odd), shift);
      __m256i code = _mm256_add_epi64(_mm256_sll_epi64(_mm256_sub_epi64(max64(e, vemin), vemin), _mm_cvtsi32_si128(m)), q);
      const __m256i over = _mm256_andnot_si256(is_nan, _mm256_cmpgt_epi64(code, vmax));
      code = _mm256_or_si256(sign, min64(code, vmax));
      code = _mm256_blendv_epi8(code, vnan, is_nan);
      saturated += std::popcount(static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(over)))) +
                   (has_nan ? 0 : std::popcount(static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(is_nan)))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                       _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(code, low_halves)));
    }
#endif
    for (; i < n; ++i) out[i] = (*this)(static_cast<double>(x[i]) / d, saturated);
  }
};

// decode() of every code of each element up to 16 bits wide, tabulated once (dequantize() of the
// runtime's per-call activations must not pay for the generic decoder per value).
const std::vector<double>* decode_table(Element e) {
  static const std::array<std::vector<double>, kElementTraits.size()> tables = [] {
    std::array<std::vector<double>, kElementTraits.size()> t;
    for (const ElementTraits& tr : kElementTraits) {
      if (tr.bits > 16) continue;
      auto& v = t[static_cast<std::size_t>(tr.element)];
      v.resize(std::size_t{1} << tr.bits);
      for (std::uint32_t c = 0; c < v.size(); ++c) v[c] = decode(tr.element, c);
    }
    return t;
  }();
  const auto& v = tables[static_cast<std::size_t>(e)];
  return v.empty() ? nullptr : &v;
}

// Everything of a quantisation that does not depend on where its codes go.
struct Plan {
  BlockShape b;
  std::int64_t grid_r = 0, grid_c = 0;
  double tensor_scale = 1.0;
};

// NVFP4's FP32 tensor scale from the tensor's amax over finite values (1 for an all-zero tensor).
// NVFP4's two levels (NVIDIA's NVFP4 recipe): a block's E4M3 scale is its amax / 6 (E2M1's
// largest) over the tensor scale, which is the tensor's amax / (448 x 6) (E4M3's largest times it).
constexpr double kNv16ElementMax = 6.0, kNv16ScaleMax = 448.0;

double nv16_tensor_scale(double amax) {
  return amax > 0 ? static_cast<double>(static_cast<float>(amax / (kNv16ScaleMax * kNv16ElementMax))) : 1.0;
}

Plan make_plan(const Format& f, std::int64_t rows, std::int64_t cols, std::size_t n_values) {
  if (rows <= 0 || cols <= 0) throw std::invalid_argument("quantize: shape must be positive");
  if (static_cast<std::int64_t>(n_values) != rows * cols) {
    throw std::invalid_argument("quantize: " + std::to_string(n_values) + " values for a " + std::to_string(rows) + " x " +
                                std::to_string(cols) + " tensor");
  }
  if (f.element == Element::kHif4 && f.scaling.kind != ScaleKind::kNone) {
    throw std::invalid_argument("quantize: hif4 carries its own three-level block scale; write 'hif4' without a scaling");
  }
  if (traits(f.element).scale_only && f.scaling.kind != ScaleKind::kNone) {
    throw std::invalid_argument("quantize: e8m0 is a scale element; it takes no scaling of its own");
  }
  Plan p;
  p.b = block_shape(f, rows, cols);
  p.grid_r = (rows + p.b.rows - 1) / p.b.rows;
  p.grid_c = (cols + p.b.cols - 1) / p.b.cols;
  return p;
}

Plan make_plan(const Format& f, std::int64_t rows, std::int64_t cols, const std::vector<double>& x) {
  Plan p = make_plan(f, rows, cols, x.size());
  if (f.scaling.kind == ScaleKind::kNv16) p.tensor_scale = nv16_tensor_scale(finite_amax(x.data(), rows * cols));
  return p;
}

// A quantised tensor of the plan's shape: codes 0, every scale 1, nothing saturated yet.
QuantizedTensor empty_tensor(const Format& f, std::int64_t rows, std::int64_t cols, const Plan& p) {
  QuantizedTensor q;
  q.format = f;
  q.rows = rows;
  q.cols = cols;
  q.block_rows = p.b.rows;
  q.block_cols = p.b.cols;
  q.tensor_scale = p.tensor_scale;
  q.codes.assign(static_cast<std::size_t>(rows * cols), 0);
  q.scales.assign(static_cast<std::size_t>(p.grid_r * p.grid_c), 1.0);
  q.scale_codes.assign(q.scales.size(), 0);
  return q;
}

// Scale of a block from its amax over finite values and whether it holds a NaN (not for HiF4).
BlockScale scale_from_amax(const Format& f, const Plan& p, double amax, bool nan);

// Scale of block (r0..r1, c0..c1). For HiF4 the caller passes one row segment (block_rows = 1).
BlockScale block_scale(const Format& f, const Plan& p, std::int64_t cols, const std::vector<double>& x, std::int64_t r0,
                       std::int64_t r1, std::int64_t c0, std::int64_t c1) {
  if (f.element == Element::kHif4) {
    const std::uint32_t meta = hif4_metadata(&x[static_cast<std::size_t>(r0 * cols + c0)], c1 - c0);
    return {decode_e6m2(meta >> 24), meta};
  }
  double amax = 0;
  bool nan = false;
  for (std::int64_t r = r0; r < r1; ++r)
    amax = std::max(amax, finite_amax(&x[static_cast<std::size_t>(r * cols + c0)], c1 - c0, &nan));
  return scale_from_amax(f, p, amax, nan);
}

// E8M0's exponent bias and range (OCP MX v1.0 sec. 5.4: code 255 is NaN).
constexpr int kE8M0Bias = 127, kE8M0MinExp = -127, kE8M0MaxExp = 127;

// The exponent of an MX block's E8M0 scale (OCP MX v1.0 sec. 6.3: floor(log2(amax)) minus the
// element's largest exponent, clamped to E8M0's range; -127 for a block of zeros).
int mx_shared_exponent(double amax, int element_emax) {
  if (!(amax > 0)) return kE8M0MinExp;
  int ex = 0;
  std::frexp(amax, &ex);
  return std::clamp(ex - 1 - element_emax, kE8M0MinExp, kE8M0MaxExp);
}

BlockScale scale_from_amax(const Format& f, const Plan& p, double amax, bool nan) {
  const Element el = f.element;
  BlockScale bs;
  switch (f.scaling.kind) {
    case ScaleKind::kNone:
      return bs;
    case ScaleKind::kMx32: {
      if (nan) return {std::numeric_limits<double>::quiet_NaN(), 0xFFu};
      const int shared = mx_shared_exponent(amax, emax(el));
      // 2^shared from its bits: a normal double over E8M0's whole range, without a libm call.
      const auto bits = static_cast<std::uint64_t>(shared + 1023) << 52;
      return {std::bit_cast<double>(bits), static_cast<std::uint32_t>(shared + kE8M0Bias)};
    }
    case ScaleKind::kNv16: {
      // encode() and decode() of E4M3, without the generic encoder's libm calls (one per 16 values).
      static const FastFloatEncoder e4m3(Element::kFp8E4M3);
      std::int64_t saturated = 0;  // a scale past 448 is stored as 448, as encode() does
      bs.code = e4m3(amax / kNv16ElementMax / p.tensor_scale, saturated);
      bs.scale = (*decode_table(Element::kFp8E4M3))[bs.code];
      return bs;
    }
    default: {
      const Element scale_el = traits(f.scaling.kind).scale_element;
      double s = 1.0;
      if (amax > 0) {
        if (el == Element::kHif8) {
          int ex = 0;
          std::frexp(amax, &ex);
          s = std::ldexp(1.0, ex - 1 - kHif8ScaleTargetExp);
        } else {
          s = amax / max_finite(el);
        }
      }
      bs.code = encode(scale_el, s);
      bs.scale = decode(scale_el, bs.code);
      if (!(bs.scale > 0)) {  // a scale below the storage type's range: store 1 (the block's values round to 0)
        bs.code = encode(scale_el, 1.0);
        bs.scale = 1.0;
      }
      return bs;
    }
  }
}

// The divisor of element (r, c) of a block (scale x tensor scale; HiF4 adds its micro-exponents).
double element_divisor(const Format& f, const BlockScale& bs, double tensor_scale, std::int64_t c_in_block) {
  if (f.element == Element::kHif4) return hif4_multiplier(bs.code, c_in_block);
  return bs.scale * tensor_scale;
}

// x / divisor as the element sees it: a NaN divisor (NaN block) passes x through so the element
// records NaN where it can; a zero divisor (an NVFP4 block scale that underflows E4M3, or a block
// of zeros) makes the element 0.
double scaled_input(double x, double divisor) {
  if (std::isnan(divisor)) return x;
  return divisor == 0 ? 0.0 : x / divisor;
}

// The block walk of the double paths (quantize and fake_quantize): per block of the grid,
// on_block(block index, its scale), then on_element(row-major index, divisor) for each element.
template <class OnBlock, class OnElement>
void for_each_block(const Format& f, const Plan& p, std::int64_t rows, std::int64_t cols, const std::vector<double>& x,
                    OnBlock on_block, OnElement on_element) {
  for (std::int64_t br = 0; br < p.grid_r; ++br) {
    for (std::int64_t bc = 0; bc < p.grid_c; ++bc) {
      const std::int64_t r0 = br * p.b.rows, r1 = std::min(rows, r0 + p.b.rows);
      const std::int64_t c0 = bc * p.b.cols, c1 = std::min(cols, c0 + p.b.cols);
      const BlockScale bs = block_scale(f, p, cols, x, r0, r1, c0, c1);
      on_block(static_cast<std::size_t>(br * p.grid_c + bc), bs);
      for (std::int64_t r = r0; r < r1; ++r) {
        for (std::int64_t c = c0; c < c1; ++c) {
          on_element(static_cast<std::size_t>(r * cols + c), element_divisor(f, bs, p.tensor_scale, c - c0));
        }
      }
    }
  }
}

}  // namespace

QuantizedTensor quantize(const Format& f, std::int64_t rows, std::int64_t cols, const std::vector<double>& x) {
  const Plan p = make_plan(f, rows, cols, x);
  QuantizedTensor q = empty_tensor(f, rows, cols, p);
  for_each_block(
      f, p, rows, cols, x,
      [&](std::size_t b, const BlockScale& bs) {
        q.scales[b] = bs.scale;
        q.scale_codes[b] = bs.code;
      },
      [&](std::size_t i, double d) {
        bool sat = false;
        q.codes[i] = encode(f.element, scaled_input(x[i], d), &sat);
        if (sat) q.saturated++;
      });
  return q;
}

double decode_scale(const Format& f, std::uint32_t code) {
  if (f.element == Element::kHif4) return decode_e6m2(code >> 24);
  if (f.scaling.kind == ScaleKind::kNone) return 1.0;
  return decode(traits(f.scaling.kind).scale_element, code);
}

std::vector<double> dequantize(const QuantizedTensor& q) {
  std::vector<double> out(q.codes.size());
  const std::int64_t grid_c = (q.cols + q.block_cols - 1) / q.block_cols;
  const bool hif4 = q.format.element == Element::kHif4;
  const std::vector<double>* table = decode_table(q.format.element);
  const auto mask = static_cast<std::uint32_t>(table ? table->size() - 1 : 0xFFFFFFFFu);
  for (std::int64_t r = 0; r < q.rows; ++r) {
    const std::int64_t row_block = (r / q.block_rows) * grid_c;
    for (std::int64_t bc = 0; bc < grid_c; ++bc) {
      const auto b = static_cast<std::size_t>(row_block + bc);
      const double mult = q.scales[b] * q.tensor_scale;
      const std::int64_t c0 = bc * q.block_cols, c1 = std::min(q.cols, c0 + q.block_cols);
      const std::uint32_t* codes = q.codes.data() + r * q.cols;
      double* o = out.data() + r * q.cols;
      if (table != nullptr && !hif4) {  // the common case, its loop free of the others' branches
        const double* t = table->data();
        for (std::int64_t c = c0; c < c1; ++c) o[c] = t[codes[c] & mask] * mult;
        continue;
      }
      for (std::int64_t c = c0; c < c1; ++c) {
        const double v = table ? (*table)[codes[c] & mask] : decode(q.format.element, codes[c]);
        o[c] = v * (hif4 ? hif4_multiplier(q.scale_codes[b], c - c0) : mult);
      }
    }
  }
  return out;
}

std::vector<double> fake_quantize(const Format& f, std::int64_t rows, std::int64_t cols, const std::vector<double>& x,
                                  std::int64_t* saturated) {
  const Plan p = make_plan(f, rows, cols, x);
  std::vector<double> out(x.size());
  std::int64_t sat_count = 0;
  for_each_block(
      f, p, rows, cols, x, [](std::size_t, const BlockScale&) {},
      [&](std::size_t i, double d) {
        bool sat = false;
        out[i] = round_to(f.element, scaled_input(x[i], d), &sat) * d;
        if (sat) sat_count++;
      });
  if (saturated) *saturated = sat_count;
  return out;
}

namespace {

// HiF8 from the bits of the double: the binade's mantissa width, integer round to nearest even,
// then the byte as encode_hif8() builds it. Equal to encode_hif8() for every double (tested).
struct FastHif8Encoder {
  std::uint32_t operator()(double v, std::int64_t& saturated) const {
    const auto b = std::bit_cast<std::uint64_t>(v);
    const std::uint32_t sign = (b >> 63) ? 0x80u : 0u;
    const std::uint64_t a = b & 0x7FFFFFFFFFFFFFFFull;
    if (a > 0x7FF0000000000000ull) return 0x80u;  // NaN
    if (a == 0) return 0;                         // one zero
    const int e = static_cast<int>(a >> 52) - 1023;
    if (e > 15) {  // 2^16 and beyond (and Inf) round past 32768
      ++saturated;
      return sign | 0x6Eu;
    }
    const int ee = std::max(e, kHif8MinExp);
    const int mb = hif8_mantissa_bits(ee);
    const int shift = std::min(52 - mb + (ee - e), 63);
    const std::uint64_t mant = (a & ((1ull << 52) - 1)) | (1ull << 52);
    const std::uint64_t q = (mant + ((1ull << (shift - 1)) - 1) + ((mant >> shift) & 1u)) >> shift;
    if (q == 0) return 0;
    int re = ee;
    std::uint32_t man = 0;
    if ((q >> (mb + 1)) != 0) {
      re = ee + 1;  // carried into the next binade: mantissa 0 there
    } else {
      man = static_cast<std::uint32_t>(q - (1ull << mb));
    }
    if (re > 15 || (re == 15 && man != 0)) {  // 49152 and up: past the largest finite value
      ++saturated;
      return sign | 0x6Eu;
    }
    return hif8_code(sign, re, man);
  }
};

struct FastIntEncoder {
  double hi = 0, lo = 0;
  std::uint32_t mask_bits = 0;
  explicit FastIntEncoder(Element e) {
    const int b = traits(e).bits;
    hi = static_cast<double>((1 << (b - 1)) - 1);
    lo = -hi;
    mask_bits = mask(b);
  }
  std::uint32_t operator()(double v, std::int64_t& saturated) const {
    if (std::isnan(v)) {
      ++saturated;
      return 0;
    }
    // Round to nearest even by adding and subtracting 1.5 x 2^52 (exact for |v| < 2^51; larger
    // values are clamped first, they saturate anyway). Default rounding mode, no -ffast-math.
    constexpr double kMagic = 6755399441055744.0;
    const double c = std::clamp(v, -1e9, 1e9);
    double level = (c + kMagic) - kMagic;
    if (level > hi || level < lo) {
      ++saturated;
      level = level > hi ? hi : lo;
    }
    return static_cast<std::uint32_t>(static_cast<std::int32_t>(level)) & mask_bits;
  }
};

struct GenericEncoder {
  Element e;
  std::uint32_t operator()(double v, std::int64_t& saturated) const {
    bool sat = false;
    const std::uint32_t c = encode(e, v, &sat);
    if (sat) ++saturated;
    return c;
  }
};

// Pass 2 of the fast path: encode every element of row segments with its block's divisor.
template <class Enc>
void encode_blocks(const Enc& enc, const Plan& p, std::int64_t rows, std::int64_t cols, std::span<const float> x,
                   QuantizedTensor& q) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t br = r / p.b.rows;
    for (std::int64_t bc = 0; bc < p.grid_c; ++bc) {
      const auto blk = static_cast<std::size_t>(br * p.grid_c + bc);
      const double d = q.scales[blk] * q.tensor_scale;
      const std::int64_t c0 = bc * p.b.cols, c1 = std::min(cols, c0 + p.b.cols);
      const float* xr = x.data() + r * cols;
      std::uint32_t* out = q.codes.data() + r * cols;
      if (std::isnan(d) || d == 0) {
        for (std::int64_t c = c0; c < c1; ++c) out[c] = enc(scaled_input(static_cast<double>(xr[c]), d), q.saturated);
      } else if constexpr (requires { enc.encode_run(xr, c1 - c0, d, out, q.saturated); }) {
        enc.encode_run(xr + c0, c1 - c0, d, out + c0, q.saturated);  // x / 1 is exact: d == 1 too
      } else if (d == 1.0) {
        for (std::int64_t c = c0; c < c1; ++c) out[c] = enc(static_cast<double>(xr[c]), q.saturated);
      } else {
        for (std::int64_t c = c0; c < c1; ++c) out[c] = enc(static_cast<double>(xr[c]) / d, q.saturated);
      }
    }
  }
}

template <class Enc>
void encode_hif4(const Enc& enc, std::int64_t rows, std::int64_t cols, std::span<const float> x, QuantizedTensor& q) {
  const std::int64_t grid_c = (cols + kHif4Block - 1) / kHif4Block;
  double seg[kHif4Block];
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t bc = 0; bc < grid_c; ++bc) {
      const std::int64_t c0 = bc * kHif4Block, n = std::min(cols, c0 + kHif4Block) - c0;
      const float* xr = x.data() + r * cols + c0;
      for (std::int64_t i = 0; i < n; ++i) seg[i] = static_cast<double>(xr[i]);
      const std::uint32_t meta = hif4_metadata(seg, n);
      const auto blk = static_cast<std::size_t>(r * grid_c + bc);
      q.scale_codes[blk] = meta;
      q.scales[blk] = decode_e6m2(meta >> 24);
      std::uint32_t* out = q.codes.data() + r * cols + c0;
      for (std::int64_t g = 0; g * 4 < n; ++g) {  // one multiplier per group of 4
        const double d = hif4_multiplier(meta, g * 4);
        for (std::int64_t i = g * 4; i < std::min(n, g * 4 + 4); ++i) out[i] = enc(scaled_input(seg[i], d), q.saturated);
      }
    }
  }
}

}  // namespace

namespace {
QuantizedTensor quantize_float(const Format& f, std::int64_t rows, std::int64_t cols, std::span<const float> x,
                               const float* tensor_amax);
}  // namespace

QuantizedTensor quantize(const Format& f, std::int64_t rows, std::int64_t cols, std::span<const float> x) {
  return quantize_float(f, rows, cols, x, nullptr);
}

QuantizedTensor quantize_slice(const Format& f, std::int64_t rows, std::int64_t cols, std::span<const float> x,
                               float tensor_amax) {
  return quantize_float(f, rows, cols, x, &tensor_amax);
}

namespace {
// Largest |x[i]| over the finite values of x[0, n) (0 when none), and whether one is NaN.
float segment_amax(const float* x, std::int64_t n, bool& has_nan) {
  float m = 0.0f;
  std::int64_t i = 0;
#ifdef RLSIM_AVX512
  __m512 vm = _mm512_setzero_ps();
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  __mmask16 nan = 0;
  for (; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1u);
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(live, x + i));
    nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    vm = _mm512_mask_max_ps(vm, _mm512_cmp_ps_mask(a, big, _CMP_LE_OQ), vm, a);
  }
  m = _mm512_reduce_max_ps(vm);
  has_nan = nan != 0;
#elif defined(RLSIM_AVX2)
  // Eight lanes at a time, the tail below (a maximum does not depend on the order).
  __m256 vm = _mm256_setzero_ps();
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  int nan = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask);
    nan |= _mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    vm = _mm256_blendv_ps(vm, _mm256_max_ps(vm, a), _mm256_cmp_ps(a, big, _CMP_LE_OQ));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vm);
  for (const float l : lanes) m = std::max(m, l);
  has_nan = has_nan || nan != 0;
#endif
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    m = a <= std::numeric_limits<float>::max() && a > m ? a : m;
    has_nan |= a != a;
  }
  return m;
}

QuantizedTensor quantize_float(const Format& f, std::int64_t rows, std::int64_t cols, std::span<const float> x,
                               const float* tensor_amax) {
  Plan p = make_plan(f, rows, cols, x.size());
  QuantizedTensor q = empty_tensor(f, rows, cols, p);  // tensor scale set after pass 1 (NVFP4)
  const std::size_t nblocks = q.scales.size();
  const Element el = f.element;
  if (el == Element::kHif4) {
    encode_hif4(FastFloatEncoder(el), rows, cols, x, q);
    return q;
  }
  if (f.scaling.kind != ScaleKind::kNone) {
    // Pass 1: amax over finite values and NaN presence per block, one contiguous row segment at a time.
    std::vector<float> amax(nblocks, 0.0f);
    std::vector<unsigned char> nan(nblocks, 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t br = r / p.b.rows;
      const float* xr = x.data() + r * cols;
      for (std::int64_t bc = 0; bc < p.grid_c; ++bc) {
        const std::int64_t c0 = bc * p.b.cols, c1 = std::min(cols, c0 + p.b.cols);
        bool has_nan = false;
        const float m = segment_amax(xr + c0, c1 - c0, has_nan);
        const auto blk = static_cast<std::size_t>(br * p.grid_c + bc);
        amax[blk] = std::max(amax[blk], m);
        nan[blk] = static_cast<unsigned char>(nan[blk] | (has_nan ? 1 : 0));
      }
    }
    if (f.scaling.kind == ScaleKind::kNv16) {
      float t = 0.0f;
      for (float a : amax) t = std::max(t, a);
      p.tensor_scale = nv16_tensor_scale(static_cast<double>(tensor_amax != nullptr ? *tensor_amax : t));
    }
    q.tensor_scale = p.tensor_scale;
    for (std::size_t b = 0; b < nblocks; ++b) {
      const BlockScale bs = scale_from_amax(f, p, static_cast<double>(amax[b]), nan[b] != 0);
      q.scales[b] = bs.scale;
      q.scale_codes[b] = bs.code;
    }
  }
  switch (el) {
    case Element::kBf16:
    case Element::kFp16:
    case Element::kFp8E4M3:
    case Element::kFp8E5M2:
    case Element::kFp4E2M1:
      encode_blocks(FastFloatEncoder(el), p, rows, cols, x, q);
      break;
    case Element::kInt8:
    case Element::kInt4:
      encode_blocks(FastIntEncoder(el), p, rows, cols, x, q);
      break;
    case Element::kHif8:
      encode_blocks(FastHif8Encoder{}, p, rows, cols, x, q);
      break;
    default:
      encode_blocks(GenericEncoder{el}, p, rows, cols, x, q);
      break;
  }
  return q;
}
}  // namespace

namespace {
// Whether fake_quantize's fast paths round onto element e's grid: a binary float element of at
// most 8 bits (E4M3, E5M2, E2M1).
bool small_binary_float(Element e) { return traits(e).layout.exp_bits > 0 && traits(e).bits <= 8; }

// Whether fake_quantize's FP32 path applies: mx32 scaling of such an element.
bool mx_float_path(const Format& f) { return f.scaling.kind == ScaleKind::kMx32 && small_binary_float(f.element); }

// A binary float element's grid as FastFloatEncoder rounds onto it, for values rather than codes,
// in FP32 (T = float: MX, whose scaling is exact there) or double (T = double: the encoder's own
// width): RNE on T's bits to m mantissa bits at or above 2^emin, onto the subnormal grid below it
// by an add and subtract of 2^(emin - m + T's mantissa bits), then saturation at the largest
// finite value (which +inf also rounds past). round() takes |v| and returns the rounded |v|.
template <typename T>
struct ElementGrid {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  static constexpr int kMantissa = std::numeric_limits<T>::digits - 1;  // 23 or 52
  int m = 0;
  T min_normal = 0, shift = 0, max_value = 0;
  Bits half = 0, keep = 0;
  explicit ElementGrid(Element e) {
    const FloatLayout& l = traits(e).layout;
    const int emin = 1 - l.bias;
    m = l.man_bits;
    min_normal = std::ldexp(T{1}, emin);
    shift = std::ldexp(T{1}, emin - m + kMantissa);
    max_value = static_cast<T>(max_finite(e));
    half = (Bits{1} << (kMantissa - 1 - m)) - 1u;
    keep = ~((Bits{1} << (kMantissa - m)) - 1u);
  }
  T round(T a) const {
    const auto b = std::bit_cast<Bits>(a);
    const T r = a >= min_normal ? std::bit_cast<T>((b + half + ((b >> (kMantissa - m)) & 1u)) & keep) : (a + shift) - shift;
    return r > max_value ? max_value : r;
  }
};

#ifdef RLSIM_AVX512
// ElementGrid::round on 16 floats and on 8 doubles.
__m512 grid_round(const ElementGrid<float>& g, __m512 a) {
  const __m512i b = _mm512_castps_si512(a);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, ElementGrid<float>::kMantissa - g.m), _mm512_set1_epi32(1));
  const __m512i up = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(static_cast<int>(g.half))), odd);
  const __m512 normal = _mm512_castsi512_ps(_mm512_and_si512(up, _mm512_set1_epi32(static_cast<int>(g.keep))));
  const __m512 vshift = _mm512_set1_ps(g.shift), vmax = _mm512_set1_ps(g.max_value);
  const __m512 sub = _mm512_sub_ps(_mm512_add_ps(a, vshift), vshift);
  const __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(g.min_normal), _CMP_GE_OQ), sub, normal);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, vmax, _CMP_GT_OQ), r, vmax);
}
__m512d grid_round(const ElementGrid<double>& g, __m512d a) {
  const __m512i b = _mm512_castpd_si512(a);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi64(b, ElementGrid<double>::kMantissa - g.m), _mm512_set1_epi64(1));
  const __m512i up = _mm512_add_epi64(_mm512_add_epi64(b, _mm512_set1_epi64(static_cast<long long>(g.half))), odd);
  const __m512d normal = _mm512_castsi512_pd(_mm512_and_si512(up, _mm512_set1_epi64(static_cast<long long>(g.keep))));
  const __m512d vshift = _mm512_set1_pd(g.shift), vmax = _mm512_set1_pd(g.max_value);
  const __m512d sub = _mm512_sub_pd(_mm512_add_pd(a, vshift), vshift);
  const __m512d r = _mm512_mask_blend_pd(_mm512_cmp_pd_mask(a, _mm512_set1_pd(g.min_normal), _CMP_GE_OQ), sub, normal);
  return _mm512_mask_blend_pd(_mm512_cmp_pd_mask(r, vmax, _CMP_GT_OQ), r, vmax);
}

// v with the sign of s (s's sign bit copied into v, whose sign bit is clear).
__m512 with_sign_of(__m512 v, __m512 s) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), _mm512_and_si512(_mm512_castps_si512(s), sign)));
}
__m512d with_sign_of(__m512d v, __m512d s) {
  const __m512i sign = _mm512_set1_epi64(static_cast<long long>(0x8000000000000000ull));
  return _mm512_castsi512_pd(_mm512_or_si512(_mm512_castpd_si512(v), _mm512_and_si512(_mm512_castpd_si512(s), sign)));
}
#endif

using simd::pow2f;  // two a block: no libm call

// The FP32 path of fake_quantize for one 1 x n block (n <= 32) with E8M0 scale 2^shared:
// x[i] = RNE of x[i] 2^-shared onto the grid, saturated to its largest finite value, times
// 2^shared. Every step is exact but the rounding itself.
void mx_round_block(float* x, std::int64_t n, int shared, const ElementGrid<float>& g) {
  const float down = pow2f(-shared), up = pow2f(shared);
  std::int64_t i = 0;
#ifdef RLSIM_AVX512
  const __m512 vdown = _mm512_set1_ps(down), vup = _mm512_set1_ps(up);
  for (; i < n; i += 16) {
    const auto live = static_cast<__mmask16>(n - i >= 16 ? 0xFFFFu : (1u << (n - i)) - 1u);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(live, x + i), vdown);
    _mm512_mask_storeu_ps(x + i, live, _mm512_mul_ps(with_sign_of(grid_round(g, _mm512_abs_ps(v)), v), vup));
  }
#endif
  for (; i < n; ++i) {
    const float v = x[i] * down;
    x[i] = std::copysign(g.round(std::fabs(v)), v) * up;
  }
}

// Whether fake_quantize's scaled-double path applies: such an element with a scale per block of whole row segments or per tensor,
// stored in a plain float type (not MX's E8M0, nv16's two levels or HiF4's own).
bool scaled_float_path(const Format& f) {
  switch (f.scaling.kind) {
    case ScaleKind::kTensor:
    case ScaleKind::kChannel:
    case ScaleKind::kToken:
    case ScaleKind::kGroup1xN:
    case ScaleKind::kGroupN:
    case ScaleKind::kBlockMxN:
      break;
    default:
      return false;
  }
  return small_binary_float(f.element);
}

// fake_quantize's scaled-double path for one row segment with divisor d (finite, > 0): the steps
// of FastFloatEncoder (the quotient x / d in double, rounded onto the grid) and of dequantize()
// (the value times d in double, exact), then the cast to FP32, without the codes between them.
void scaled_round_segment(float* x, std::int64_t n, double d, const ElementGrid<double>& g) {
  std::int64_t i = 0;
#ifdef RLSIM_AVX512
  const __m512d vd = _mm512_set1_pd(d);
  for (; i < n; i += 8) {
    const auto live = static_cast<__mmask8>(n - i >= 8 ? 0xFFu : (1u << (n - i)) - 1u);
    const __m512d v = _mm512_div_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(live, x + i)), vd);
    const __m512d r = with_sign_of(grid_round(g, _mm512_abs_pd(v)), v);
    _mm256_mask_storeu_ps(x + i, live, _mm512_cvtpd_ps(_mm512_mul_pd(r, vd)));
  }
#endif
  for (; i < n; ++i) {
    const double v = static_cast<double>(x[i]) / d;
    x[i] = static_cast<float>(std::copysign(g.round(std::fabs(v)), v) * d);
  }
}
}  // namespace

void fake_quantize(const Format& f, std::int64_t rows, std::int64_t cols, float* x) {
  const std::int64_t n = rows * cols;
  const Plan p = make_plan(f, rows, cols, static_cast<std::size_t>(std::max<std::int64_t>(n, 0)));  // throws as quantize()
  const bool mx = mx_float_path(f);
  if (mx || scaled_float_path(f)) {
    // Every block's scale first (scale_from_amax's, as quantize() finds it), so that a NaN
    // anywhere sends the whole tensor down the reference path before anything is written.
    thread_local std::vector<BlockScale> block;
    block.resize(static_cast<std::size_t>(p.grid_r * p.grid_c));
    bool any_nan = false;
    for (std::int64_t br = 0; br < p.grid_r && !any_nan; ++br) {
      for (std::int64_t bc = 0; bc < p.grid_c; ++bc) {
        const std::int64_t c0 = bc * p.b.cols, c1 = std::min(cols, c0 + p.b.cols);
        float amax = 0;
        bool nan = false;
        for (std::int64_t r = br * p.b.rows; r < std::min(rows, (br + 1) * p.b.rows); ++r) {
          bool row_nan = false;
          amax = std::max(amax, segment_amax(x + r * cols + c0, c1 - c0, row_nan));
          nan |= row_nan;
        }
        any_nan |= nan;
        block[static_cast<std::size_t>(br * p.grid_c + bc)] = scale_from_amax(f, p, static_cast<double>(amax), nan);
      }
    }
    if (!any_nan) {
      // Each row segment with its block's scale: MX's E8M0 exponent (code - bias), else the divisor.
      auto each_segment = [&](auto&& round) {
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t bc = 0; bc < p.grid_c; ++bc) {
            const std::int64_t c0 = bc * p.b.cols, c1 = std::min(cols, c0 + p.b.cols);
            round(x + r * cols + c0, c1 - c0, block[static_cast<std::size_t>((r / p.b.rows) * p.grid_c + bc)]);
          }
        }
      };
      if (mx) {
        const ElementGrid<float> g(f.element);
        each_segment([&](float* s, std::int64_t k, const BlockScale& b) {
          mx_round_block(s, k, static_cast<int>(b.code) - kE8M0Bias, g);
        });
      } else {
        const ElementGrid<double> g(f.element);
        each_segment(
            [&](float* s, std::int64_t k, const BlockScale& b) { scaled_round_segment(s, k, b.scale * p.tensor_scale, g); });
      }
      return;
    }
  }
  const QuantizedTensor q = quantize(f, rows, cols, std::span<const float>(x, static_cast<std::size_t>(n)));
  const std::vector<double> d = dequantize(q);
  for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(d[static_cast<std::size_t>(i)]);
}

double quantize_nvfp4_doubled(const Format& f, std::span<const float> x, std::int8_t* doubled, double* scales) {
  if (f.element != Element::kFp4E2M1 || f.scaling.kind != ScaleKind::kNv16) {
    throw std::invalid_argument("quantize_nvfp4_doubled: " + f.str() + " is not fp4-e2m1 with nv16 scaling");
  }
  const auto n = static_cast<std::int64_t>(x.size());
  Plan p = make_plan(f, 1, n, x.size());  // throws for an empty row
  auto reference = [&] {
    const QuantizedTensor q = quantize(f, 1, n, x);
    for (std::int64_t c = 0; c < n; ++c)
      doubled[c] = static_cast<std::int8_t>(2.0 * decode(Element::kFp4E2M1, q.codes[static_cast<std::size_t>(c)]));
    std::copy(q.scales.begin(), q.scales.end(), scales);
    return q.tensor_scale;
  };
  bool nan = false;
  const float row_amax = segment_amax(x.data(), n, nan);
  p.tensor_scale = nv16_tensor_scale(static_cast<double>(row_amax));
  if (nan || !(p.tensor_scale > 0)) return reference();  // NaN codes, or NaN block scales
  static const ElementGrid<double> e4m3(Element::kFp8E4M3), e2m1(Element::kFp4E2M1);
  const double ts = p.tensor_scale;
  // Block amaxes, then their E4M3 scales: scale_from_amax's amax / 6 / ts on E4M3's grid.
  for (std::int64_t b = 0; b < p.grid_c; ++b) {
    const std::int64_t c0 = b * p.b.cols;
    bool block_nan = false;
    scales[b] = static_cast<double>(segment_amax(x.data() + c0, std::min(n, c0 + p.b.cols) - c0, block_nan));
  }
  std::int64_t b = 0;
#ifdef RLSIM_AVX512
  for (; b + 8 <= p.grid_c; b += 8) {
    const __m512d u =
        _mm512_div_pd(_mm512_div_pd(_mm512_loadu_pd(scales + b), _mm512_set1_pd(kNv16ElementMax)), _mm512_set1_pd(ts));
    _mm512_storeu_pd(scales + b, grid_round(e4m3, u));
  }
#endif
  for (; b < p.grid_c; ++b) scales[b] = e4m3.round(scales[b] / kNv16ElementMax / ts);
  // Each element: x / (scale x ts) on E2M1's grid, doubled; a block whose scale is 0 is all +0.
  for (b = 0; b < p.grid_c; ++b) {
    const std::int64_t c0 = b * p.b.cols, c1 = std::min(n, c0 + p.b.cols);
    const double d = scales[b] * ts;
    std::int64_t c = c0;
    if (!(d > 0)) {
      std::fill(doubled + c0, doubled + c1, std::int8_t{0});
      continue;
    }
#ifdef RLSIM_AVX512
    const __m512d vd = _mm512_set1_pd(d), two = _mm512_set1_pd(2.0);
    for (; c + 8 <= c1; c += 8) {
      const __m512d v = _mm512_div_pd(_mm512_cvtps_pd(_mm256_loadu_ps(x.data() + c)), vd);
      const __m512d r = with_sign_of(_mm512_mul_pd(grid_round(e2m1, _mm512_abs_pd(v)), two), v);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(doubled + c), _mm256_cvtepi32_epi8(_mm512_cvtpd_epi32(r)));
    }
#endif
    for (; c < c1; ++c) {
      const double v = static_cast<double>(x[static_cast<std::size_t>(c)]) / d;
      doubled[c] = static_cast<std::int8_t>(std::copysign(2.0 * e2m1.round(std::fabs(v)), v));
    }
  }
  return ts;
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
