// Reading a CSV input file (a length trace, llama-bench results) with errors reported the one way
// rlsim reports bad input.
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlsim::sim {

/// The rows of the CSV file `path` (RFC 4180, parsed by libcsv), the header first, each row its
/// fields as written (quotes removed); `what` names the file in messages ("length trace"). Row i
/// is line i + 1 of the file when no field spans lines. Throws ScenarioError "PATH: cannot open
/// WHAT (REASON)", "PATH: CSV parse error: ..." or "PATH:1: empty CSV file (expected a header
/// row)".
std::vector<std::vector<std::string>> read_csv_table(const std::string& path, const std::string& what);

/// A whole CSV field as a number of type T (std::from_chars: no leading '+' or space, nothing after
/// the digits; "nan" and "inf" parse for floating-point T), or nullopt; the caller checks the range.
template <typename T>
std::optional<T> csv_number(std::string_view field) {
  T v{};
  const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), v);
  if (ec != std::errc() || ptr != field.data() + field.size()) return std::nullopt;
  return v;
}

}  // namespace rlsim::sim
