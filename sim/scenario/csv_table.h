// Reading a CSV input file (a length trace, llama-bench results) with errors reported the one way
// rlsim reports bad input.
#pragma once

#include <string>
#include <vector>

namespace rlsim::sim {

/// The rows of the CSV file `path` (RFC 4180, parsed by libcsv), the header first, each row its
/// fields as written (quotes removed); `what` names the file in messages ("length trace"). Row i
/// is line i + 1 of the file when no field spans lines. Throws ScenarioError "PATH: cannot open
/// WHAT (REASON)", "PATH: CSV parse error: ..." or "PATH:1: empty CSV file (expected a header
/// row)".
std::vector<std::vector<std::string>> read_csv_table(const std::string& path, const std::string& what);

}  // namespace rlsim::sim
