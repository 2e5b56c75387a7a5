// Quantities with units, as written in scenario and catalog files ("96 GB", "4.8 TB/s",
// "400 Gb/s", "2 us", "989 TFLOPS"). A bare number is an error: every quantity names its unit.
#pragma once

#include <string>
#include <string_view>

namespace rlsim::sim {

/// What a quantity measures; each kind has its own accepted units.
enum class Dimension { kBytes, kBandwidth, kTime, kFlops };

/// Parses "<number> <unit>" (space optional) into SI base units: bytes, bytes/s, seconds, FLOP/s.
/// Decimal prefixes are powers of 1000 (GB = 1e9 B), binary ones powers of 1024 (GiB = 2^30 B);
/// bit rates (Gb/s, Gbps) are divided by 8. Throws std::invalid_argument with a message naming
/// the expected units when the text has no unit, a unit of another dimension, or a negative or
/// malformed number.
double parse_quantity(std::string_view text, Dimension dim);

/// The accepted units of a dimension, for error messages.
std::string unit_examples(Dimension dim);

/// `value` (SI base units) in the named `unit` of `dim`, as "{:g} UNIT" (6 significant digits:
/// "96 GB", "64 MiB", "2 us"), text parse_quantity reads. std::invalid_argument for a unit `dim`
/// does not accept.
std::string quantity_in(double value, Dimension dim, std::string_view unit);

/// Formats a value in a readable unit ("80.0 GB", "3.35 TB/s", "1.50 ms", "989 TFLOPS").
std::string format_quantity(double value, Dimension dim);

}  // namespace rlsim::sim
