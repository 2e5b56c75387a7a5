#include "sim/scenario/units.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace rlsim::sim {
namespace {

using UnitTable = std::initializer_list<std::pair<std::string_view, double>>;

const UnitTable& units_of(Dimension dim) {
  static const UnitTable bytes{{"B", 1.0},         {"KB", 1e3},           {"MB", 1e6},
                               {"GB", 1e9},        {"TB", 1e12},          {"KiB", 1024.0},
                               {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  static const UnitTable bandwidth{{"B/s", 1.0},    {"KB/s", 1e3},        {"MB/s", 1e6},           {"GB/s", 1e9},
                                   {"TB/s", 1e12},  {"MiB/s", 1048576.0}, {"GiB/s", 1073741824.0}, {"Kb/s", 125.0},
                                   {"Mb/s", 125e3}, {"Gb/s", 125e6},      {"Tb/s", 125e9},         {"Gbps", 125e6},
                                   {"Mbps", 125e3}};
  static const UnitTable time{{"ns", 1e-9}, {"us", 1e-6}, {"µs", 1e-6}, {"ms", 1e-3}, {"s", 1.0}, {"min", 60.0}, {"h", 3600.0}};
  static const UnitTable flops{{"FLOPS", 1.0},   {"GFLOPS", 1e9}, {"TFLOPS", 1e12},
                               {"PFLOPS", 1e15}, {"TOPS", 1e12},  {"POPS", 1e15}};
  switch (dim) {
    case Dimension::kBytes:
      return bytes;
    case Dimension::kBandwidth:
      return bandwidth;
    case Dimension::kTime:
      return time;
    case Dimension::kFlops:
      return flops;
  }
  return bytes;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string unit_examples(Dimension dim) {
  std::string out;
  for (const auto& [name, _] : units_of(dim)) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

double parse_quantity(std::string_view text, Dimension dim) {
  const std::string_view t = trim(text);
  std::size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.' || t[i] == 'e' || t[i] == 'E' ||
                          t[i] == '+' || t[i] == '-')) {
    // stop at a unit that starts with 'E'/'e' only if no digit follows (e.g. "1 EB" is not a unit here)
    if ((t[i] == 'e' || t[i] == 'E') &&
        (i + 1 >= t.size() || !(std::isdigit(static_cast<unsigned char>(t[i + 1])) || t[i + 1] == '-' || t[i + 1] == '+'))) {
      break;
    }
    ++i;
  }
  const std::string expect = "expected a number and a unit (" + unit_examples(dim) + ")";
  double value = 0;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + i, value);
  if (i == 0 || ec != std::errc() || p != t.data() + i) {
    throw std::invalid_argument("'" + std::string(text) + "' is not a quantity: " + expect);
  }
  const std::string_view unit = trim(t.substr(i));
  if (unit.empty()) {
    throw std::invalid_argument("'" + std::string(text) + "' has no unit: " + expect);
  }
  if (value < 0 || !std::isfinite(value)) {
    throw std::invalid_argument("'" + std::string(text) + "' must be a non-negative finite quantity");
  }
  for (const auto& [name, factor] : units_of(dim)) {
    if (unit == name) return value * factor;
  }
  throw std::invalid_argument("'" + std::string(text) + "': unknown unit '" + std::string(unit) + "', " + expect);
}

std::string quantity_in(double value, Dimension dim, std::string_view unit) {
  for (const auto& [name, factor] : units_of(dim)) {
    if (unit == name) return fmt::format("{:g} {}", value / factor, name);
  }
  throw std::invalid_argument("quantity_in: unknown unit '" + std::string(unit) + "' (" + unit_examples(dim) + ")");
}

std::string format_quantity(double value, Dimension dim) {
  switch (dim) {
    case Dimension::kBytes:
      if (value >= 1e12) return fmt::format("{:.2f} TB", value / 1e12);
      if (value >= 1e9) return fmt::format("{:.2f} GB", value / 1e9);
      if (value >= 1e6) return fmt::format("{:.2f} MB", value / 1e6);
      return fmt::format("{:.0f} B", value);
    case Dimension::kBandwidth:
      if (value >= 1e12) return fmt::format("{:g} TB/s", value / 1e12);
      if (value >= 1e9) return fmt::format("{:g} GB/s", value / 1e9);
      return fmt::format("{:g} MB/s", value / 1e6);
    case Dimension::kTime:
      if (value >= 1.0) return fmt::format("{:g} s", value);
      if (value >= 1e-3) return fmt::format("{:g} ms", value * 1e3);
      if (value >= 1e-6) return fmt::format("{:g} us", value * 1e6);
      return fmt::format("{:g} ns", value * 1e9);
    case Dimension::kFlops:
      return fmt::format("{:g} TFLOPS", value / 1e12);
  }
  return {};
}

}  // namespace rlsim::sim
