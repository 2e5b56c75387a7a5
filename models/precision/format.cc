#include "models/precision/format.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace rlsim::models {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

bool parse_int(std::string_view s, int& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && out > 0;
}

// Number of scale factors of a [rows, cols] tensor under scaling `s`.
std::int64_t scale_count(const Scaling& s, std::int64_t rows, std::int64_t cols) {
  switch (s.kind) {
    case ScaleKind::kNone:
      return 0;
    case ScaleKind::kTensor:
      return 1;
    case ScaleKind::kChannel:
    case ScaleKind::kToken:
      return rows;
    case ScaleKind::kGroup1xN:
    case ScaleKind::kGroupN:
    case ScaleKind::kMx32:
    case ScaleKind::kNv16:
      return rows * ceil_div(cols, s.cols);
    case ScaleKind::kBlockMxN:
      return ceil_div(rows, s.rows) * ceil_div(cols, s.cols);
  }
  return 0;
}

}  // namespace

double Format::bytes(std::int64_t rows, std::int64_t cols) const {
  if (rows <= 0 || cols <= 0) throw std::invalid_argument("Format::bytes: shape must be positive");
  const auto& et = traits(element);
  const auto& st = traits(scaling.kind);
  double bits = static_cast<double>(rows) * cols * et.bits;
  if (et.intrinsic_block > 1) {
    bits += static_cast<double>(rows * ceil_div(cols, et.intrinsic_block)) * et.intrinsic_meta_bits;
  }
  bits += static_cast<double>(scale_count(scaling, rows, cols)) * traits(st.scale_element).bits;
  bits += st.tensor_scale_bits;
  return bits / 8.0;
}

double Format::bits_per_value(std::int64_t rows, std::int64_t cols) const {
  return bytes(rows, cols) * 8.0 / (static_cast<double>(rows) * cols);
}

std::string Format::str() const {
  std::string s(traits(element).name);
  switch (scaling.kind) {
    case ScaleKind::kNone:
      return s;
    case ScaleKind::kTensor:
      return s + "/tensor";
    case ScaleKind::kChannel:
      return s + "/channel";
    case ScaleKind::kToken:
      return s + "/token";
    case ScaleKind::kGroup1xN:
      return s + "/group1x" + std::to_string(scaling.cols);
    case ScaleKind::kBlockMxN:
      return s + "/block" + std::to_string(scaling.rows) + "x" + std::to_string(scaling.cols);
    case ScaleKind::kGroupN:
      return s + "/group" + std::to_string(scaling.cols);
    case ScaleKind::kMx32:
      return s + "/mx32";
    case ScaleKind::kNv16:
      return s + "/nv16";
  }
  return s;
}

std::optional<Element> parse_element(std::string_view name) {
  for (const auto& t : kElementTraits) {
    if (t.name == name) return t.element;
  }
  return std::nullopt;
}

std::string element_names() {
  std::string out;
  for (const auto& t : kElementTraits) {
    if (t.scale_only) continue;
    if (!out.empty()) out += ", ";
    out += t.name;
  }
  return out;
}

std::optional<Format> short_format(std::string_view name) {
  if (name == "mxfp8") return Format{Element::kFp8E4M3, {ScaleKind::kMx32, 1, 32}};
  if (name == "mxfp4") return Format{Element::kFp4E2M1, {ScaleKind::kMx32, 1, 32}};
  if (name == "nvfp4") return Format{Element::kFp4E2M1, {ScaleKind::kNv16, 1, 16}};
  return std::nullopt;
}

Format parse_format(std::string_view text) {
  if (auto f = short_format(text)) return *f;
  const auto slash = text.find('/');
  const std::string_view el = text.substr(0, slash);
  const auto e = parse_element(el);
  if (!e || traits(*e).scale_only) {
    throw std::invalid_argument("unknown element format '" + std::string(el) + "' (expected one of: " + element_names() +
                                ", or mxfp8, mxfp4, nvfp4)");
  }
  Format f{*e, {}};
  if (slash == std::string_view::npos) return f;
  if (*e == Element::kHif4) {
    throw std::invalid_argument("'" + std::string(text) +
                                "': hif4 carries its own three-level scale per 64 elements (arXiv 2602.11287); write 'hif4'");
  }
  const std::string_view sc = text.substr(slash + 1);
  const std::string bad =
      "unknown scaling '" + std::string(sc) + "' (expected tensor, channel, token, group1xN, blockMxN, groupN, mx32, nv16)";
  int a = 0, b = 0;
  if (sc == "tensor")
    f.scaling = {ScaleKind::kTensor, 1, 1};
  else if (sc == "channel")
    f.scaling = {ScaleKind::kChannel, 1, 1};
  else if (sc == "token")
    f.scaling = {ScaleKind::kToken, 1, 1};
  else if (sc == "mx32")
    f.scaling = {ScaleKind::kMx32, 1, 32};
  else if (sc == "nv16")
    f.scaling = {ScaleKind::kNv16, 1, 16};
  else if (sc.starts_with("group1x") && parse_int(sc.substr(7), b))
    f.scaling = {ScaleKind::kGroup1xN, 1, b};
  else if (sc.starts_with("group") && parse_int(sc.substr(5), b))
    f.scaling = {ScaleKind::kGroupN, 1, b};
  else if (sc.starts_with("block")) {
    const auto x = sc.find('x');
    if (x == std::string_view::npos || !parse_int(sc.substr(5, x - 5), a) || !parse_int(sc.substr(x + 1), b)) {
      throw std::invalid_argument(bad);
    }
    f.scaling = {ScaleKind::kBlockMxN, a, b};
  } else {
    throw std::invalid_argument(bad);
  }
  return f;
}

std::string_view compute_name(ComputeType c) { return traits(c).name; }

std::optional<ComputeType> parse_compute(std::string_view name) {
  for (const auto& t : kComputeTraits) {
    if (t.name == name) return t.compute;
  }
  return std::nullopt;
}

ComputeType gemm_compute(const Format& weight, const Format& activation) {
  const ComputeType w = traits(weight.element).compute;
  const ComputeType a = traits(activation.element).compute;
  if (traits(w).width_rank != traits(a).width_rank) return traits(w).width_rank > traits(a).width_rank ? w : a;
  return a;  // same width: the activation's type (int8 x int8 -> int8, fp8 x fp8 -> fp8)
}

}  // namespace rlsim::models
