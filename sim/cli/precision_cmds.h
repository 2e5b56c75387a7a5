// The precision subcommands of `rlsim`: quantize (stdin numbers through a format), catalog formats
// (the trait table with bits per value) and bench quantize (host quantisation throughput).
#pragma once

#include <iosfwd>
#include <string>

namespace rlsim::cli {

/// Options of `rlsim quantize`.
struct QuantizeOptions {
  std::string format;   // "<element>[/<scaling>]" or a short name; "e8m0" for the bare scale element
  std::string scaling;  // optional scaling added to a bare element ("tensor", "group32", "block128x128" ...)
  std::string shape;    // "R,C"; empty: one row of all the values read
  bool codes = false;   // also print each element's code in hex
};

/// `rlsim quantize`: reads whitespace-separated numbers (nan, inf accepted) from `in`, quantises
/// them as one [R, C] tensor, prints each dequantised value on its own line (shortest round-trip
/// decimal; with --codes followed by the element code in hex), then one summary line:
/// `summary: N values, saturated S, sqnr X dB (format F, shape RxC)` (SQNR over the finite inputs;
/// "inf" when exact). Throws sim::ScenarioError (exit 2) naming `stdin:line:column` for a token that
/// is not a number, for an unknown format or scaling, or a shape that does not match the count.
int cmd_quantize(const QuantizeOptions& o, std::istream& in, std::ostream& out);

/// `rlsim catalog formats`: the element table (bits, largest finite and smallest positive value,
/// tensor-core type) and the bits per value of every element under every scaling, scale storage
/// included, for a 4096 x 4096 tensor.
void print_formats(std::ostream& out);

/// `rlsim bench quantize`: quantises a 4096 x 4096 BF16 matrix (N(0, 0.02) weights, seed 1) to each
/// weight format on one core, from BF16 bits to packed storage, and prints GB/s of BF16 input and
/// the SQNR; best of `repeat` runs per format.
int bench_quantize(int repeat, std::ostream& out);

}  // namespace rlsim::cli
