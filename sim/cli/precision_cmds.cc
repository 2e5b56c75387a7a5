#include "sim/cli/precision_cmds.h"

#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <iostream>
#include <iterator>
#include <limits>
#include <span>
#include <vector>

#include "models/precision/pack.h"
#include "sim/cli/runtime_cmds.h"
#include "sim/engine/random.h"
#include "sim/scenario/scenario.h"

namespace rlsim::cli {
namespace {

using models::Element;
using models::Format;

Format resolve_format(const QuantizeOptions& o) {
  Format f;
  try {
    if (o.format == "e8m0") {
      f = Format{Element::kE8M0, {}};
    } else {
      f = models::parse_format(o.format);
    }
    if (!o.scaling.empty()) {
      if (f.scaling.kind != models::ScaleKind::kNone || f.element == Element::kE8M0) {
        throw std::invalid_argument("--scaling given but --format '" + o.format + "' already fixes its scaling");
      }
      f = models::parse_format(std::string(models::traits(f.element).name) + "/" + o.scaling);
    }
  } catch (const std::invalid_argument& e) {
    throw sim::ScenarioError(std::string("rlsim quantize: ") + e.what());
  }
  return f;
}

// Numbers from the text, with the line and column of each token for error messages.
std::vector<double> read_numbers(const std::string& text) {
  std::vector<double> v;
  std::size_t i = 0, line = 1, line_start = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      line_start = ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    std::string_view tok(text.data() + i, j - i);
    const std::string_view digits = tok.starts_with('+') ? tok.substr(1) : tok;
    double x = 0;
    const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), x);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size()) {
      throw sim::ScenarioError(
          fmt::format("stdin:{}:{}: expected a number (decimal, nan or inf), got '{}'", line, i - line_start + 1, tok));
    }
    v.push_back(x);
    i = j;
  }
  return v;
}

std::string number(double x) {
  if (std::isnan(x)) return "nan";
  return fmt::format("{}", x);
}

}  // namespace

int cmd_quantize(const QuantizeOptions& o, std::istream& in, std::ostream& out) {
  const Format f = resolve_format(o);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  const std::vector<double> x = read_numbers(text);
  if (x.empty()) throw sim::ScenarioError("rlsim quantize: no numbers on stdin");
  std::int64_t rows = 1, cols = static_cast<std::int64_t>(x.size());
  if (!o.shape.empty()) {
    const auto comma = o.shape.find(',');
    // Each side at most 2^31, so R x C cannot overflow (and no input holds that many values).
    auto parse = [&](std::string_view s, std::int64_t& v) {
      const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      return ec == std::errc() && p == s.data() + s.size() && v > 0 && v <= (std::int64_t{1} << 31);
    };
    if (comma == std::string::npos || !parse(std::string_view(o.shape).substr(0, comma), rows) ||
        !parse(std::string_view(o.shape).substr(comma + 1), cols)) {
      throw sim::ScenarioError("rlsim quantize: --shape '" + o.shape + "': expected R,C with integers in 1..2^31");
    }
    if (rows * cols != static_cast<std::int64_t>(x.size())) {
      throw sim::ScenarioError(
          fmt::format("rlsim quantize: --shape {}x{} needs {} values, stdin has {}", rows, cols, rows * cols, x.size()));
    }
  }
  models::QuantizedTensor q;
  try {
    q = models::quantize(f, rows, cols, x);
  } catch (const std::invalid_argument& e) {
    throw sim::ScenarioError(std::string("rlsim quantize: ") + e.what());
  }
  const std::vector<double> y = models::dequantize(q);
  const int hex_digits = (models::traits(f.element).bits + 3) / 4;
  std::string body;
  for (std::size_t i = 0; i < y.size(); ++i) {
    body += number(y[i]);
    if (o.codes) body += fmt::format(" 0x{:0{}x}", q.codes[i], hex_digits);
    body += '\n';
  }
  std::vector<double> xs, ys;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i]) && std::isfinite(y[i])) {
      xs.push_back(x[i]);
      ys.push_back(y[i]);
    }
  }
  const double db = xs.empty() ? std::numeric_limits<double>::quiet_NaN() : models::sqnr_db(xs, ys);
  out << body
      << fmt::format("summary: {} values, saturated {}, sqnr {} dB (format {}, shape {}x{})\n", x.size(), q.saturated,
                     std::isnan(db) ? "nan" : (std::isinf(db) ? "inf" : fmt::format("{:.2f}", db)),
                     f.element == Element::kE8M0 ? "e8m0" : f.str(), rows, cols);
  return 0;
}

