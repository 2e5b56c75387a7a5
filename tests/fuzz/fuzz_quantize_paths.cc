// Not a reader but a differential check of the activation quantisers' fast paths: the input's first
// byte picks a format, the next two the shape (1-4 rows, 1-80 columns), the rest are the FP32
// values' bits (NaN, infinities and subnormals included). fake_quantize must give
// dequantize(quantize()) rounded to FP32 bit for bit, and quantize_nvfp4_doubled quantize()'s
// NVFP4 codes (doubled), block scales and tensor scale.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "models/precision/format.h"
#include "models/precision/quantize.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace rlsim::models;
  static const char* const kFormats[] = {"mxfp8",          "fp8-e5m2/mx32",     "mxfp4",          "fp8-e4m3/group1x128",
                                         "fp8-e4m3/token", "fp8-e4m3/tensor",   "fp8-e5m2/token", "fp4-e2m1/group1x16",
                                         "nvfp4",          "fp8-e4m3/block2x32"};
  if (size < 3) return 0;
  const Format f = parse_format(kFormats[data[0] % (sizeof(kFormats) / sizeof(kFormats[0]))]);
  const std::int64_t rows = 1 + data[1] % 4, cols = 1 + data[2] % 80;
  std::vector<float> x(static_cast<std::size_t>(rows * cols), 0.0f);
  std::memcpy(x.data(), data + 3, std::min(x.size() * sizeof(float), size - 3));
  const std::vector<double> ref = dequantize(quantize(f, rows, cols, std::span<const float>(x)));
  std::vector<float> got(x);
  fake_quantize(f, rows, cols, got.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto r = static_cast<float>(ref[i]);
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(r) && !(std::isnan(got[i]) && std::isnan(r))) {
      rlsim::fuzz::fail(f.str() + ": fake_quantize differs from dequantize(quantize()) at element " + std::to_string(i));
    }
  }
  if (f.element == Element::kFp4E2M1 && f.scaling.kind == ScaleKind::kNv16) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::span<const float> row(x.data() + r * cols, static_cast<std::size_t>(cols));
      const QuantizedTensor q = quantize(f, 1, cols, row);
      std::vector<std::int8_t> doubled(static_cast<std::size_t>(cols));
      std::vector<double> scales(q.scales.size());
      const double ts = quantize_nvfp4_doubled(f, row, doubled.data(), scales.data());
      if (std::bit_cast<std::uint64_t>(ts) != std::bit_cast<std::uint64_t>(q.tensor_scale))
        rlsim::fuzz::fail("nvfp4: tensor scale differs");
      for (std::size_t b = 0; b < scales.size(); ++b) {
        if (std::bit_cast<std::uint64_t>(scales[b]) != std::bit_cast<std::uint64_t>(q.scales[b]) &&
            !(std::isnan(scales[b]) && std::isnan(q.scales[b])))
          rlsim::fuzz::fail("nvfp4: block scale " + std::to_string(b) + " differs");
      }
      for (std::size_t c = 0; c < doubled.size(); ++c) {
        if (doubled[c] != static_cast<std::int8_t>(2.0 * decode(Element::kFp4E2M1, q.codes[c])))
          rlsim::fuzz::fail("nvfp4: doubled code " + std::to_string(c) + " differs");
      }
    }
  }
  return 0;
}
