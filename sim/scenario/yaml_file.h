// Reading a YAML input file (scenario, study) with errors reported the one way rlsim reports bad
// input: file:line:column and what went wrong.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

namespace rlsim::sim {

/// The whole text of the input file `path`; `what` names it in messages ("scenario file", "verl
/// console log"). Throws ScenarioError "PATH: cannot open WHAT (REASON)", REASON the system's.
std::string read_input_file(const std::string& path, const std::string& what);

/// Reads and parses the YAML file `path`; `what` names it in messages ("scenario file", "study
/// file"). Throws ScenarioError: "PATH: cannot open WHAT" when it cannot be read, or
/// "PATH:LINE:COLUMN: YAML syntax error: ..." (1-based) when it does not parse.
YAML::Node load_yaml_file(const std::string& path, const std::string& what);

}  // namespace rlsim::sim