void print_formats(std::ostream& out) {
  out << "element      bits  largest finite   smallest > 0     tensor core\n";
  for (const auto& t : models::kElementTraits) {
    // Smallest positive value: the code 1 of a float element (its smallest subnormal or, for E8M0, 2^-127).
    const double smallest = t.element == Element::kFp32 ? static_cast<double>(std::numeric_limits<float>::denorm_min())
                            : t.is_float                ? models::decode(t.element, t.element == Element::kE8M0 ? 0u : 1u)
                                                        : 1.0;
    out << fmt::format("{:<12} {:>4}  {:<16g} {:<16g} {}{}\n", t.name, t.bits, t.max_finite, smallest,
                       models::compute_name(t.compute), t.scale_only ? " (scale element only)" : "");
  }
  struct Col {
    const char* head;
    const char* scaling;  // appended after '/'; nullptr: unscaled
  };
  const Col cols[] = {
      {"none", nullptr},  {"tensor", "tensor"}, {"channel", "channel"}, {"1x128", "group1x128"}, {"128x128", "block128x128"},
      {"g32", "group32"}, {"g128", "group128"}, {"mx32", "mx32"},       {"nv16", "nv16"}};
  out << "\nbits per value of a 4096 x 4096 tensor, scale storage included (scale type: tensor/channel/1x128/128x128 FP32,\n"
         "gN BF16, mx32 E8M0, nv16 E4M3 + FP32 per tensor; hif4 carries 32 bits of metadata per 64 elements)\n";
  out << fmt::format("{:<12}", "element");
  for (const auto& c : cols) out << fmt::format(" {:>8}", c.head);
  out << "\n";
  for (const auto& t : models::kElementTraits) {
    if (t.scale_only) continue;
    out << fmt::format("{:<12}", t.name);
    for (const auto& c : cols) {
      std::string cell = "-";
      if (c.scaling == nullptr || t.element != Element::kHif4) {
        const auto f = models::parse_format(c.scaling ? std::string(t.name) + "/" + c.scaling : std::string(t.name));
        cell = fmt::format("{:.4f}", f.bits_per_value(4096, 4096));
      }
      out << fmt::format(" {:>8}", cell);
    }
    out << "\n";
  }
  out << "\nshort names: mxfp8 = fp8-e4m3/mx32, mxfp4 = fp4-e2m1/mx32, nvfp4 = fp4-e2m1/nv16\n";
}

int bench_quantize(int repeat, std::ostream& out) {
  keep_freed_memory();  // repeated runs time the quantiser on warm memory, as a weight-sync process has
  constexpr std::int64_t n = 4096;
  // BF16 weights: N(0, 0.02) rounded to BF16, kept as their 16-bit patterns.
  std::vector<std::uint16_t> bf16(static_cast<std::size_t>(n * n));
  sim::Rng rng(1);
  for (auto& b : bf16) b = static_cast<std::uint16_t>(models::encode(Element::kBf16, 0.02 * rng.normal()));
  const double in_bytes = static_cast<double>(bf16.size()) * 2.0;
  out << fmt::format("rlsim bench quantize: {} x {} BF16 matrix ({:.1f} MiB) -> packed storage, one core, best of {}\n", n, n,
                     in_bytes / (1 << 20), repeat);
  out << fmt::format("  {:<24} {:>9} {:>9} {:>10}\n", "format", "GB/s", "seconds", "SQNR dB");
  for (const char* name : {"fp8-e4m3/tensor", "fp8-e4m3/channel", "fp8-e4m3/block128x128", "fp8-e4m3/group1x128", "mxfp8",
                           "int8/channel", "int4/group32", "int4/group128", "mxfp4", "nvfp4", "hif8/tensor", "hif4"}) {
    const Format f = models::parse_format(name);
    double best = std::numeric_limits<double>::infinity();
    double db = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<float> x(bf16.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(bf16[i]) << 16);  // BF16 -> FP32, exact
      const models::QuantizedTensor q = models::quantize(f, n, n, std::span<const float>(x));
      const models::PackedTensor p = models::pack(q);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      if (r == 0) db = models::sqnr_db(std::vector<double>(x.begin(), x.end()), models::dequantize(q));
      if (p.storage_bytes() == 0) throw std::logic_error("bench quantize: nothing packed");
    }
    out << fmt::format("  {:<24} {:>9.3f} {:>9.3f} {:>10.2f}\n", f.str(), in_bytes / best / 1e9, best, db);
  }
  return 0;
}

}  // namespace rlsim::cli
